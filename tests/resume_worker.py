"""A tiny self-contained training run for the checkpoint, resume and multi-process tests.

It trains a 2-layer MiniGPT on a synthetic, learnable token dataset with a plain `Trainer` and the
run's checkpoint and stop callbacks, exactly as the real CLI does (stop controller, signal handlers,
complete-checkpoint markers, explicit resume path, process group teardown), without depending on the tokenizer, data or config modules. Test hooks:
`--kill-at-step N` SIGKILLs the process at the end of step N (before that step's checkpoint);
`--kill-in-save-at N` SIGKILLs it half way through writing checkpoint N.

Runs alone (`python tests/resume_worker.py ...`) or under `accelerate launch`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import torch
import yaml
from safetensors.torch import save_file
from transformers import Trainer, TrainerCallback, TrainingArguments, default_data_collator

from minigpt import MiniGPTConfig, MiniGPTForCausalLM
from minigpt.distributed import is_main_process, teardown_distributed
from minigpt.training.callbacks import StopTrainingCallback
from minigpt.training.checkpoints import CompleteCheckpointCallback, find_resume_checkpoint
from minigpt.training.interrupt import StopController

VOCAB = 61
SEQ_LEN = 16


class ProgressionDataset(torch.utils.data.Dataset):
    """Arithmetic progressions mod VOCAB: random start and stride, so the loss can fall."""

    def __init__(self, num_samples: int, seed: int = 1234) -> None:
        generator = torch.Generator().manual_seed(seed)
        start = torch.randint(0, VOCAB, (num_samples, 1), generator=generator)
        stride = torch.randint(1, 4, (num_samples, 1), generator=generator)
        self.ids = (start + stride * torch.arange(SEQ_LEN)) % VOCAB  # (N, T)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class PrintSteps(TrainerCallback):
    """`step N` on stdout after every optimizer step, and an optional pause after one step, so a
    test can send a signal at a known step."""

    def __init__(
        self,
        controller: StopController | None,
        pause_after_step: int | None,
        pause_seconds: float,
        pid_dir: str | None = None,
    ) -> None:
        self.controller = controller  # a stop request ends the pause early, unless None
        self.pause_after_step = pause_after_step
        self.pause_seconds = pause_seconds
        self.pid_dir = pid_dir

    def on_train_begin(self, args, state, control, **kwargs):
        # Every process leaves its pid in a file (a line on a stdout shared by several processes
        # can be glued to another process's partial line).
        if self.pid_dir is not None:
            Path(self.pid_dir).mkdir(parents=True, exist_ok=True)
            Path(self.pid_dir, str(args.process_index)).write_text(str(os.getpid()))

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            print(f"step {state.global_step}", flush=True)
        if state.global_step == self.pause_after_step:
            deadline = time.monotonic() + self.pause_seconds
            while time.monotonic() < deadline and not (self.controller and self.controller.stop_requested):
                time.sleep(0.05)  # touches no RNG


class KillAtStep(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class RequestStopAtStep(TrainerCallback):
    """Calls `StopController.request_stop()` from a second thread at step N, as a UI would."""

    def __init__(self, controller: StopController, step: int) -> None:
        self.controller = controller
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            thread = threading.Thread(target=self.controller.request_stop, args=("stop button",))
            thread.start()
            thread.join()


class KillInSaveTrainer(Trainer):
    """Dies after the model and optimizer of checkpoint `kill_in_save_at` are written, before the rest
    (a test hook inside Trainer's save: no public event fires there)."""

    kill_in_save_at: int | None = None

    def _save_rng_state(self, output_dir: str) -> None:
        if self.state.global_step == self.kill_in_save_at:
            os.kill(os.getpid(), signal.SIGKILL)
        super()._save_rng_state(output_dir)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--result", help="write final weights (.safetensors) and losses (.json) here")
    parser.add_argument("--max-steps", type=int, default=12)
    parser.add_argument("--save-steps", type=int, default=4)
    parser.add_argument("--logging-steps", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8, help="per process")
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--num-samples", type=int, default=48)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--save-total-limit", type=int, default=None)
    parser.add_argument(
        "--best-is-highest-train-loss",
        action="store_true",
        help="evaluate on the training set each save and call the highest loss best, so the best "
        "checkpoint is an old one (exercises rotation keeping it)",
    )
    parser.add_argument("--stop-at-step", type=int, default=None, help="StopController.request_stop() here")
    parser.add_argument("--kill-at-step", type=int, default=None)
    parser.add_argument("--kill-in-save-at", type=int, default=None)
    parser.add_argument("--pause-after-step", type=int, default=None, help="sleep --pause seconds after it")
    parser.add_argument("--pause", type=float, default=5.0)
    parser.add_argument("--pid-dir", help="each process writes its pid to PID_DIR/<process index>")
    parser.add_argument(
        "--pause-ignores-stop", action="store_true", help="pause the full time even after a stop"
    )
    parser.add_argument("--resume", action="store_true")
    return parser.parse_args(argv)


def train(options: argparse.Namespace, controller: StopController) -> dict | None:
    """Run training; return the final state (main process only) or None."""
    best_model_options = {}
    if options.best_is_highest_train_loss:
        best_model_options = dict(
            eval_strategy="steps",
            eval_steps=options.save_steps,
            metric_for_best_model="eval_loss",
            greater_is_better=True,
            load_best_model_at_end=True,
        )
    args = TrainingArguments(
        output_dir=options.output_dir,
        max_steps=options.max_steps,
        per_device_train_batch_size=options.batch_size,
        gradient_accumulation_steps=options.grad_accum,
        learning_rate=3e-3,
        warmup_steps=2,
        lr_scheduler_type="cosine",
        weight_decay=0.1,
        logging_steps=options.logging_steps,
        save_strategy="steps",
        save_steps=options.save_steps,
        save_total_limit=None,  # CompleteCheckpointCallback rotates, once a checkpoint is complete
        seed=7,
        use_cpu=True,
        disable_tqdm=True,
        report_to="none",
        dataloader_num_workers=0,
        **best_model_options,
    )
    torch.manual_seed(args.seed)
    config = MiniGPTConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=SEQ_LEN,
        hidden_dropout=options.dropout,
        attention_dropout=options.dropout,
    )
    pause_ender = None if options.pause_ignores_stop else controller
    resolved = {"model": config.to_diff_dict(), "data": {"num_samples": options.num_samples}}
    callbacks = [
        PrintSteps(pause_ender, options.pause_after_step, options.pause, options.pid_dir),
    ]
    if options.kill_at_step is not None:
        callbacks.append(KillAtStep(options.kill_at_step))
    if options.stop_at_step is not None:
        callbacks.append(RequestStopAtStep(controller, options.stop_at_step))
    callbacks.append(StopTrainingCallback(controller))  # it sees a stop asked at this step
    callbacks.append(CompleteCheckpointCallback(yaml.safe_dump(resolved, sort_keys=False), options.save_total_limit))
    KillInSaveTrainer.kill_in_save_at = options.kill_in_save_at
    model = MiniGPTForCausalLM(config)
    trainer = KillInSaveTrainer(
        model=model,
        args=args,
        train_dataset=ProgressionDataset(options.num_samples),
        eval_dataset=ProgressionDataset(16) if options.best_is_highest_train_loss else None,
        data_collator=default_data_collator,
        callbacks=callbacks,
    )
    checkpoint = find_resume_checkpoint(options.output_dir) if options.resume else None
    trainer.train(resume_from_checkpoint=checkpoint)
    if not trainer.is_world_process_zero():
        return None
    weights = {
        name: tensor.detach().clone().contiguous() for name, tensor in trainer.model.state_dict().items()
    }
    losses = [(entry["step"], entry["loss"]) for entry in trainer.state.log_history if "loss" in entry]
    return {"weights": weights, "losses": losses, "global_step": trainer.state.global_step}


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # whole lines per write when processes share a pipe
    controller = StopController()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # same reductions in every run (and fair to other work on the machine)
    try:
        with controller.install_signal_handlers():
            result = train(options, controller)  # the Trainer is dropped when train() returns
    finally:
        torch.set_num_threads(threads)
        teardown_distributed()
    if controller.stop_requested:
        if is_main_process():
            print(
                f"training stopped at step {controller.stopped_at_step} ({controller.reason}); "
                f"resume with: python tests/resume_worker.py --output-dir {options.output_dir} --resume",
                file=sys.stderr,
            )
        return controller.exit_code
    if result is not None and options.result:
        weights = result.pop("weights")
        # Tied embeddings share storage; save_file refuses shared tensors, so drop the tied copy.
        weights.pop("lm_head.weight", None)
        save_file(weights, f"{options.result}.safetensors")
        with open(f"{options.result}.json", "w") as handle:
            json.dump(result, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
