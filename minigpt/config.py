"""YAML -> typed run config: strict keys, typed values, dotted overrides, one-line errors.

A run config has five sections, each a dataclass that the component using it receives alone:
`model` (MiniGPTConfig's architecture fields), `tokenizer` (TokenizerSettings), `data`
(DataSettings), `training` (Trainer's optimisation, logging and sampling settings) and
`hardware` (precision, attention kernel, compile, batch and accumulation, peak FLOP/s).

Loading never executes code (`yaml.safe_load`). An unknown key, a value of the wrong type, an
impossible value or two settings that contradict each other raise `ConfigError` with one line
naming the dotted key (and a did-you-mean suggestion for typos), before anything heavy starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from minigpt.configuration_minigpt import MiniGPTConfig
from minigpt.data import DataSettings
from minigpt.errors import ConfigError
from minigpt.tokenization import TokenizerSettings

# Shipped hardware profiles: configs/hardware/<name>.yaml in the repository.
REPO_CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
HARDWARE_PROFILE_DIRNAME = "hardware"

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

ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
LR_SCHEDULER_TYPES = (
    "cosine_with_min_lr",
    "warmup_stable_decay",
    "cosine",
    "linear",
    "constant_with_warmup",
    "constant",
)
REPORT_TO_CHOICES = ("none", "tensorboard", "wandb", "trackio", "mlflow", "all")


def _model_settings_fields() -> list[tuple[str, Any, Any]]:
    """(name, type, default) of every MiniGPTConfig architecture field the run config may set."""
    # Resolve only the class's own annotations (its bases annotate with names like `torch`).
    own_annotations = type("Own", (), {"__annotations__": dict(MiniGPTConfig.__annotations__)})
    own_annotations.__module__ = MiniGPTConfig.__module__
    hints = typing.get_type_hints(own_annotations)
    own = [name for name in MiniGPTConfig.__annotations__ if name not in MANAGED_MODEL_FIELDS]
    return [(name, hints[name], field(default=getattr(MiniGPTConfig, name))) for name in own]


# The `model:` section: MiniGPTConfig's own fields (see configuration_minigpt.py for what each
# does), generated from that class so the two can never drift apart.
ModelSettings = dataclasses.make_dataclass(
    "ModelSettings",
    _model_settings_fields(),
    namespace={
        "__doc__": "The `model:` section: MiniGPTConfig's architecture fields except vocab and token ids."
    },
)


@dataclass
class TrainingSettings:
    """The `training:` section: what Trainer optimises, logs, evaluates and saves, and text samples.

    Keys that mirror `transformers.TrainingArguments` keep its names and meaning.
    """

    output_dir: str = "runs/minigpt"  # checkpoints, metrics.jsonl, samples.txt, loss.png and final/ go here
    max_steps: int = 1000  # optimizer steps in the whole run
    learning_rate: float = 1e-3  # peak learning rate, reached at the end of warmup
    min_learning_rate: float = 1e-4  # floor of the cosine decay (used by cosine_with_min_lr only)
    lr_scheduler_type: str = "cosine_with_min_lr"  # Trainer schedule name; warmup is linear in all of them
    warmup_steps: int = 100  # linear warmup from 0 to learning_rate over this many steps
    weight_decay: float = 0.1  # AdamW decoupled weight decay, applied to weight matrices only
    decay_embeddings: bool = False  # also decay token/position embeddings (and the tied output head)
    adam_beta1: float = 0.9  # AdamW first-moment decay
    adam_beta2: float = 0.95  # AdamW second-moment decay (0.95 as in GPT-3 / nanoGPT)
    adam_epsilon: float = 1e-8  # AdamW epsilon
    optim: str = "adamw_torch"  # Trainer optimizer name ("adamw_torch_fused" is faster on GPU)
    max_grad_norm: float = 1.0  # clip the global gradient norm to this (0 disables clipping)
    seed: int = 42  # seeds Python, NumPy and torch (init, dropout, data order)
    logging_steps: int = 10  # log a line and a metrics.jsonl record every this many steps
    eval_steps: int = 200  # evaluate on the validation split every this many steps (and at the end)
    save_steps: int = 500  # write a checkpoint every this many steps (and at the end)
    save_total_limit: int | None = 2  # keep at most this many checkpoints (None keeps all)
    report_to: str | list[str] = "none"  # extra loggers, e.g. "tensorboard" (needs the tensorboard package)
    sample_steps: int = 200  # print and save text samples every this many steps (0: only at the end)
    sample_prompts: list[str] = field(default_factory=lambda: ["\n"])  # each prompt is continued once
    sample_max_new_tokens: int = 64  # tokens generated per sample
    sample_temperature: float = 0.8  # softmax temperature for samples (0: greedy)
    sample_top_k: int | None = 50  # sample only from the k most likely tokens (None: all)

    def __post_init__(self) -> None:
        for name in ("max_steps", "logging_steps", "eval_steps", "save_steps", "sample_max_new_tokens"):
            _require(getattr(self, name) > 0, f"training.{name}", "must be positive", getattr(self, name))
        for name in ("warmup_steps", "sample_steps", "weight_decay", "max_grad_norm", "sample_temperature"):
            _require(getattr(self, name) >= 0, f"training.{name}", "must be >= 0", getattr(self, name))
        _require(self.learning_rate > 0, "training.learning_rate", "must be positive", self.learning_rate)
        _require(
            0 <= self.min_learning_rate <= self.learning_rate,
            "training.min_learning_rate",
            f"must be between 0 and training.learning_rate ({self.learning_rate})",
            self.min_learning_rate,
        )
        for name in ("adam_beta1", "adam_beta2"):
            _require(
                0 <= getattr(self, name) < 1, f"training.{name}", "must be in [0, 1)", getattr(self, name)
            )
        _require(self.adam_epsilon > 0, "training.adam_epsilon", "must be positive", self.adam_epsilon)
        _require_choice(self.lr_scheduler_type, LR_SCHEDULER_TYPES, "training.lr_scheduler_type")
        for name in [self.report_to] if isinstance(self.report_to, str) else self.report_to:
            _require_choice(name, REPORT_TO_CHOICES, "training.report_to")
        if self.save_total_limit is not None:
            _require(self.save_total_limit > 0, "training.save_total_limit", "must be positive or null", 0)
        if self.sample_top_k is not None:
            _require(
                self.sample_top_k > 0, "training.sample_top_k", "must be positive or null", self.sample_top_k
            )
        _require(bool(self.sample_prompts), "training.sample_prompts", "needs at least one prompt", [])
        _require(bool(self.output_dir), "training.output_dir", "must not be empty", self.output_dir)


@dataclass
class HardwareSettings:
    """The `hardware:` section: how the run uses the machine, not what it learns.

    `profile` names a file `configs/hardware/<profile>.yaml` whose values are the defaults of this
    section; keys written here override them.
    """

    profile: str | None = (
        None  # hardware profile to start from: "cpu", "gpu-bf16", "multi-gpu" or a .yaml path
    )
    use_cpu: bool = False  # train on the CPU even if an accelerator is present
    bf16: bool = False  # bfloat16 mixed precision (Ampere+ GPUs, recent CPUs)
    fp16: bool = False  # float16 mixed precision with a dynamic grad scaler (older GPUs)
    tf32: bool | None = None  # TensorFloat-32 matmuls on Ampere+ GPUs (None: torch's default)
    attn_implementation: str = "sdpa"  # "sdpa", "eager", "flash_attention_2", ...
    torch_compile: bool = False  # compile the model with torch.compile (first steps are slower)
    torch_compile_mode: str | None = None  # torch.compile mode, e.g. "max-autotune" (None: default)
    activation_checkpointing: bool = False  # recompute activations in backward to save memory
    per_device_train_batch_size: int = 8  # blocks per forward pass on each device
    gradient_accumulation_steps: int = 1  # forward passes summed into one optimizer step
    per_device_eval_batch_size: int = 16  # blocks per forward pass when evaluating
    dataloader_num_workers: int = 0  # worker processes feeding batches (0: the training process itself)
    torch_num_threads: int | None = None  # torch CPU threads per process (None: one per core)
    peak_flops: float = 1e12  # peak FLOP/s of one device at the training precision, for MFU

    def __post_init__(self) -> None:
        for name in (
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
            "per_device_eval_batch_size",
        ):
            _require(getattr(self, name) > 0, f"hardware.{name}", "must be positive", getattr(self, name))
        _require(self.dataloader_num_workers >= 0, "hardware.dataloader_num_workers", "must be >= 0", 0)
        if self.torch_num_threads is not None:
            _require(self.torch_num_threads > 0, "hardware.torch_num_threads", "must be positive or null", 0)
        _require(self.peak_flops > 0, "hardware.peak_flops", "must be positive", self.peak_flops)
        _require(
            not (self.bf16 and self.fp16), "hardware.fp16", "cannot be true together with hardware.bf16", True
        )
        _require_choice(self.attn_implementation, ATTN_IMPLEMENTATIONS, "hardware.attn_implementation")


@dataclass
class RunConfig:
    """One training run, as resolved from a YAML file and command-line overrides."""

    model: ModelSettings = field(default_factory=ModelSettings)
    tokenizer: TokenizerSettings = field(default_factory=TokenizerSettings)
    data: DataSettings = field(default_factory=DataSettings)
    training: TrainingSettings = field(default_factory=TrainingSettings)
    hardware: HardwareSettings = field(default_factory=HardwareSettings)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Plain nested dict of every setting (defaults included), in schema order."""
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    def model_config(self, vocab_size: int, **token_ids: int | None) -> MiniGPTConfig:
        """The model's MiniGPTConfig: the `model` section plus the tokenizer's vocabulary and ids."""
        return MiniGPTConfig(**dataclasses.asdict(self.model), vocab_size=vocab_size, **token_ids)


SECTIONS: dict[str, type] = {
    "model": ModelSettings,
    "tokenizer": TokenizerSettings,
    "data": DataSettings,
    "training": TrainingSettings,
    "hardware": HardwareSettings,
}


# ---- loading -------------------------------------------------------------------------------


def load_run_config(path: str | Path, overrides: Iterable[str] = ()) -> RunConfig:
    """Read a run config YAML, apply `section.key=value` overrides, validate everything.

    Raises ConfigError (one line naming the dotted key) on any problem.
    """
    path = Path(path)
    raw = read_yaml_mapping(path, what="config file")
    for override in overrides:
        apply_override(raw, override)
    return build_run_config(raw, config_dir=path.parent)


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """`yaml.safe_load` a file that must hold a mapping (an empty file is an empty mapping)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except (IsADirectoryError, UnicodeDecodeError, PermissionError) as err:
        raise ConfigError(f"cannot read {what} {path}: {err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not valid YAML: {' '.join(str(err).split())}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sections, got {type(data).__name__}")
    return data


def apply_override(raw: dict[str, Any], override: str) -> None:
    """Apply one `section.key=value` override to a raw config mapping, in place.

    The value is read as YAML (so `true`, `3`, `1.5e-3`, `null`, `[a, b]` work); where the schema
    wants a string, the text is taken literally (`tokenizer.path=007` stays "007").
    """
    dotted, sep, text = override.partition("=")
    dotted = dotted.strip()
    section, dot, key = dotted.partition(".")
    if not sep or not dot or not key or "." in key:
        raise ConfigError(
            f"override {override!r} must look like section.key=value, e.g. training.max_steps=200"
        )
    _check_known(section, SECTIONS, where="section", prefix="")
    annotation = _section_types(SECTIONS[section]).get(key)
    if annotation is None:
        _raise_unknown_key(section, key)
    try:
        value = yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        value = text
    if value is not None and not isinstance(value, str) and _accepts_str(annotation):
        value = text
    target = raw.setdefault(section, {})
    if target is None:
        target = raw[section] = {}
    if not isinstance(target, dict):
        raise ConfigError(f"{section} must be a mapping of keys, got {type(target).__name__}")
    target[key] = value


def build_run_config(raw: Mapping[str, Any], config_dir: Path | None = None) -> RunConfig:
    """Turn a raw nested mapping into a validated RunConfig."""
    for section in raw:
        _check_known(str(section), SECTIONS, where="section", prefix="")
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        values = raw.get(name) or {}
        if not isinstance(values, dict):
            raise ConfigError(f"{name} must be a mapping of keys, got {type(values).__name__}")
        if name == "hardware":
            values = resolve_hardware_profile(values, config_dir)
        sections[name] = build_section(name, cls, values)
    run = RunConfig(**sections)
    check_cross_fields(run)
    return run


def build_section(section: str, cls: type, values: Mapping[str, Any]) -> Any:
    """Check keys and types of one section against its dataclass and construct it."""
    types_by_key = _section_types(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in types_by_key:
            _raise_unknown_key(section, str(key))
        kwargs[key] = coerce(value, types_by_key[key], f"{section}.{key}")
    try:
        settings = cls(**kwargs)
        if callable(getattr(settings, "validate", None)):  # TokenizerSettings/DataSettings check themselves
            settings.validate()
    except ConfigError:
        raise
    except (ValueError, TypeError) as err:
        # Settings classes owned by other modules may raise ValueError; name the section at least.
        raise ConfigError(f"{section}: {err}") from None
    return settings


def resolve_hardware_profile(values: Mapping[str, Any], config_dir: Path | None) -> dict[str, Any]:
    """The hardware section with its profile's values as defaults (keys given here win)."""
    profile = values.get("profile")
    if profile is None:
        return dict(values)
    if not isinstance(profile, str):
        raise ConfigError(f"hardware.profile must be a profile name or a .yaml path, got {profile!r}")
    profile_path = find_hardware_profile(profile, config_dir)
    defaults = read_yaml_mapping(profile_path, what="hardware profile")
    if "profile" in defaults:
        raise ConfigError(f"hardware profile {profile_path} must not itself set hardware.profile")
    types_by_key = _section_types(HardwareSettings)
    for key in defaults:
        if key not in types_by_key:
            _raise_unknown_key("hardware", str(key), source=f" (in {profile_path})")
    return {**defaults, **values}


def find_hardware_profile(profile: str, config_dir: Path | None = None) -> Path:
    """A profile's file: a path as given, else `<config dir>/hardware/`, else the shipped `configs/hardware/`."""
    if profile.endswith((".yaml", ".yml")) or "/" in profile:
        candidates = [Path(profile)]
        if config_dir is not None:
            candidates.append(config_dir / profile)
    else:
        dirs = [d / HARDWARE_PROFILE_DIRNAME for d in (config_dir, REPO_CONFIG_DIR) if d is not None]
        candidates = [d / f"{profile}.yaml" for d in dirs]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    known = list_hardware_profiles(config_dir)
    hint = _suggest(profile, known)
    raise ConfigError(
        f"hardware.profile {profile!r} not found{hint} (known: {', '.join(known) or 'none'}; or give a .yaml path)"
    )


def list_hardware_profiles(config_dir: Path | None = None) -> list[str]:
    dirs = [d / HARDWARE_PROFILE_DIRNAME for d in (config_dir, REPO_CONFIG_DIR) if d is not None]
    return sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.yaml")})


def check_cross_fields(run: RunConfig) -> None:
    """Contradictions between settings of different sections, each named by its dotted key."""
    model_fields = dataclasses.asdict(run.model)
    try:
        run.model_config(vocab_size=run.tokenizer.vocab_size)
    except ValueError as err:
        # MiniGPTConfig names the field ("MiniGPTConfig.hidden_size ..."): say it as the YAML key.
        message = str(err).replace("MiniGPTConfig.", "model.")
        if not any(f"model.{name}" in message for name in model_fields):
            message = f"model: {message}"
        raise ConfigError(message) from None
    max_positions = run.model.max_position_embeddings
    if run.data.block_size > max_positions:
        raise ConfigError(
            f"data.block_size ({run.data.block_size}) exceeds model.max_position_embeddings ({max_positions})"
        )
    if run.training.warmup_steps >= run.training.max_steps:
        raise ConfigError(
            f"training.warmup_steps ({run.training.warmup_steps}) must be less than "
            f"training.max_steps ({run.training.max_steps})"
        )
    if run.training.sample_max_new_tokens >= max_positions:
        raise ConfigError(
            f"training.sample_max_new_tokens ({run.training.sample_max_new_tokens}) must be less than "
            f"model.max_position_embeddings ({max_positions})"
        )
    report_to = (
        [run.training.report_to] if isinstance(run.training.report_to, str) else run.training.report_to
    )
    if "tensorboard" in report_to and not any(
        importlib.util.find_spec(name) for name in ("tensorboard", "tensorboardX")
    ):
        raise ConfigError(
            "training.report_to: tensorboard is not installed (pip install 'minigpt[tensorboard]')"
        )
    from transformers.training_args import OptimizerNames  # late: only once the cheap checks passed

    _require_choice(run.training.optim, [name.value for name in OptimizerNames], "training.optim")
    if run.hardware.use_cpu and run.hardware.attn_implementation.startswith("flash_attention"):
        raise ConfigError(f"hardware.attn_implementation {run.hardware.attn_implementation} needs a CUDA GPU")
    if run.hardware.fp16 and run.hardware.use_cpu:
        raise ConfigError("hardware.fp16 needs a GPU; on the CPU use hardware.bf16 or full precision")


# ---- typing --------------------------------------------------------------------------------


def coerce(value: Any, annotation: Any, key: str) -> Any:
    """Check `value` against a type annotation; return it (ints widen to float). Raise ConfigError."""
    if annotation is Any:
        return value
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            try:
                return coerce(value, option, key)
            except ConfigError:
                continue
        raise _type_error(key, annotation, value)
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(
            f"{key} must be one of {', '.join(map(repr, args))}, got {value!r}{_suggest(value, args)}"
        )
    if origin is list:
        if not isinstance(value, list):
            raise _type_error(key, annotation, value)
        return [coerce(item, args[0] if args else Any, f"{key}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _type_error(key, annotation, value)
        return {str(k): coerce(v, args[1] if args else Any, f"{key}.{k}") for k, v in value.items()}
    if annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            # YAML 1.1 reads `1e-3` (no dot) as a string: accept any text Python reads as a float.
            try:
                return float(value)
            except ValueError:
                pass
    elif annotation is str:
        if isinstance(value, str):
            return value
    elif isinstance(annotation, type) and isinstance(value, annotation):
        return value
    raise _type_error(key, annotation, value)


def _type_error(key: str, annotation: Any, value: Any) -> ConfigError:
    return ConfigError(f"{key} must be {_describe(annotation)}, got {type(value).__name__} {value!r}")


def _describe(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in typing.get_args(annotation))
    if origin is list:
        return f"a list of {_describe(typing.get_args(annotation)[0])}"
    if annotation is type(None):
        return "null"
    names = {bool: "true/false", int: "an integer", float: "a number", str: "a string"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _accepts_str(annotation: Any) -> bool:
    if annotation is str:
        return True
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and str in typing.get_args(annotation)


def _section_types(cls: type) -> dict[str, Any]:
    """{key: resolved type annotation} of a settings dataclass, in declaration order."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


# ---- messages ------------------------------------------------------------------------------


def _suggest(word: Any, candidates: Iterable[Any]) -> str:
    """ "; did you mean 'x'?" for the likeliest intended candidate, or "" when none is close."""
    word, candidates = str(word), [str(c) for c in candidates]
    extensions = [
        c for c in candidates if word and c.startswith(word)
    ]  # "adamw" -> "adamw_torch", in given order
    matches = extensions[:1] or difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f"; did you mean {matches[0]!r}?" if matches else ""


def _check_known(name: str, known: Mapping[str, Any], where: str, prefix: str) -> None:
    if name not in known:
        raise ConfigError(
            f"unknown {where} {prefix}{name!r}{_suggest(name, known)} (known: {', '.join(known)})"
        )


def _raise_unknown_key(section: str, key: str, source: str = "") -> typing.NoReturn:
    if section == "model" and key in MANAGED_MODEL_FIELDS:
        raise ConfigError(f"model.{key} cannot be set{source}: {MANAGED_MODEL_FIELDS[key]}")
    # A key that exists in another section is the likeliest mistake: name its real home.
    homes = [name for name, cls in SECTIONS.items() if name != section and key in _section_types(cls)]
    if homes:
        raise ConfigError(f"unknown key {section}.{key}{source}; it belongs in {homes[0]}.{key}")
    candidates = [f"{section}.{k}" for k in _section_types(SECTIONS[section])]
    raise ConfigError(f"unknown key {section}.{key}{source}{_suggest(f'{section}.{key}', candidates)}")


def _require(ok: bool, key: str, what: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{key} {what}, got {value!r}")


def _require_choice(value: str, choices: Iterable[str], key: str) -> None:
    choices = tuple(choices)
    if value not in choices:
        listed = f"one of {', '.join(choices)}" if len(choices) <= 10 else f"one of {len(choices)} names"
        raise ConfigError(f"{key} must be {listed}, got {value!r}{_suggest(value, choices)}")


def effective_batch_size(hardware: HardwareSettings, num_processes: int) -> int:
    """Sequences per optimizer step: per device x accumulation x processes."""
    return hardware.per_device_train_batch_size * hardware.gradient_accumulation_steps * num_processes


__all__ = [
    "HardwareSettings",
    "ModelSettings",
    "RunConfig",
    "TrainingSettings",
    "apply_override",
    "build_run_config",
    "coerce",
    "effective_batch_size",
    "find_hardware_profile",
    "load_run_config",
]
