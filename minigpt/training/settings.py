"""The typed sections of a run config: `model`, `training`, `hardware` (and, from the data stage,
`tokenizer` and `data`), each a dataclass that the component using it receives alone.

`training` and `hardware` take any `transformers.TrainingArguments` field by its own name, type and
default (`trainer_fields`, read from transformers' source: importing it would import torch), so
`training.adam_beta2` is Trainer's `adam_beta2`; they declare only MiniGPT's own keys and the few
defaults of Trainer's that MiniGPT changes (`TRAINER_DEFAULTS`). Every value is checked here with a
`ConfigError` naming the dotted key, without importing torch or transformers.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib.metadata
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ..data.settings import DataSettings, TokenizerSettings
from ..errors import ConfigError
from ..model.architecture_minigpt import OPTIONS, check_architecture, declare_fields
from .sizing import parse_budget

# MiniGPTConfig fields a run config may not set, and why: the tokenizer decides them.
MANAGED_MODEL_FIELDS = {
    "vocab_size": "it comes from the tokenizer (set tokenizer.vocab_size)",
    "bos_token_id": "it comes from the tokenizer (set tokenizer.eos_token)",
    "eos_token_id": "it comes from the tokenizer (set tokenizer.eos_token)",
    "pad_token_id": "it comes from the tokenizer (set tokenizer.pad_token)",
    "use_cache": "it is a generation setting (final/ always saves use_cache: true)",
}
# `model:` keys that say where the weights start from; with `init_from` the architecture is the base's.
INIT_KEYS = ("init_from", "init_revision", "init_hub_dir")
ATTN_IMPLEMENTATIONS = ("auto", "eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
LR_SCHEDULER_TYPES = ("cosine_with_min_lr", "warmup_stable_decay", "cosine", "linear", "constant_with_warmup", "constant")
REPORT_TO_CHOICES = ("none", "tensorboard", "wandb", "trackio", "mlflow", "all")

# TrainingArguments fields that belong in `hardware:` (how the run uses the machine); the others go in `training:`.
HARDWARE_TRAINER_KEYS = (
    "use_cpu", "bf16", "fp16", "tf32", "torch_compile", "torch_compile_mode", "activation_checkpointing",
    "per_device_train_batch_size", "gradient_accumulation_steps", "per_device_eval_batch_size",
    "dataloader_num_workers",
)
# TrainingArguments fields MiniGPT sets itself (trainer.py): a config cannot set them.
RESERVED_TRAINER_KEYS = (
    "output_dir", "logging_strategy", "logging_first_step", "eval_strategy", "save_strategy",
    "prediction_loss_only", "disable_tqdm", "ddp_find_unused_parameters", "lr_scheduler_kwargs",
)
# Trainer's defaults that MiniGPT changes, and why.
TRAINER_DEFAULTS: dict[str, dict[str, Any]] = {
    "training": {
        "max_steps": 1000,  # a run of fixed work (Trainer's -1 counts epochs)
        "learning_rate": 1e-3,  # small models take a higher peak than Trainer's 5e-5
        "lr_scheduler_type": "cosine_with_min_lr",  # a decay to training.min_learning_rate
        "optim": "adamw_torch_fused",  # Trainer computes its own: written here, resolved_config.yaml records it
        "warmup_steps": 100,
        "weight_decay": 0.1,  # GPT-3 / nanoGPT
        "adam_beta2": 0.95,  # GPT-3 / nanoGPT
        "logging_steps": 10,
        "eval_steps": 250,  # Trainer's save_steps (500) is a multiple: the best evaluation has a checkpoint
        "save_total_limit": 2,  # rotated only once a newer checkpoint is complete (checkpoints.py)
        # final/ holds the model of the best evaluation that has a checkpoint (by validation loss), not a
        # later, overfit one; with save_steps a multiple of eval_steps, as Trainer requires (trainer.py)
        "load_best_model_at_end": True,
        "metric_for_best_model": "loss",
    },
    "hardware": {"per_device_train_batch_size": 8, "activation_checkpointing": False},
}
# Range checks of Trainer's fields as MiniGPT uses them: key -> (test, what it must be).
_POSITIVE = (lambda v: v > 0, "must be positive")
_NON_NEGATIVE = (lambda v: v >= 0, "must be >= 0")
_UNIT = (lambda v: 0 <= v < 1, "must be in [0, 1)")
TRAINER_CHECKS = {
    **dict.fromkeys(("max_steps", "learning_rate", "logging_steps", "eval_steps", "save_steps", "adam_epsilon"), _POSITIVE),
    **dict.fromkeys(("per_device_train_batch_size", "gradient_accumulation_steps", "per_device_eval_batch_size"), _POSITIVE),
    **dict.fromkeys(("warmup_steps", "weight_decay", "max_grad_norm", "dataloader_num_workers"), _NON_NEGATIVE),
    **dict.fromkeys(("adam_beta1", "adam_beta2"), _UNIT),
    "save_total_limit": (lambda v: v is None or v > 0, "must be positive or null"),
}
TRAINER_DEFAULT = object()  # a field whose default TrainingArguments computes (e.g. `optim`)


class _AnyName(dict):
    """Names in transformers' annotations this module does not import (enums of strings): `str`."""

    def __missing__(self, name: str) -> Any:
        return str


@functools.cache
def trainer_fields() -> dict[str, tuple[Any, Any]]:
    """`TrainingArguments`' fields as transformers declares them: {name: (type, default)}."""
    # Found through the installed distribution's files: the import system is not asked (no import).
    source = Path(importlib.metadata.distribution("transformers").locate_file("transformers/training_args.py"))
    source = source.read_text(encoding="utf-8")
    body = next(n for n in ast.parse(source).body if getattr(n, "name", None) == "TrainingArguments").body
    names = _AnyName(Any=Any, Literal=Literal, dict=dict, list=list, bool=bool, int=int, float=float, str=str)
    fields = {}
    for node in body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            default = node.value
            if isinstance(default, ast.Call):  # field(default=..., metadata={"help": ...})
                default = next((k.value for k in default.keywords if k.arg == "default"), None)
            try:
                value = ast.literal_eval(default) if default is not None else TRAINER_DEFAULT
            except ValueError:  # a name or a call: TrainingArguments decides
                value = TRAINER_DEFAULT
            fields[node.target.id] = (eval(ast.unparse(node.annotation), {"__builtins__": {}}, names), value)
    return fields


class TrainerBacked:
    """A section that also takes `TrainingArguments` fields: those written are kept in `trainer`,
    read and set as attributes; unwritten ones read as MiniGPT's default, else Trainer's."""

    section: str = ""
    trainer: dict[str, Any]

    @classmethod
    @functools.cache
    def trainer_keys(cls) -> dict[str, tuple[Any, Any]]:
        """{key: (type, default)} of the TrainingArguments fields this section takes."""
        own = {f.name for f in dataclasses.fields(cls)}
        in_hardware = cls.section == "hardware"
        return {
            name: (kind, TRAINER_DEFAULTS[cls.section].get(name, default))
            for name, (kind, default) in trainer_fields().items()
            if name not in own and name not in RESERVED_TRAINER_KEYS and (name in HARDWARE_TRAINER_KEYS) == in_hardware
        }

    def __getattr__(self, name: str) -> Any:  # only for names that are not attributes
        keys = type(self).trainer_keys()
        if name not in keys or name == "trainer":
            raise AttributeError(name)
        value = self.__dict__.get("trainer", {}).get(name, keys[name][1])
        return None if value is TRAINER_DEFAULT else value

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self).trainer_keys():
            self.trainer[name] = value
        else:
            object.__setattr__(self, name, value)

    def check_trainer_keys(self) -> None:
        for key, value in self.trainer.items():
            test, what = TRAINER_CHECKS.get(key, (None, ""))
            require(test is None or value is None or test(value), f"{self.section}.{key}", what, value)

    def __eq__(self, other: object) -> bool:  # the values, however they were given
        return type(other) is type(self) and self.to_dict() == other.to_dict()

    __hash__ = None

    def to_dict(self) -> dict[str, Any]:
        """Declared keys, then the Trainer keys written or defaulted by MiniGPT."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "trainer"}
        for key in [*TRAINER_DEFAULTS[self.section], *self.trainer]:
            values[key] = getattr(self, key)
        return values


def takes_trainer_keys(cls: type) -> type:
    """Let a TrainerBacked dataclass's constructor take Trainer keys as keywords: `HardwareSettings(fp16=True)`."""
    init = cls.__init__

    def __init__(self, *args: Any, trainer: dict[str, Any] | None = None, **values: Any) -> None:
        keys = cls.trainer_keys()
        given = {key: values.pop(key) for key in list(values) if key in keys}
        init(self, *args, trainer={**(trainer or {}), **given}, **values)

    cls.__init__ = __init__
    return cls


@dataclass
class ModelSettings:
    """The `model:` section: where the weights start, and MiniGPTConfig's architecture options
    (declared from the model's option table, which imports only the standard library).

    With `init_from`, the run starts from a trained model: the architecture, vocabulary and tokenizer
    are the base's, and an architecture key the config writes must agree with it, but for dropout and,
    for rotary models, a longer context by rope scaling.
    """

    # A run folder (its final/), a checkpoint, a model folder, a stock transformers folder MiniGPT can
    # express, or ORG/NAME in a hub folder; null: random weights.
    init_from: str | None = None
    init_revision: str | None = None  # ORG/NAME only: branch, tag or commit (null: main)
    init_hub_dir: str | None = None  # ORG/NAME only: the hub folder (null: $HF_HUB_CACHE, else ./hub)
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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@takes_trainer_keys
@dataclass(eq=False)
class TrainingSettings(TrainerBacked):
    """The `training:` section: any TrainingArguments field (optimiser, schedule, logging, evaluation,
    checkpoints: `max_steps`, `learning_rate`, `warmup_steps`, `weight_decay`, `adam_beta2`, `optim`,
    `seed`, `eval_steps`, `save_steps`, `save_total_limit`, `report_to`, ...) and MiniGPT's own keys."""

    section = "training"
    output_dir: str = "runs/minigpt"  # checkpoints, metrics.jsonl, samples.txt, loss.png and final/ go here
    overwrite_output_dir: bool = False  # start over in an output_dir that holds a run: removes its outputs first
    min_learning_rate: float = 1e-4  # floor of the decay: cosine_with_min_lr, warmup_stable_decay
    decay_fraction: float = 0.3  # warmup_stable_decay: the share of the run, at its end, that decays
    # Seconds of training after which the run saves and ends (null: no limit); the schedule stays
    # planned for max_steps, so a run this ends is not decayed.
    max_time: float | None = None
    # A budget the run sizes itself for: wall clock on this machine ("30m", "2h", "900s") or compute
    # ("3e13 flops"): the model's shape, max_steps, learning rates, warmup and dropout (sizing.py),
    # written into resolved_config.yaml as plain values. null: the config's values.
    budget: str | None = None
    decay_embeddings: bool = False  # also decay token/position embeddings (and the tied output head)
    # Most validation tokens an evaluation reads (a fixed, seeded sample of a larger split; null: all).
    eval_tokens: int | None = 1_048_576
    sample_steps: int = 200  # print and save text samples every this many steps (0: only at the end)
    # Each prompt is continued once per sampling; null: openings of the validation split.
    sample_prompts: list[str] | None = None
    sample_max_new_tokens: int = 64  # tokens generated per sample
    sample_temperature: float = 0.8  # softmax temperature for samples (0: greedy)
    sample_top_k: int | None = 50  # sample only from the k most likely tokens (None: all)
    trainer: dict[str, Any] = field(default_factory=dict, repr=False)  # TrainingArguments keys written

    def __post_init__(self) -> None:
        self.check_trainer_keys()
        for name in ("sample_max_new_tokens",):
            require(getattr(self, name) > 0, f"training.{name}", "must be positive", getattr(self, name))
        for name in ("sample_steps", "sample_temperature"):
            require(getattr(self, name) >= 0, f"training.{name}", "must be >= 0", getattr(self, name))
        require(
            0 <= self.min_learning_rate <= self.learning_rate,
            "training.min_learning_rate",
            f"must be between 0 and training.learning_rate ({self.learning_rate})",
            self.min_learning_rate,
        )
        require_choice(self.lr_scheduler_type, LR_SCHEDULER_TYPES, "training.lr_scheduler_type")
        require(0 < self.decay_fraction <= 1, "training.decay_fraction", "must be in (0, 1]", self.decay_fraction)
        for name in ("eval_tokens", "max_time", "sample_top_k"):
            value = getattr(self, name)
            require(value is None or value > 0, f"training.{name}", "must be positive or null", value)
        if self.budget is not None:
            parse_budget(self.budget)  # a ConfigError naming training.budget
        for name in [self.report_to] if isinstance(self.report_to, str) else self.report_to:
            require_choice(name, REPORT_TO_CHOICES, "training.report_to")
        require(self.sample_prompts != [], "training.sample_prompts", "needs at least one prompt (null: from the corpus)", [])
        require(bool(self.output_dir), "training.output_dir", "must not be empty", self.output_dir)


@takes_trainer_keys
@dataclass(eq=False)
class HardwareSettings(TrainerBacked):
    """The `hardware:` section: how the run uses the machine, not what it learns. TrainingArguments'
    `use_cpu`, `fp16`, `tf32`, `torch_compile(_mode)`, `activation_checkpointing`, the batch sizes,
    `gradient_accumulation_steps` and `dataloader_num_workers`, and MiniGPT's own keys.

    `profile` names `configs/hardware/<profile>.yaml`, whose values are this section's defaults.
    `bf16: auto` is bf16 autocast where matmuls run faster in it (CPUs with AMX-BF16 or AVX512-BF16,
    GPUs with bf16); `attn_implementation: auto` is then plain matmul attention on a CPU, where
    torch's sdpa kernel is slower in bf16. `keep_freed_memory`: glibc keeps freed blocks, so CPU steps
    stop page-faulting their buffers back in (hardware.py); set for the whole process.
    """

    section = "hardware"
    profile: str | None = None  # "cpu", "gpu-bf16", "multi-gpu" or a .yaml path
    bf16: bool | Literal["auto"] = False  # bfloat16 autocast; "auto": where it is fast
    attn_implementation: str = "sdpa"  # "sdpa", "eager", "flash_attention_2", ...; "auto" (see above)
    torch_num_threads: int | None = None  # torch CPU threads per process (None: torch's default, one per core)
    keep_freed_memory: bool = False  # CPU: glibc keeps freed blocks for reuse (no page faults per step)
    peak_flops: float | Literal["auto"] = "auto"  # peak FLOP/s of one device for MFU; "auto" measures it
    trainer: dict[str, Any] = field(default_factory=dict, repr=False)  # TrainingArguments keys written

    def __post_init__(self) -> None:
        self.check_trainer_keys()
        require(self.torch_num_threads is None or self.torch_num_threads > 0, "hardware.torch_num_threads",
                "must be positive or null", self.torch_num_threads)
        require(self.peak_flops == "auto" or self.peak_flops > 0, "hardware.peak_flops", "must be positive or auto",
                self.peak_flops)
        require(not (self.bf16 is True and self.fp16), "hardware.fp16", "cannot be set with hardware.bf16", True)
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
        """Plain nested dict of every setting, in schema order."""
        sections = {name: getattr(self, name) for name in SECTIONS}
        return {name: s.to_dict() if hasattr(s, "to_dict") else dataclasses.asdict(s) for name, s in sections.items()}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


SECTIONS: dict[str, type] = {
    "model": ModelSettings,
    "tokenizer": TokenizerSettings,
    "data": DataSettings,
    "training": TrainingSettings,
    "hardware": HardwareSettings,
}


def section_types(cls: type) -> dict[str, Any]:
    """{key: type} of every key a section takes: its declared fields, then the Trainer keys it takes."""
    hints = typing.get_type_hints(cls)
    keys = {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.name != "trainer"}
    if issubclass(cls, TrainerBacked):
        keys.update({name: kind for name, (kind, _) in cls.trainer_keys().items()})
    return keys


def effective_batch_size(hardware: HardwareSettings, num_processes: int) -> int:
    """Sequences per optimizer step: per device x accumulation x processes."""
    return hardware.per_device_train_batch_size * hardware.gradient_accumulation_steps * num_processes


def suggest(word: Any, candidates: Iterable[Any]) -> str:
    """ "; did you mean 'x'?" for the likeliest intended candidate, or "" when none is close."""
    word, candidates = str(word), [str(c) for c in candidates]
    extensions = [c for c in candidates if word and c.startswith(word)]  # "adamw" -> "adamw_torch"
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
