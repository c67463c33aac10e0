"""YAML -> typed run config: strict keys, typed values, dotted overrides, one-line errors.

A run config has five sections, each a dataclass that the component using it receives alone:
`model` (MiniGPTConfig's architecture fields), `tokenizer` (TokenizerSettings), `data`
(DataSettings), `training` (Trainer's optimisation, logging and sampling settings) and
`hardware` (precision, attention kernel, compile, batch and accumulation, peak FLOP/s).

A file may start from another: `extends: base.yaml` (a path relative to the file's folder) takes
the base's sections as defaults, merged key by key (a section is merged, not replaced), so a
variant holds only the keys it changes; a base may extend a file in turn. Overrides from the
command line apply last, and the resolved config a run writes holds the merged settings.

Loading never executes code (`yaml.safe_load`). An unknown key, a value of the wrong type, an
impossible value or two settings that contradict each other raise `ConfigError` with one line
naming the dotted key (and a did-you-mean suggestion for typos), before anything heavy starts.
"""

from __future__ import annotations

import importlib.util
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from ..errors import ConfigError
from .settings import MANAGED_MODEL_FIELDS, SECTIONS, HardwareSettings, RunConfig, section_types, suggest

# Shipped configs and hardware profiles: configs/ in the repository.
REPO_CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
HARDWARE_PROFILE_DIRNAME = "hardware"
EXTENDS_KEY = "extends"  # top-level key: the config file whose sections this one's keys are merged over

# ---- loading -------------------------------------------------------------------------------


def load_run_config(path: str | Path, overrides: Iterable[str] = ()) -> RunConfig:
    """Read a run config YAML, apply `section.key=value` overrides, validate everything.

    Raises ConfigError (one line naming the dotted key) on any problem.
    """
    path = Path(path)
    raw, profile_dir = read_config_file(path)
    if not raw:
        raise ConfigError(
            f"{path} is empty: a run config names at least its training.output_dir (see configs/shakespeare.yaml)"
        )
    for override in overrides:
        apply_override(raw, override)
        if override.partition("=")[0].strip() == "hardware.profile":
            profile_dir = path.parent  # a profile named on the command line is looked up from the config's folder
    return build_run_config(raw, config_dir=profile_dir)


def read_config_file(path: Path, extended_by: tuple[Path, ...] = ()) -> tuple[dict[str, Any], Path]:
    """A config file's raw sections, merged over those of the file it `extends` (recursively), and
    the folder `hardware.profile` is looked up from: that of the file whose profile won.

    A file without `extends` that no other file extends comes back as written (`build_run_config`
    checks it). In a chain, each file's sections and keys are checked here, so an error names its
    file. `extended_by`: the files already in the chain, extending this one (a cycle is an error).
    """
    raw = read_yaml_mapping(path, what="config file")
    if EXTENDS_KEY not in raw and not extended_by:
        return raw, path.parent
    has_base = EXTENDS_KEY in raw
    base_name = raw.pop(EXTENDS_KEY, None)
    own = _checked_sections(raw, path)
    if not has_base:  # the end of the chain
        merged, profile_dir = {}, path.parent
    else:
        if not isinstance(base_name, str) or not base_name.strip():
            raise ConfigError(
                f"{path}: {EXTENDS_KEY} must be a config file's path relative to this file's folder, "
                f"got {type(base_name).__name__} {base_name!r}"
            )
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


def _checked_sections(raw: Mapping[str, Any], path: Path) -> dict[str, dict[str, Any]]:
    """The sections of one file in an `extends` chain, each a mapping of known keys; errors name the file."""
    source = f" (in {path})"
    sections: dict[str, dict[str, Any]] = {}
    for section, values in raw.items():
        _check_known(str(section), SECTIONS, where="section", prefix="", source=source)
        if values is None:  # an empty section
            values = {}
        if not isinstance(values, dict):
            raise ConfigError(f"{section} must be a mapping of keys, got {type(values).__name__}{source}")
        types_by_key = section_types(SECTIONS[section])
        for key in values:
            if key not in types_by_key:
                _raise_unknown_key(section, str(key), source=source)
        sections[section] = dict(values)
    return sections


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
        raise ConfigError(_yaml_problem(path, err)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of sections, got {type(data).__name__}")
    return data


def _yaml_problem(path: Path, err: yaml.YAMLError) -> str:
    """PyYAML's error as `file:line:column: problem` (its own text names the stream, not the file)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    detail = " ".join((f"{problem} ({context})" if context else problem).split())
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    return f"{where}: invalid YAML: {detail}"


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
    annotation = section_types(SECTIONS[section]).get(key)
    if annotation is None:
        _raise_unknown_key(section, key)
    try:
        value = yaml.safe_load(text) if text.strip() else text
    except yaml.YAMLError:
        value = text
    if value is not None and not isinstance(value, str) and _accepts_str(annotation):
        value = text
    elif value is not None and not isinstance(value, list) and _list_of_str(annotation):
        value = [text]  # one value where a list is expected is a list of one, taken literally
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
    explicit = frozenset(
        f"{section}.{key}" for section, values in raw.items() if isinstance(values, dict) for key in values
    )
    run = RunConfig(**sections, explicit_keys=explicit)
    check_cross_fields(run)
    return run


def build_section(section: str, cls: type, values: Mapping[str, Any]) -> Any:
    """Check keys and types of one section against its dataclass and construct it."""
    types_by_key = section_types(cls)
    kwargs = {}
    for key, value in values.items():
        if key not in types_by_key:
            _raise_unknown_key(section, str(key))
        kwargs[key] = coerce(value, types_by_key[key], f"{section}.{key}")  # Trainer keys too (TrainerBacked)
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
    types_by_key = section_types(HardwareSettings)
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
    hint = suggest(profile, known)
    raise ConfigError(
        f"hardware.profile {profile!r} not found{hint} (known: {', '.join(known) or 'none'}; or give a .yaml path)"
    )


def list_hardware_profiles(config_dir: Path | None = None) -> list[str]:
    dirs = [d / HARDWARE_PROFILE_DIRNAME for d in (config_dir, REPO_CONFIG_DIR) if d is not None]
    return sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.yaml")})


def check_cross_fields(run: RunConfig) -> None:
    """Contradictions between settings of different sections, each named by its dotted key.

    With `model.init_from` the architecture is the base model's, known only once it is read: the
    run checks `check_fits_model` then.
    """
    if run.model.init_from is None:
        check_fits_model(run)
        if run.data.needs_trained_model:
            raise ConfigError(f"data.format={run.data.format} fine-tunes a trained model: set model.init_from (docs/chat.md)")
    if run.training.budget is not None and run.model.init_from is not None:
        raise ConfigError(
            "training.budget sizes a new model; with model.init_from the shape is the base's: "
            "set training.max_steps instead"
        )
    if run.training.warmup_steps >= run.training.max_steps and run.training.budget is None:
        raise ConfigError(
            f"training.warmup_steps ({run.training.warmup_steps}) must be less than "
            f"training.max_steps ({run.training.max_steps})"
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
    if run.hardware.use_cpu and run.hardware.attn_implementation.startswith("flash_attention"):
        raise ConfigError(f"hardware.attn_implementation {run.hardware.attn_implementation} needs a CUDA GPU")
    if run.hardware.fp16 and run.hardware.use_cpu:
        raise ConfigError("hardware.fp16 needs a GPU; on the CPU use hardware.bf16 or full precision")


def check_fits_model(run: RunConfig, whose: str = "") -> None:
    """Data blocks and text samples fit the model's context; `whose` names where it came from."""
    max_positions = run.model.max_position_embeddings
    if run.data.block_size > max_positions:
        raise ConfigError(
            f"data.block_size ({run.data.block_size}) exceeds {whose}model.max_position_embeddings ({max_positions})"
        )
    if run.training.sample_max_new_tokens >= max_positions:
        raise ConfigError(
            f"training.sample_max_new_tokens ({run.training.sample_max_new_tokens}) must be less than "
            f"{whose}model.max_position_embeddings ({max_positions})"
        )


# ---- typing --------------------------------------------------------------------------------


def coerce(value: Any, annotation: Any, key: str) -> Any:
    """Check `value` against a type annotation; return it. Raise ConfigError."""
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
            f"{key} must be one of {', '.join(map(repr, args))}, got {value!r}{suggest(value, args)}"
        )
    if origin is list:
        if not isinstance(value, list):
            value = [value]  # one value where a list is expected means a list of one
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
            return value  # an int stays one: Trainer reads logging_steps: 50 as 50 steps, 0.5 as a share
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
    if origin is Literal:
        return " or ".join(repr(a) for a in typing.get_args(annotation))
    names = {bool: "true/false", int: "an integer", float: "a number", str: "a string"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _accepts_str(annotation: Any) -> bool:
    if annotation is str:
        return True
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and str in typing.get_args(annotation)


def _list_of_str(annotation: Any) -> bool:
    """list[str], or list[str] | None (null stays null)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        annotation = options[0] if len(options) == 1 else annotation
    return typing.get_origin(annotation) is list and typing.get_args(annotation) == (str,)



# ---- messages ------------------------------------------------------------------------------


def _check_known(name: str, known: Mapping[str, Any], where: str, prefix: str, source: str = "") -> None:
    if name not in known:
        raise ConfigError(
            f"unknown {where} {prefix}{name!r}{source}{suggest(name, known)} (known: {', '.join(known)})"
        )


def _raise_unknown_key(section: str, key: str, source: str = "") -> typing.NoReturn:
    if section == "model" and key in MANAGED_MODEL_FIELDS:
        raise ConfigError(f"model.{key} cannot be set{source}: {MANAGED_MODEL_FIELDS[key]}")
    # A key that exists in another section is the likeliest mistake: name its real home.
    homes = [name for name, cls in SECTIONS.items() if name != section and key in section_types(cls)]
    if homes:
        raise ConfigError(f"unknown key {section}.{key}{source}; it belongs in {homes[0]}.{key}")
    candidates = [f"{section}.{k}" for k in section_types(SECTIONS[section])]
    raise ConfigError(f"unknown key {section}.{key}{source}{suggest(f'{section}.{key}', candidates)}")

