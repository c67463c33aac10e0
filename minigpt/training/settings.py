"""The typed sections of a run config: `model`, `training`, `hardware` (and, from the data stage,
`tokenizer` and `data`), each a dataclass that the component using it receives alone.

Every field is typed, has a default and a comment saying what it does; `__post_init__` rejects
impossible values with a `ConfigError` naming the dotted key. Nothing here imports torch or
transformers, so a bad config is reported in well under a second.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from ..data.settings import DataSettings, TokenizerSettings
from ..errors import ConfigError
from ..model.architecture_minigpt import OPTIONS, check_architecture, declare_fields
from .sizing import parse_budget

# MiniGPTConfig fields a run config may not set, and why. The tokenizer decides the vocabulary
# size and special-token ids (len(tokenizer), not tokenizer.vocab_size, which is only a target),
# so a model can never disagree with the tokenizer it is trained with.
MANAGED_MODEL_FIELDS = {
    "vocab_size": "it comes from the tokenizer (set tokenizer.vocab_size)",
    "bos_token_id": "it comes from the tokenizer (set tokenizer.eos_token)",
    "eos_token_id": "it comes from the tokenizer (set tokenizer.eos_token)",
    "pad_token_id": "it comes from the tokenizer (set tokenizer.pad_token)",
    "use_cache": "it is a generation setting (final/ always saves use_cache: true)",
}

# `model:` keys that say where the weights start from, not what the architecture is (the other
# keys are MiniGPTConfig's options). With `init_from` set, the architecture comes from the base model.
INIT_KEYS = ("init_from", "init_revision", "init_hub_dir")
ATTN_IMPLEMENTATIONS = ("auto", "eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
LR_SCHEDULER_TYPES = (
    "cosine_with_min_lr",
    "warmup_stable_decay",
    "cosine",
    "linear",
    "constant_with_warmup",
    "constant",
)
# torch.optim.Muon's adjust_lr_fn: "original" scales the LR by sqrt(max(1, rows/cols)) (Jordan et al.
# 2024); "match_rms_adamw" by 0.2 sqrt(max(rows, cols)), so the update's RMS is AdamW's typical
# 0.2 x LR and AdamW's LR and decay carry over (Liu et al. 2025, "Muon is scalable for LLM training").
MUON_ADJUST_LR_CHOICES = ("match_rms_adamw", "original")
REPORT_TO_CHOICES = ("none", "tensorboard", "wandb", "trackio", "mlflow", "all")


@dataclass
class ModelSettings:
    """The `model:` section: where the weights start, and MiniGPTConfig's architecture options.

    The architecture keys are declared from the table MiniGPTConfig is declared from
    (model/architecture_minigpt.py: names, types, defaults, meanings, checks), which imports only
    the standard library, so a run config loads without importing torch. The vocabulary and
    special-token ids are not here: they come from the tokenizer (MANAGED_MODEL_FIELDS).

    With `init_from`, the run starts from a trained model (continued pretraining, fine-tuning) with a
    fresh optimizer, schedule and step count: the architecture, vocabulary and tokenizer are the
    base model's, and an architecture key written in the config must agree with it. Only these may
    differ: hidden_dropout and attention_dropout, and for rotary models max_position_embeddings
    with rope_parameters scaling (a longer context); the hardware section (attention kernel,
    activation checkpointing) is free as always.
    """

    # A trained model to start from: a run folder (its final/), a checkpoint-N folder, a model
    # folder, a stock transformers folder MiniGPT can express (GPT-2, GPT-NeoX style), or ORG/NAME
    # in a hub folder. null: random weights.
    init_from: str | None = None
    init_revision: str | None = None  # ORG/NAME only: branch, tag or commit (null: main)
    init_hub_dir: str | None = None  # ORG/NAME only: the hub folder (null: $HF_HUB_CACHE, else ./hub)
    # The architecture keys, after the init keys: the table's options (rope_parameters included, null
    # by default: plain RoPE for rotary positions, checked in full when the model is built) but those
    # the tokenizer or generation decide.
    declare_fields(vars(), (option for option in OPTIONS if option.name not in MANAGED_MODEL_FIELDS))

    def architecture(self) -> dict[str, Any]:
        """The MiniGPTConfig fields of this section (every key but INIT_KEYS)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in INIT_KEYS}

    def __post_init__(self) -> None:
        if self.init_from is None:
            for name in ("init_revision", "init_hub_dir"):
                require(getattr(self, name) is None, f"model.{name}", "needs model.init_from", getattr(self, name))
        else:
            require(bool(self.init_from.strip()), "model.init_from", "must name a model or be null", self.init_from)
        try:
            check_architecture(self.architecture(), prefix="model.")
        except ValueError as err:  # the message names the key as the YAML has it
            raise ConfigError(str(err)) from None


@dataclass
class TrainingSettings:
    """The `training:` section: what Trainer optimises, logs, evaluates and saves, and text samples.

    Keys that mirror `transformers.TrainingArguments` keep its names and meaning.
    """

    output_dir: str = "runs/minigpt"  # checkpoints, metrics.jsonl, samples.txt, loss.png and final/ go here
    overwrite_output_dir: bool = (
        False  # start over in an output_dir that holds a run: removes its outputs first
    )
    max_steps: int = 1000  # optimizer steps in the whole run
    learning_rate: float = 1e-3  # peak learning rate, reached at the end of warmup
    min_learning_rate: float = 1e-4  # floor of the decay: cosine_with_min_lr, warmup_stable_decay (Muon: the same fraction)
    lr_scheduler_type: str = "cosine_with_min_lr"  # Trainer schedule name; warmup is linear in all of them
    warmup_steps: int = 100  # linear warmup from 0 to learning_rate over this many steps
    # warmup_stable_decay: the share of the run, at its end, over which the LR decays to min_learning_rate
    decay_fraction: float = 0.3
    # Seconds of training (evaluation included; null: no limit) after which the run saves and ends,
    # at most max_steps. The schedule is planned for max_steps, so a run this ends is not decayed.
    max_time: float | None = None
    # A budget the run sizes itself for: wall clock on this machine ("30m", "2h", "900s") or compute
    # ("3e13 flops"). The run then chooses the model's depth, width and heads, max_steps, the learning
    # rates, warmup and dropout (minigpt/training/sizing.py), overriding those keys, and writes the
    # choice into resolved_config.yaml as plain values (budget null there). null: the config's values.
    budget: str | None = None
    weight_decay: float = 0.1  # AdamW decoupled weight decay, applied to weight matrices only
    decay_embeddings: bool = False  # also decay token/position embeddings (and the tied output head)
    adam_beta1: float = 0.9  # AdamW first-moment decay
    adam_beta2: float = 0.95  # AdamW second-moment decay (0.95 as in GPT-3 / nanoGPT)
    adam_epsilon: float = 1e-8  # AdamW epsilon
    optim: str = "adamw_torch_fused"  # Trainer optimizer name; the fused AdamW kernel runs on CPU and GPU
    # "muon" (not a Trainer name): Muon on the blocks' weight matrices, fused AdamW with the keys
    # above on embeddings, output head, norms and biases; the schedule scales both groups alike.
    muon_learning_rate: float = 1e-3  # Muon's peak LR; its floor is the same fraction of it as AdamW's
    muon_adjust_lr: str = "match_rms_adamw"  # LR scale per matrix shape, see MUON_ADJUST_LR_CHOICES
    muon_momentum: float = 0.95  # Muon's momentum (Nesterov, see muon_nesterov)
    muon_nesterov: bool = True  # Nesterov momentum, as in Jordan et al. 2024
    muon_weight_decay: float = 0.1  # Muon's decoupled weight decay (times the scheduled muon LR)
    muon_ns_steps: int = 5  # Newton-Schulz iterations that orthogonalise each update (1-99)
    max_grad_norm: float = 1.0  # clip the global gradient norm to this (0 disables clipping)
    seed: int = 42  # seeds Python, NumPy and torch (init, dropout, data order)
    logging_steps: int = 10  # log a line and a metrics.jsonl record every this many steps
    eval_steps: int = 200  # evaluate on the validation split every this many steps (and at the end)
    # Most validation tokens an evaluation reads: a larger split is evaluated on a fixed, seeded sample
    # of its blocks (null: always all). 2**20 keeps Tiny Shakespeare's split whole and a CPU's
    # evaluation of any corpus to a bounded number of forward passes.
    eval_tokens: int | None = 1_048_576
    save_steps: int = 500  # write a checkpoint every this many steps (and at the end)
    save_total_limit: int | None = 2  # keep at most this many checkpoints (None keeps all)
    report_to: str | list[str] = "none"  # extra loggers, e.g. "tensorboard" (needs the tensorboard package)
    sample_steps: int = 200  # print and save text samples every this many steps (0: only at the end)
    # Each prompt is continued once per sampling; null: the openings of two validation lines (or a
    # conversation up to its reply), written into resolved_config.yaml as the prompts used.
    sample_prompts: list[str] | None = None
    sample_max_new_tokens: int = 64  # tokens generated per sample
    sample_temperature: float = 0.8  # softmax temperature for samples (0: greedy)
    sample_top_k: int | None = 50  # sample only from the k most likely tokens (None: all)

    def __post_init__(self) -> None:
        for name in ("max_steps", "logging_steps", "eval_steps", "save_steps", "sample_max_new_tokens"):
            require(getattr(self, name) > 0, f"training.{name}", "must be positive", getattr(self, name))
        for name in (
            "warmup_steps",
            "sample_steps",
            "weight_decay",
            "max_grad_norm",
            "sample_temperature",
        ):
            require(getattr(self, name) >= 0, f"training.{name}", "must be >= 0", getattr(self, name))
        require(self.learning_rate > 0, "training.learning_rate", "must be positive", self.learning_rate)
        require(
            0 <= self.min_learning_rate <= self.learning_rate,
            "training.min_learning_rate",
            f"must be between 0 and training.learning_rate ({self.learning_rate})",
            self.min_learning_rate,
        )
        for name in ("adam_beta1", "adam_beta2"):
            require(
                0 <= getattr(self, name) < 1, f"training.{name}", "must be in [0, 1)", getattr(self, name)
            )
        require(self.adam_epsilon > 0, "training.adam_epsilon", "must be positive", self.adam_epsilon)
        require_choice(self.lr_scheduler_type, LR_SCHEDULER_TYPES, "training.lr_scheduler_type")
        require(
            0 < self.decay_fraction <= 1, "training.decay_fraction", "must be in (0, 1]", self.decay_fraction
        )
        if self.eval_tokens is not None:
            require(self.eval_tokens > 0, "training.eval_tokens", "must be positive or null", self.eval_tokens)
        if self.max_time is not None:
            require(self.max_time > 0, "training.max_time", "must be positive or null", self.max_time)
        if self.budget is not None:
            parse_budget(self.budget)  # a ConfigError naming training.budget
        lr, momentum, decay, steps = (
            self.muon_learning_rate,
            self.muon_momentum,
            self.muon_weight_decay,
            self.muon_ns_steps,
        )
        require(lr > 0, "training.muon_learning_rate", "must be positive", lr)
        require(0 <= momentum < 1, "training.muon_momentum", "must be in [0, 1)", momentum)
        require(decay >= 0, "training.muon_weight_decay", "must be >= 0", decay)
        require(0 < steps < 100, "training.muon_ns_steps", "must be in 1..99", steps)
        require_choice(self.muon_adjust_lr, MUON_ADJUST_LR_CHOICES, "training.muon_adjust_lr")
        for name in [self.report_to] if isinstance(self.report_to, str) else self.report_to:
            require_choice(name, REPORT_TO_CHOICES, "training.report_to")
        if self.save_total_limit is not None:
            require(self.save_total_limit > 0, "training.save_total_limit", "must be positive or null", 0)
        if self.sample_top_k is not None:
            require(
                self.sample_top_k > 0, "training.sample_top_k", "must be positive or null", self.sample_top_k
            )
        require(
            self.sample_prompts is None or bool(self.sample_prompts),
            "training.sample_prompts", "needs at least one prompt (null: from the corpus)", [],
        )
        require(bool(self.output_dir), "training.output_dir", "must not be empty", self.output_dir)


@dataclass
class HardwareSettings:
    """The `hardware:` section: how the run uses the machine, not what it learns.

    `profile` names a file `configs/hardware/<profile>.yaml` whose values are the defaults of this
    section; keys written here override them.

    `bf16: auto` turns bfloat16 autocast on where matmuls run faster in it: CPUs with AMX-BF16
    (Intel Sapphire Rapids and later: a 768x128x384 matmul 5.8x faster than fp32) and GPUs that
    support bf16; elsewhere bf16 on a CPU is emulated and slower, so it stays off. With
    `attn_implementation: auto` the attention kernel follows: torch's sdpa kernel is the fastest in
    fp32 but 3x slower than plain matmul ("eager") attention in bf16 on a CPU.

    `keep_freed_memory`: glibc returns large freed blocks to the kernel, so every training step
    page-faults its activations and gradients back in (7-8% of a small CPU step); on, freed memory
    stays in the process for the next step (see cpu_allocator.py). Set for the whole process.
    """

    profile: str | None = (
        None  # hardware profile to start from: "cpu", "gpu-bf16", "multi-gpu" or a .yaml path
    )
    use_cpu: bool = False  # train on the CPU even if an accelerator is present
    bf16: bool | Literal["auto"] = False  # bfloat16 autocast; "auto": where it is fast (see above)
    fp16: bool = False  # float16 mixed precision with a dynamic grad scaler (older GPUs)
    tf32: bool | None = None  # TensorFloat-32 matmuls on Ampere+ GPUs (None: torch's default)
    attn_implementation: str = "sdpa"  # "sdpa", "eager", "flash_attention_2", ...; "auto" (see above)
    torch_compile: bool = False  # compile the model with torch.compile (first steps are slower)
    torch_compile_mode: str | None = None  # torch.compile mode, e.g. "max-autotune" (None: default)
    activation_checkpointing: bool = False  # recompute activations in backward to save memory
    per_device_train_batch_size: int = 8  # blocks per forward pass on each device
    gradient_accumulation_steps: int = 1  # forward passes summed into one optimizer step
    per_device_eval_batch_size: int = 16  # blocks per forward pass when evaluating
    dataloader_num_workers: int = 0  # worker processes feeding batches (0: the training process itself)
    torch_num_threads: int | None = None  # torch CPU threads per process (None: torch's default, one per core)
    keep_freed_memory: bool = False  # CPU: glibc keeps freed blocks for reuse (no page faults per step)
    peak_flops: float | Literal["auto"] = "auto"  # peak FLOP/s of one device for MFU; "auto" measures it

    def __post_init__(self) -> None:
        for name in (
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "per_device_eval_batch_size",
        ):
            require(getattr(self, name) > 0, f"hardware.{name}", "must be positive", getattr(self, name))
        require(self.dataloader_num_workers >= 0, "hardware.dataloader_num_workers", "must be >= 0", 0)
        if self.torch_num_threads is not None:
            require(self.torch_num_threads > 0, "hardware.torch_num_threads", "must be positive or null", 0)
        if self.peak_flops != "auto":
            require(self.peak_flops > 0, "hardware.peak_flops", "must be positive or auto", self.peak_flops)
        require(
            not (self.bf16 is True and self.fp16), "hardware.fp16", "cannot be set with hardware.bf16", True
        )
        require_choice(self.attn_implementation, ATTN_IMPLEMENTATIONS, "hardware.attn_implementation")


@dataclass
class RunConfig:
    """One training run, as resolved from a YAML file and command-line overrides."""

    model: ModelSettings = field(default_factory=ModelSettings)
    tokenizer: TokenizerSettings = field(default_factory=TokenizerSettings)
    data: DataSettings = field(default_factory=DataSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    hardware: HardwareSettings = field(default_factory=HardwareSettings)
    # Dotted keys the YAML file or an override wrote ("model.hidden_size"), as opposed to defaults:
    # with model.init_from only these can contradict the base model. Not part of the settings.
    explicit_keys: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain nested dict of every setting (defaults included), in schema order."""
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


SECTIONS: dict[str, type] = {
    "model": ModelSettings,
    "tokenizer": TokenizerSettings,
    "data": DataSettings,
    "training": TrainingSettings,
    "hardware": HardwareSettings,
}


def effective_batch_size(hardware: HardwareSettings, num_processes: int) -> int:
    """Sequences per optimizer step: per device x accumulation x processes."""
    return hardware.per_device_train_batch_size * hardware.gradient_accumulation_steps * num_processes


def suggest(word: Any, candidates: Iterable[Any]) -> str:
    """ "; did you mean 'x'?" for the likeliest intended candidate, or "" when none is close."""
    word, candidates = str(word), [str(c) for c in candidates]
    extensions = [
        c for c in candidates if word and c.startswith(word)
    ]  # "adamw" -> "adamw_torch", in given order
    matches = extensions[:1] or difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f"; did you mean {matches[0]!r}?" if matches else ""


def require(ok: bool, key: str, what: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{key} {what}, got {value!r}")


def require_choice(value: str, choices: Iterable[str], key: str) -> None:
    choices = tuple(choices)
    if value not in choices:
        listed = f"one of {', '.join(choices)}" if len(choices) <= 10 else f"one of {len(choices)} names"
        raise ConfigError(f"{key} must be {listed}, got {value!r}{suggest(value, choices)}")
