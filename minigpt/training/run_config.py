"""YAML -> typed run config: strict keys, typed values, dotted overrides, one-line errors naming the
dotted key (with a did-you-mean). A file may extend another (`extends: base.yaml`, merged key by key);
overrides apply last. Loading never executes code (`yaml.safe_load`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import ConfigError
from .settings import MANAGED_MODEL_FIELDS, SECTIONS, RunConfig, section_types, suggest

REPO_CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
HARDWARE_PROFILE_DIRNAME = "hardware"
EXTENDS_KEY = "extends"  # top-level key: the config file this one's keys are merged over


def load_run_config(path: str | Path, overrides: Iterable[str] = ()) -> RunConfig:
    """Read a run config YAML, apply `section.key=value` overrides, validate everything."""
    path = Path(path)
    raw, profile_dir = read_config_file(path)
    if not raw:
        raise ConfigError(f"{path} is empty: a run config names at least its training.output_dir "
                          "(see configs/shakespeare.yaml)")
    for override in overrides:
        apply_override(raw, override)
        if override.partition("=")[0].strip() == "hardware.profile":
            profile_dir = path.parent  # a profile named on the command line is looked up from the config's folder
    return build_run_config(raw, config_dir=profile_dir)


def read_config_file(path: Path, extended_by: tuple[Path, ...] = ()) -> tuple[dict[str, Any], Path]:
    """A config file's raw sections merged over those of the file it `extends` (recursively), and the
    folder `hardware.profile` is looked up from (that of the file whose profile won). In a chain each
    file's keys are checked here, so an error names its file; `extended_by`: the files extending it.
    """
    raw = read_yaml_mapping(path, what="config file")
    if EXTENDS_KEY not in raw and not extended_by:
        return raw, path.parent  # build_run_config checks it
    has_base = EXTENDS_KEY in raw
    base_name = raw.pop(EXTENDS_KEY, None)
    source = f" (in {path})"
    own = {}
    for section, values in raw.items():
        _check_section(str(section), source)
        own[section] = _mapping(section, values, source)
        _check_keys(section, own[section], source)
    merged, profile_dir = {}, path.parent
    if has_base:
        if not isinstance(base_name, str) or not base_name.strip():
            raise ConfigError(f"{path}: {EXTENDS_KEY} must be a config file's path relative to this file's folder, "
                              f"got {type(base_name).__name__} {base_name!r}")
        base = path.parent / base_name
        chain = (*extended_by, path.resolve())
        if base.resolve() in chain:
            cycle = " -> ".join(str(p) for p in (*chain, base.resolve()))
            raise ConfigError(f"{path}: {EXTENDS_KEY}: {base_name} makes a cycle: {cycle}")
        if not base.is_file():
            raise ConfigError(f"{path}: {EXTENDS_KEY}: config file not found: {base}")
        merged, profile_dir = read_config_file(base, chain)
    for section, values in own.items():
        merged[section] = {**merged.get(section, {}), **values}  # this file's keys win, key by key
    if "profile" in own.get("hardware", {}):
        profile_dir = path.parent
    return merged, profile_dir


def read_yaml_mapping(path: Path, what: str) -> dict[str, Any]:
    """`yaml.safe_load` a file that must hold a mapping (an empty file is an empty mapping)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except (IsADirectoryError, UnicodeDecodeError, PermissionError) as err:
        raise ConfigError(f"cannot read {what} {path}: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(_yaml_problem(path, err)) from None
    if not isinstance(data, dict | None):
        raise ConfigError(f"{path} must hold a mapping of sections, got {type(data).__name__}")
    return data or {}


def _yaml_problem(path: Path, err: yaml.YAMLError) -> str:
    """PyYAML's error as `file:line:column: problem` (its own text names the stream, not the file)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    detail = " ".join((f"{problem} ({context})" if context else problem).split())
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    return f"{where}: invalid YAML: {detail}"


def apply_override(raw: dict[str, Any], override: str) -> None:
    """Apply one `section.key=value` override to a raw config mapping, in place. The value is read as
    YAML (`true`, `3`, `null`, `[a, b]`); where the schema wants a string, literally ("007" stays)."""
    dotted, sep, text = override.partition("=")
    section, dot, key = dotted.strip().partition(".")
    if not sep or not dot or not key or "." in key:
        raise ConfigError(f"override {override!r} must look like section.key=value, e.g. training.max_steps=200")
    _check_section(section)
    _check_keys(section, [key])
    annotation = section_types(SECTIONS[section])[key]
    try:
        value = yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        value = text
    if value is not None and not isinstance(value, str) and str in _options(annotation):
        value = text
    elif value is not None and not isinstance(value, list) and _options(annotation) == (list[str],):
        value = [text]  # one value where a list is expected is a list of one, taken literally
    raw[section] = _mapping(section, raw.get(section))
    raw[section][key] = value


def build_run_config(raw: Mapping[str, Any], config_dir: Path | None = None) -> RunConfig:
    """Turn a raw nested mapping into a validated RunConfig."""
    for section in raw:
        _check_section(str(section))
    values = {name: _mapping(name, raw.get(name)) for name in SECTIONS}
    values["hardware"] = resolve_hardware_profile(values["hardware"], config_dir)
    sections = {name: build_section(name, cls, values[name]) for name, cls in SECTIONS.items()}
    explicit = frozenset(f"{section}.{key}" for section, keys in raw.items() if isinstance(keys, dict) for key in keys)
    run = RunConfig(**sections, explicit_keys=explicit)
    check_cross_fields(run)
    return run


def build_section(section: str, cls: type, values: Mapping[str, Any]) -> Any:
    """Check keys and types of one section against its dataclass and construct it."""
    _check_keys(section, values)
    types_by_key = section_types(cls)
    kwargs = {key: coerce(value, types_by_key[key], f"{section}.{key}") for key, value in values.items()}
    try:
        settings = cls(**kwargs)
        if callable(getattr(settings, "validate", None)):  # TokenizerSettings/DataSettings check themselves
            settings.validate()
    except ConfigError:
        raise
    except (ValueError, TypeError) as err:  # the data stage's settings raise ValueError
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
    _check_keys("hardware", defaults, f" (in {profile_path})")
    return {**defaults, **values}


def find_hardware_profile(profile: str, config_dir: Path | None = None) -> Path:
    """A profile's file: a path as given, else `<config dir>/hardware/`, else the shipped `configs/hardware/`."""
    dirs = [d / HARDWARE_PROFILE_DIRNAME for d in (config_dir, REPO_CONFIG_DIR) if d is not None]
    if profile.endswith((".yaml", ".yml")) or "/" in profile:
        candidates = [Path(profile), *([config_dir / profile] if config_dir is not None else [])]
    else:
        candidates = [d / f"{profile}.yaml" for d in dirs]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.yaml")})
    raise ConfigError(f"hardware.profile {profile!r} not found{suggest(profile, known)} "
                      f"(known: {', '.join(known) or 'none'}; or give a .yaml path)")


def check_cross_fields(run: RunConfig) -> None:
    """Contradictions between settings of different sections, each named by its dotted key (with
    `model.init_from`, `check_fits_model` runs once the base is read)."""
    if run.model.init_from is None:
        check_fits_model(run)
        if run.data.needs_trained_model:
            raise ConfigError(f"data.format={run.data.format} fine-tunes a trained model: set model.init_from (docs/chat.md)")
    if run.training.budget is not None and run.model.init_from is not None:
        raise ConfigError("training.budget sizes a new model; with model.init_from the shape is the base's: "
                          "set training.max_steps instead")
    if run.training.warmup_steps >= run.training.max_steps and run.training.budget is None:
        raise ConfigError(f"training.warmup_steps ({run.training.warmup_steps}) must be less than "
                          f"training.max_steps ({run.training.max_steps})")
    report_to = run.training.report_to
    if "tensorboard" in ([report_to] if isinstance(report_to, str) else report_to) and not any(
        importlib.util.find_spec(name) for name in ("tensorboard", "tensorboardX")
    ):
        raise ConfigError("training.report_to: tensorboard is not installed (pip install 'minigpt[tensorboard]')")
    if run.hardware.use_cpu and run.hardware.attn_implementation.startswith("flash_attention"):
        raise ConfigError(f"hardware.attn_implementation {run.hardware.attn_implementation} needs a CUDA GPU")
    if run.hardware.fp16 and run.hardware.use_cpu:
        raise ConfigError("hardware.fp16 needs a GPU; on the CPU use hardware.bf16 or full precision")


def check_fits_model(run: RunConfig, whose: str = "") -> None:
    """Data blocks and text samples fit the model's context; `whose` names where it came from."""
    max_positions = run.model.max_position_embeddings
    if run.data.block_size > max_positions:
        raise ConfigError(f"data.block_size ({run.data.block_size}) exceeds "
                          f"{whose}model.max_position_embeddings ({max_positions})")
    if run.training.sample_max_new_tokens >= max_positions:
        raise ConfigError(f"training.sample_max_new_tokens ({run.training.sample_max_new_tokens}) must be less than "
                          f"{whose}model.max_position_embeddings ({max_positions})")


def coerce(value: Any, annotation: Any, key: str) -> Any:
    """`value` checked against a type annotation (ConfigError naming `key`)."""
    if annotation is Any:
        return value
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in _options(annotation):
            with contextlib.suppress(ConfigError):
                return coerce(value, option, key)
        raise _type_error(key, annotation, value)
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{key} must be one of {', '.join(map(repr, args))}, got {value!r}{suggest(value, args)}")
    if origin is list:
        if not isinstance(value, list):
            value = [value]  # one value where a list is expected means a list of one
        return [coerce(item, args[0] if args else Any, f"{key}[{i}]") for i, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise _type_error(key, annotation, value)
        return {str(k): coerce(v, args[1] if args else Any, f"{key}.{k}") for k, v in value.items()}
    if annotation is float and isinstance(value, str):  # YAML 1.1 reads `1e-3` (no dot) as a string
        with contextlib.suppress(ValueError):
            return float(value)
    number = isinstance(value, int | float) and not isinstance(value, bool)
    # A float key keeps an int: Trainer reads logging_steps: 50 as 50 steps, 0.5 as a share.
    accepted = {bool: isinstance(value, bool), int: number and isinstance(value, int), float: number}
    if accepted.get(annotation, isinstance(annotation, type) and isinstance(value, annotation)):
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
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(annotation))
    names = {bool: "true/false", int: "an integer", float: "a number", str: "a string"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _options(annotation: Any) -> tuple[Any, ...]:
    """The types an annotation allows besides None."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def _mapping(section: str, values: Any, source: str = "") -> dict[str, Any]:
    """A section's keys (an empty section is {})."""
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ConfigError(f"{section} must be a mapping of keys, got {type(values).__name__}{source}")
    return dict(values)


def _check_section(name: str, source: str = "") -> None:
    if name not in SECTIONS:
        raise ConfigError(f"unknown section {name!r}{source}{suggest(name, SECTIONS)} (known: {', '.join(SECTIONS)})")


def _check_keys(section: str, keys: Iterable[Any], source: str = "") -> None:
    known = section_types(SECTIONS[section])
    for key in map(str, keys):
        if key in known:
            continue
        if section == "model" and key in MANAGED_MODEL_FIELDS:
            raise ConfigError(f"model.{key} cannot be set{source}: {MANAGED_MODEL_FIELDS[key]}")
        # A key that exists in another section is the likeliest mistake: name its real home.
        homes = [name for name, cls in SECTIONS.items() if name != section and key in section_types(cls)]
        if homes:
            raise ConfigError(f"unknown key {section}.{key}{source}; it belongs in {homes[0]}.{key}")
        candidates = [f"{section}.{k}" for k in known]
        raise ConfigError(f"unknown key {section}.{key}{source}{suggest(f'{section}.{key}', candidates)}")
