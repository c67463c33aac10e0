"""The typed sections of a run config (`model`, `training`, `hardware`; `tokenizer` and `data` come from
the data stage), each a dataclass its component receives alone. `training` and `hardware` also take any
`TrainingArguments` field by its own name, type and default (`trainer_fields`, parsed from transformers'
source: no torch import). Every value is checked with a `ConfigError` naming the dotted key.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib.metadata
import typing
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from ..data.settings import DataSettings, TokenizerSettings
from ..errors import ConfigError
from ..model.architecture_minigpt import OPTIONS, check_architecture, declare_fields
from .sizing import parse_budget

# MiniGPTConfig fields a run config may not set, and why.
MANAGED_MODEL_FIELDS = {
    "vocab_size": "it comes from the tokenizer (set tokenizer.vocab_size)",
    "bos_token_id": "it comes from the tokenizer (set tokenizer.eos_token)",
    "eos_token_id": "it comes from the tokenizer (set tokenizer.eos_token)",
    "pad_token_id": "it comes from the tokenizer (set tokenizer.pad_token)",
    "use_cache": "it is a generation setting (final/ always saves use_cache: true)",
}
INIT_KEYS = ("init_from", "init_revision", "init_hub_dir")
ATTN_IMPLEMENTATIONS = ("auto", "eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
LR_SCHEDULER_TYPES = ("cosine_with_min_lr", "warmup_stable_decay", "cosine", "linear", "constant_with_warmup", "constant")
REPORT_TO_CHOICES = ("none", "tensorboard", "wandb", "trackio", "mlflow", "all")

# TrainingArguments fields that belong in `hardware:`; the others go in `training:`.
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
        "optim": "adamw_torch_fused",  # written, so resolved_config.yaml records it
        "warmup_steps": 100,
        "weight_decay": 0.1,  # GPT-3 / nanoGPT
        "adam_beta2": 0.95,  # GPT-3 / nanoGPT
        "logging_steps": 10,
        "eval_steps": 250,  # save_steps (500) is a multiple: the best evaluation has a checkpoint
        "save_total_limit": 2,  # rotated only once a newer checkpoint is complete (checkpoints.py)
        "load_best_model_at_end": True,  # final/ is the best checkpointed evaluation's model, not an overfit one
        "metric_for_best_model": "loss",
    },
    "hardware": {"per_device_train_batch_size": 8, "activation_checkpointing": False},
}
# Range checks of both sections' keys, Trainer's and MiniGPT's: key -> (test, what it must be); null passes.
_POSITIVE = (lambda v: v > 0, "must be positive")
_POSITIVE_OR_NULL = (lambda v: v > 0, "must be positive or null")
_NON_NEGATIVE = (lambda v: v >= 0, "must be >= 0")
CHECKS = {
    **dict.fromkeys(("max_steps", "learning_rate", "logging_steps", "eval_steps", "save_steps", "adam_epsilon"), _POSITIVE),
    **dict.fromkeys(("per_device_train_batch_size", "gradient_accumulation_steps", "per_device_eval_batch_size"), _POSITIVE),
    **dict.fromkeys(("warmup_steps", "weight_decay", "max_grad_norm", "dataloader_num_workers"), _NON_NEGATIVE),
    **dict.fromkeys(("adam_beta1", "adam_beta2"), (lambda v: 0 <= v < 1, "must be in [0, 1)")),
    **dict.fromkeys(("save_total_limit", "eval_tokens", "max_time", "sample_top_k", "torch_num_threads"), _POSITIVE_OR_NULL),
    "sample_max_new_tokens": _POSITIVE,
    **dict.fromkeys(("sample_steps", "sample_temperature"), _NON_NEGATIVE),
    "decay_fraction": (lambda v: 0 < v <= 1, "must be in (0, 1]"),
    "peak_flops": (lambda v: v == "auto" or v > 0, "must be positive or auto"),
}
TRAINER_DEFAULT = object()  # a field whose default TrainingArguments computes (e.g. `optim`)


@functools.cache
def trainer_fields() -> dict[str, tuple[Any, Any]]:
    """`TrainingArguments`' fields as transformers declares them: {name: (type, default)}."""
    source = Path(importlib.metadata.distribution("transformers").locate_file("transformers/training_args.py"))
    source = source.read_text(encoding="utf-8")
    body = next(n for n in ast.parse(source).body if getattr(n, "name", None) == "TrainingArguments").body
    # Names in the annotations that are not imported here (enums of strings) read as `str`.
    names = defaultdict(lambda: str, Any=Any, Literal=Literal, dict=dict, list=list, bool=bool, int=int, float=float)
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
    """A section that also takes `TrainingArguments` fields, kept in `trainer` and read as
    attributes; an unwritten one reads as MiniGPT's default, else Trainer's."""

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

    def check_values(self) -> None:
        """CHECKS of this section's own keys and the Trainer keys written."""
        given = {f.name for f in dataclasses.fields(self)} | set(self.trainer)
        for key, (test, what) in CHECKS.items():
            value = getattr(self, key) if key in given else None
            require(value is None or test(value), f"{self.section}.{key}", what, value)

    def __eq__(self, other: object) -> bool:  # the values, however they were given
        return type(other) is type(self) and self.to_dict() == other.to_dict()

    __hash__ = None

    def to_dict(self) -> dict[str, Any]:
        """Declared keys, then the Trainer keys written or defaulted by MiniGPT."""
        declared = [f.name for f in dataclasses.fields(self) if f.name != "trainer"]
        return {key: getattr(self, key) for key in [*declared, *TRAINER_DEFAULTS[self.section], *self.trainer]}


def takes_trainer_keys(cls: type) -> type:
    """Let a TrainerBacked dataclass take Trainer keys as keywords: `HardwareSettings(fp16=True)`."""
    init = cls.__init__

    def __init__(self, *args: Any, trainer: dict[str, Any] | None = None, **values: Any) -> None:
        given = {key: values.pop(key) for key in list(values) if key in cls.trainer_keys()}
        init(self, *args, trainer={**(trainer or {}), **given}, **values)

    cls.__init__ = __init__
    return cls


@dataclass
class ModelSettings:
    """The `model:` section: where the weights start, and MiniGPTConfig's architecture options (with
    `init_from` the base's: a key written here must agree, but for dropout and rope scaling)."""

    init_from: str | None = None  # a run, checkpoint or model folder, or ORG/NAME (null: random weights)
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


@takes_trainer_keys
@dataclass(eq=False)
class TrainingSettings(TrainerBacked):
    """The `training:` section: any TrainingArguments field (`max_steps`, `learning_rate`, `optim`,
    `eval_steps`, `save_total_limit`, ...) and MiniGPT's own keys."""

    section = "training"
    output_dir: str = "runs/minigpt"  # checkpoints, metrics.jsonl, samples.txt, loss.png and final/ go here
    overwrite_output_dir: bool = False  # start over in an output_dir that holds a run: removes its outputs first
    min_learning_rate: float = 1e-4  # floor of the decay: cosine_with_min_lr, warmup_stable_decay
    decay_fraction: float = 0.3  # warmup_stable_decay: the share of the run, at its end, that decays
    max_time: float | None = None  # seconds of training after which the run saves and ends, undecayed
    budget: str | None = None  # "30m", "2h", "900s" or "3e13 flops": the run sizes itself for it (sizing.py)
    decay_embeddings: bool = False  # also decay token/position embeddings (and the tied output head)
    eval_tokens: int | None = 1_048_576  # most validation tokens an evaluation reads (a seeded sample)
    sample_steps: int = 200  # print and save text samples every this many steps (0: only at the end)
    sample_prompts: list[str] | None = None  # each continued per sampling (null: validation openings)
    sample_max_new_tokens: int = 64  # tokens generated per sample
    sample_temperature: float = 0.8  # softmax temperature for samples (0: greedy)
    sample_top_k: int | None = 50  # sample only from the k most likely tokens (None: all)
    trainer: dict[str, Any] = field(default_factory=dict, repr=False)  # TrainingArguments keys written

    def __post_init__(self) -> None:
        self.check_values()
        require(0 <= self.min_learning_rate <= self.learning_rate, "training.min_learning_rate",
                f"must be between 0 and training.learning_rate ({self.learning_rate})", self.min_learning_rate)
        require_choice(self.lr_scheduler_type, LR_SCHEDULER_TYPES, "training.lr_scheduler_type")
        if self.budget is not None:
            parse_budget(self.budget)  # a ConfigError naming training.budget
        for name in [self.report_to] if isinstance(self.report_to, str) else self.report_to:
            require_choice(name, REPORT_TO_CHOICES, "training.report_to")
        require(self.sample_prompts != [], "training.sample_prompts", "needs at least one prompt (null: from the corpus)", [])
        require(bool(self.output_dir), "training.output_dir", "must not be empty", self.output_dir)

    def schedule_kwargs(self) -> dict[str, Any]:
        """Trainer's `lr_scheduler_kwargs`: the floor of cosine_with_min_lr; warmup_stable_decay's cosine
        decay over the last `decay_fraction` of the steps, to the same floor."""
        if self.lr_scheduler_type == "cosine_with_min_lr":
            return {"min_lr": self.min_learning_rate}
        if self.lr_scheduler_type == "warmup_stable_decay":
            decay_steps = max(1, round(self.decay_fraction * self.max_steps))
            return {"num_decay_steps": decay_steps, "min_lr_ratio": self.min_learning_rate / self.learning_rate, "decay_type": "cosine"}
        return {}


@takes_trainer_keys
@dataclass(eq=False)
class HardwareSettings(TrainerBacked):
    """The `hardware:` section: how the run uses the machine, not what it learns (precision,
    compile, batch sizes, accumulation, dataloader workers: HARDWARE_TRAINER_KEYS) and MiniGPT's own
    keys. `profile` names `configs/hardware/<profile>.yaml`, whose values are the defaults."""

    section = "hardware"
    profile: str | None = None  # "cpu", "gpu-bf16", "multi-gpu" or a .yaml path
    bf16: bool | Literal["auto"] = False  # bfloat16 autocast; "auto": where matmuls are faster in it
    attn_implementation: str = "sdpa"  # "sdpa", "eager", "flash_attention_2", ...; "auto": hardware.py
    torch_num_threads: int | None = None  # torch CPU threads per process (None: torch's default, one per core)
    keep_freed_memory: bool = False  # CPU: glibc keeps freed blocks for reuse (no page faults per step)
    peak_flops: float | Literal["auto"] = "auto"  # peak FLOP/s of one device for MFU; "auto" measures it
    trainer: dict[str, Any] = field(default_factory=dict, repr=False)  # TrainingArguments keys written

    def __post_init__(self) -> None:
        self.check_values()
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
    # Dotted keys the YAML or an override wrote: with model.init_from only these can contradict the base.
    explicit_keys: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain nested dict of every setting, in schema order."""
        sections = {name: getattr(self, name) for name in SECTIONS}
        return {name: s.to_dict() if hasattr(s, "to_dict") else dataclasses.asdict(s) for name, s in sections.items()}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


SECTIONS: dict[str, type] = {
    "model": ModelSettings, "tokenizer": TokenizerSettings, "data": DataSettings, "training": TrainingSettings,
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
