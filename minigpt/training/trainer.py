"""MiniGPT's `transformers.Trainer` subclass: what the stock Trainer cannot be told by arguments.

Weight-decay groups (matrices only, embeddings optional), the warmup_stable_decay schedule whose end
a time budget can move, Muon on the hidden matrices beside AdamW, a stop that cuts an evaluation
short, and derived metrics (tokens/s, MFU, perplexity) in every log record. Evaluation sums each
block's losses itself (`text_scores.py`), so bits per byte counts the text's tokens and bytes only:
the Trainer's mean loss cannot leave out the separators between documents.
Checkpoints are atomic and carry the resolved run config (`AtomicCheckpointTrainer`, checkpoints.py).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn
from transformers.trainer_callback import ProgressCallback
from transformers.trainer_utils import EvalLoopOutput

from ..errors import ConfigError
from .checkpoints import AtomicCheckpointTrainer
from .optimizers import muon_with_adamw
from .peak_flops import PeakFlops
from .text_scores import bits_per_byte, block_targets, next_token_scores
from .throughput import ThroughputMeter
from .time_budget import WarmupStableDecay


class _EvaluationStopped(Exception):
    """A stop was requested during an evaluation inside training: the rest of it is skipped."""


class MiniGPTTrainer(AtomicCheckpointTrainer):
    """Trainer with MiniGPT's weight-decay groups, schedule, Muon option, stop during evaluation,
    and derived metrics in every log record.

    Checkpoints are atomic and carry the resolved run config (AtomicCheckpointTrainer).
    """

    def __init__(
        self,
        *args: Any,
        decay_embeddings: bool = False,
        throughput: ThroughputMeter | None = None,
        token_bytes: torch.Tensor | None = None,
        validation_blocks: int | None = None,
        schedule: WarmupStableDecay | None = None,
        muon_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.schedule = schedule  # warmup_stable_decay's multiplier; None: Trainer's own schedules
        self.decay_embeddings = decay_embeddings
        self.muon_kwargs = muon_kwargs  # torch.optim.Muon's keywords under training.optim muon, else None
        self.throughput = throughput
        # (vocab,) UTF-8 bytes per token id (minigpt.data.token_bytes); None: no bits per byte
        self.token_bytes = token_bytes
        self.validation_blocks = validation_blocks  # blocks in the split the evaluation blocks come from
        self.peak_flops: PeakFlops | None = None  # MFU's peak and its source (build_trainer sets it)

    def get_decay_parameter_names(self, model: nn.Module) -> list[str]:
        """Weight matrices only: no norm weights or biases (by shape, whatever their names), and no
        embeddings (and so the tied output head) unless `training.decay_embeddings` is set, as minGPT
        does: a row of an embedding table only gets gradient when its token occurs, so decay would
        steadily shrink rare tokens toward zero.
        """
        # Trainer finds norms by class and name; an RMSNorm named ln_1 passes both tests, so keep
        # matrices only (ndim >= 2), which leaves out every norm weight and bias whatever its name.
        matrices = {name for name, param in model.named_parameters() if param.ndim >= 2}
        names = [name for name in super().get_decay_parameter_names(model) if name in matrices]
        if self.decay_embeddings:
            return names
        embedding_params = {
            f"{module_name}.{param_name}" if module_name else param_name
            for module_name, module in model.named_modules()
            if isinstance(module, nn.Embedding)
            for param_name, _ in module.named_parameters(recurse=False)
        }
        return [name for name in names if name not in embedding_params]

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        """warmup_stable_decay as `WarmupStableDecay`, whose end a time budget can move (Trainer's
        own takes a fixed decay length); every other schedule is Trainer's."""
        if self.schedule is None:
            return super().create_scheduler(num_training_steps, optimizer)
        if self.lr_scheduler is None:
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer or self.optimizer, self.schedule)
        return self.lr_scheduler

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        """Trainer's optimizer, or under `training.optim: muon` Muon on the hidden matrices and
        Trainer's AdamW on the rest (optimizers.py); Trainer schedules, clips, steps and saves it."""
        if self.muon_kwargs is None or self.optimizer is not None:
            return super().create_optimizer(model)
        if self.is_fsdp_enabled or self.is_deepspeed_enabled:  # they hand the optimizer shards of a matrix
            raise ConfigError("training.optim muon needs whole matrices: use DDP, not FSDP or DeepSpeed")
        model = self.model if model is None else model
        decayed = self.get_decay_parameter_names(model)
        self.optimizer = muon_with_adamw(model, self.args, decayed, self.muon_kwargs)
        return self.optimizer

    def prediction_step(
        self, model: nn.Module, inputs: Any, prediction_loss_only: bool, ignore_keys: Any = None
    ) -> Any:
        """Trainer's, but a stop requested mid-evaluation skips the rest (see `evaluate`)."""
        controller = self.stop_controller
        if controller is not None and controller.stop_requested and self.args.world_size == 1:
            raise _EvaluationStopped  # several processes would have to agree on the batch: not cut
        if self.token_bytes is None or "labels" not in inputs:
            return super().prediction_step(model, inputs, prediction_loss_only, ignore_keys=ignore_keys)
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad():
            logits = model(**{k: v for k, v in inputs.items() if k != "labels"}).logits  # (B, T, V)
        scores = next_token_scores(logits, block_targets(inputs["labels"]), self.token_bytes)  # (B, 5)
        loss = scores[:, 0].sum() / scores[:, 1].sum()  # the model's own loss: mean nats per prediction
        # The per-block sums travel as the "logits": Trainer gathers them across processes
        # (dropping the blocks repeated to even out the last batch) and evaluation_loop sums them.
        return loss.detach(), scores, None

    def evaluation_loop(
        self,
        dataloader: Any,
        description: str,
        prediction_loss_only: bool | None = None,
        ignore_keys: list[str] | None = None,
        metric_key_prefix: str = "eval",
    ) -> EvalLoopOutput:
        """Trainer's, plus bits per byte from the gathered per-block sums of `prediction_step`."""
        output = super().evaluation_loop(dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix)
        if self.token_bytes is not None and output.predictions is not None:
            output.metrics[f"{metric_key_prefix}_bpb"] = bits_per_byte(output.predictions)
        return output

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Trainer's, except that Ctrl-C during an evaluation inside training does not wait for the
        whole validation set: the evaluation is dropped (nothing logged) and the run saves and stops."""
        try:
            return super().evaluate(*args, **kwargs)
        except _EvaluationStopped:
            for callback in self.callback_handler.callbacks:  # the evaluation's progress bar
                if isinstance(callback, ProgressCallback) and callback.prediction_bar is not None:
                    callback.prediction_bar.close()
                    callback.prediction_bar = None
            self.control.should_save = True
            self.control.should_training_stop = True
            if self.stop_controller is not None:
                self.stop_controller.stopped_at_step = self.state.global_step
            return {}

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Add tokens/s, MFU and tokens seen to training records; perplexity and blocks read to eval ones."""
        if "loss" in logs and self.throughput is not None:
            logs.update(self.throughput.take_window())
            logs["tokens_seen"] = self.state.global_step * self.throughput.tokens_per_step
        if "eval_loss" in logs:  # the validation blocks' mean loss per prediction, in nats
            logs["eval_perplexity"] = math.exp(min(logs["eval_loss"], 50.0))  # capped: exp overflows
            if self.validation_blocks is not None and self.eval_dataset is not None:
                logs["eval_blocks"] = len(self.eval_dataset)  # read by the evaluation, of ...
                logs["validation_blocks"] = self.validation_blocks  # ... the split's
        super().log(logs, start_time)


__all__ = ["MiniGPTTrainer"]
