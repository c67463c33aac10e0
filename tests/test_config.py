"""Run config: every shipped YAML loads, overrides are typed, every bad config is one clear line."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml
from conftest import load_script
from transformers import PretrainedConfig

from minigpt.errors import ConfigError, run_cli
from minigpt.model.architecture_minigpt import OPTIONS
from minigpt.model.configuration_minigpt import PLAIN_ROPE, MiniGPTConfig
from minigpt.training.run_config import apply_override, build_run_config, load_run_config
from minigpt.training.settings import (
    INIT_KEYS,
    MANAGED_MODEL_FIELDS,
    HardwareSettings,
    ModelSettings,
    RunConfig,
    effective_batch_size,
    section_types,
)

REPO = Path(__file__).resolve().parent.parent
CONFIGS = sorted((REPO / "configs").glob("*.yaml"))
HARDWARE_PROFILES = sorted((REPO / "configs" / "hardware").glob("*.yaml"))
SMOKE = REPO / "configs" / "smoke.yaml"
TRAIN_SCRIPT = REPO / "scripts" / "train.py"
MODEL_DIR = REPO / "minigpt" / "model"
SETTINGS_FILE = REPO / "minigpt" / "training" / "settings.py"


def test_the_three_required_configs_are_shipped():
    names = {path.stem for path in CONFIGS}
    assert {"shakespeare", "smoke", "gpu"} <= names
    assert {"cpu", "gpu-bf16", "multi-gpu"} <= {path.stem for path in HARDWARE_PROFILES}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_round_trips(path):
    run = load_run_config(path)
    assert isinstance(run, RunConfig)
    assert run.data.block_size <= run.model.max_position_embeddings
    # The resolved config is a complete config: loading it again gives the same run.
    again = build_run_config(yaml.safe_load(run.to_yaml()), config_dir=path.parent)
    assert again == run


@pytest.mark.parametrize("path", HARDWARE_PROFILES, ids=lambda p: p.name)
def test_every_hardware_profile_is_a_valid_hardware_section(path):
    raw = yaml.safe_load(path.read_text())
    assert set(raw) == set(section_types(HardwareSettings)) - {"profile"}  # every key, Trainer's included
    run = build_run_config({"hardware": {"profile": path.stem}})
    if raw["peak_flops"] == "auto":
        assert run.hardware.peak_flops == "auto"
    else:
        assert run.hardware.peak_flops == pytest.approx(float(raw["peak_flops"]))
    assert run.hardware.bf16 == raw["bf16"]


@pytest.mark.parametrize("path", [*CONFIGS, *HARDWARE_PROFILES], ids=lambda p: p.name)
def test_every_key_in_shipped_yaml_has_a_comment(path):
    uncommented = [
        line
        for line in path.read_text().splitlines()
        if re.match(r"^\s*[A-Za-z_][\w-]*\s*:", line) and "#" not in line
    ]
    assert uncommented == []


def test_the_config_and_the_model_section_are_declared_from_one_table():
    run = load_run_config(SMOKE)
    config = MiniGPTConfig(**run.model.architecture(), vocab_size=300, eos_token_id=0)
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size) == (32, 2, 300)
    # MiniGPTConfig's own fields are the table's (rope_parameters, a keyword, aside), in its order,
    # with its types and defaults; the section's are the init keys and the table's but the ones the
    # tokenizer or generation decide.
    inherited = {f.name for f in dataclasses.fields(PretrainedConfig)}
    config_fields = [f for f in dataclasses.fields(MiniGPTConfig) if f.name not in inherited]
    assert [(f.name, f.type, f.default) for f in config_fields] == [
        (o.name, o.annotation, o.default) for o in OPTIONS if not o.keyword
    ]
    section = [o for o in OPTIONS if o.name not in MANAGED_MODEL_FIELDS]
    assert [f.name for f in dataclasses.fields(ModelSettings)] == [*INIT_KEYS, *(o.name for o in section)]
    hints = typing.get_type_hints(ModelSettings)  # what overrides are typed by
    for option in section:
        assert (hints[option.name], getattr(ModelSettings(), option.name)) == (option.annotation, option.default)
    assert set(MANAGED_MODEL_FIELDS) < {o.name for o in OPTIONS}
    # rope_parameters' default (null) is plain RoPE for rotary positions and nothing for learned ones.
    default = ModelSettings().rope_parameters
    rotary = MiniGPTConfig(position_embedding_type="rope", rope_parameters=default)
    learned = MiniGPTConfig(position_embedding_type="learned", rope_parameters=default)
    assert rotary.rope_parameters == PLAIN_ROPE and not hasattr(learned, "rope_parameters")


def test_neither_class_writes_an_option_of_its_own():
    """The table is the only place an option is written: no annotated field in either class body."""
    for path, name in ((MODEL_DIR / "configuration_minigpt.py", "MiniGPTConfig"), (SETTINGS_FILE, "ModelSettings")):
        (body,) = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == name]
        written = {n.target.id for n in body.body if isinstance(n, ast.AnnAssign)}
        assert not written & {o.name for o in OPTIONS}, (name, written)


# (values, the key the message must name, what it must say after the key: {prefix} is the class's)
BAD_MODEL_VALUES = [
    ({"hidden_size": 0}, "hidden_size", "must be a positive integer"),
    ({"num_attention_heads": 2.5}, "num_attention_heads", "must be a positive integer"),
    ({"intermediate_size": -4}, "intermediate_size", "must be a positive integer or null"),
    ({"hidden_size": 30}, "hidden_size", "must be divisible by {prefix}num_attention_heads (4), got 30"),
    (
        {"position_embedding_type": "rope", "hidden_size": 12, "num_attention_heads": 4},
        "hidden_size",
        "/ {prefix}num_attention_heads must be even for rope, got 3",
    ),
    ({"norm_type": "rmsnrm"}, "norm_type", "must be one of layernorm, rmsnorm, got 'rmsnrm'; did you mean 'rmsnorm'?"),
    ({"mlp_type": "moe"}, "mlp_type", "must be one of standard, gated"),
    ({"position_embedding_type": "alibi"}, "position_embedding_type", "must be one of learned, rope"),
    ({"qk_norm": "yes"}, "qk_norm", "must be true or false"),
    ({"hidden_dropout": 1.0}, "hidden_dropout", "must be in [0, 1)"),
    ({"attention_dropout": -0.1}, "attention_dropout", "must be in [0, 1)"),
    ({"layer_norm_epsilon": 0.0}, "layer_norm_epsilon", "must be positive"),
    ({"initializer_range": -0.02}, "initializer_range", "must be positive"),
]


@pytest.mark.parametrize(
    ("values", "key", "says"), BAD_MODEL_VALUES, ids=[" ".join(f"{k}={v}" for k, v in c[0].items()) for c in BAD_MODEL_VALUES]
)
def test_a_bad_model_value_is_reported_alike_by_the_config_and_the_section(values, key, says):
    with pytest.raises(ValueError) as from_config:
        MiniGPTConfig(**values)
    with pytest.raises(ConfigError) as from_section:
        ModelSettings(**values)
    for error, prefix in ((from_config, "MiniGPTConfig."), (from_section, "model.")):
        assert str(error.value).startswith(f"{prefix}{key} {says.format(prefix=prefix)}"), str(error.value)
    # One check, one message: only the prefix differs.
    assert str(from_config.value).replace("MiniGPTConfig.", "model.") == str(from_section.value)


# Run first in a child Python: any import of torch or transformers fails, as it would if a bad
# config were only reported after them.
BLOCK_HEAVY_IMPORTS = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ImportError(f"{name} imported while only a config was needed")
sys.meta_path.insert(0, Block())
"""


def test_a_bad_model_key_or_value_is_reported_without_importing_torch():
    child = BLOCK_HEAVY_IMPORTS + f"""
from minigpt.errors import ConfigError
from minigpt.training.run_config import load_run_config
try:
    load_run_config({str(SMOKE)!r}, ["model.norm_typ=rmsnorm"])
except ConfigError as err:
    print(err)
import runpy
sys.argv = ["train.py", {str(SMOKE)!r}, "model.norm_type=rmsnrm"]
runpy.run_path({str(TRAIN_SCRIPT)!r}, run_name="__main__")
"""
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.stdout == "unknown key model.norm_typ; did you mean 'model.norm_type'?\n"
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        "error: model.norm_type must be one of layernorm, rmsnorm, got 'rmsnrm'; did you mean 'rmsnorm'?\n"
    )


def test_rope_parameters_reach_the_model_and_a_bad_one_names_the_key():
    from conftest import build_tiny_tokenizer

    from minigpt.training.run import build_model_config

    rope = ["model.position_embedding_type=rope"]
    run = load_run_config(SMOKE, [*rope, "model.rope_parameters={rope_type: linear, factor: 2.0}"])
    config = build_model_config(run.model, build_tiny_tokenizer())
    assert config.rope_parameters == {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    assert run.model.rope_parameters == {"rope_type": "linear", "factor": 2.0}  # the run config as written
    run = load_run_config(SMOKE, [*rope, "model.rope_parameters={rope_type: linear}"])
    with pytest.raises(ConfigError, match=r"model\.rope_parameters: .*'factor'"):
        build_model_config(run.model, build_tiny_tokenizer())


def test_overrides_are_typed_by_the_schema():
    run = load_run_config(
        SMOKE,
        [
            "training.max_steps=7",
            "training.learning_rate=1e-3",  # YAML 1.1 reads this as a string; the schema says float
            "tokenizer.path=007",  # a string field keeps the text as written
            "training.sample_prompts=[a, b]",
            "training.save_total_limit=null",
            "hardware.bf16=true",
            "model.intermediate_size=100",
        ],
    )
    assert run.training.max_steps == 7
    assert run.training.learning_rate == 1e-3 and isinstance(run.training.learning_rate, float)
    assert run.tokenizer.path == "007"
    assert run.training.sample_prompts == ["a", "b"]
    assert run.training.save_total_limit is None
    assert run.hardware.bf16 is True
    assert run.model.intermediate_size == 100


def test_hardware_profile_supplies_defaults_and_run_keys_win():
    run = load_run_config(SMOKE)
    profile = yaml.safe_load((REPO / "configs" / "hardware" / "cpu.yaml").read_text())
    assert run.hardware.use_cpu is True and run.hardware.profile == "cpu"
    assert run.hardware.per_device_train_batch_size == 8 != profile["per_device_train_batch_size"]
    gpu = load_run_config(SMOKE, ["hardware.profile=gpu-bf16"])
    assert gpu.hardware.bf16 is True and gpu.hardware.torch_compile is True
    assert gpu.hardware.per_device_train_batch_size == 8  # still the run's own value


def test_effective_batch_is_per_device_times_accumulation_times_processes():
    hardware = HardwareSettings(per_device_train_batch_size=4, gradient_accumulation_steps=3)
    assert effective_batch_size(hardware, num_processes=2) == 24


BAD_OVERRIDES = [
    # (override, dotted key the message must name, extra text it must contain)
    ("training.max_step=10", "training.max_steps", "did you mean"),
    ("trainig.max_steps=10", "training", "did you mean"),
    ("model.hiden_size=64", "model.hidden_size", "did you mean"),
    ("training.bf16=true", "hardware.bf16", "belongs in"),
    ("training.max_steps=ten", "training.max_steps", "integer"),
    ("training.max_steps=1.5", "training.max_steps", "integer"),
    ("hardware.bf16=maybe", "hardware.bf16", "true/false"),
    ("training.max_steps=0", "training.max_steps", "positive"),
    ("training.learning_rate=-1", "training.learning_rate", "positive"),
    ("data.block_size=65", "data.block_size", "max_position_embeddings"),
    ("training.warmup_steps=30", "training.warmup_steps", "training.max_steps"),
    ("model.hidden_size=33", "model.hidden_size", "divisible"),
    ("model.vocab_size=512", "model.vocab_size", "tokenizer"),
    ("tokenizer.vocab_size=100", "tokenizer.vocab_size", "too small"),
    ("training.lr_scheduler_type=cosine_min_lr", "training.lr_scheduler_type", "cosine_with_min_lr"),
    ("hardware.profile=gpu-bf", "hardware.profile", "gpu-bf16"),
    ("hardware.fp16=true", "hardware.fp16", "GPU"),
    ("hardware.attn_implementation=flash_attention_2", "hardware.attn_implementation", "GPU"),
    ("hardware.attn_implementation=spda", "hardware.attn_implementation", "sdpa"),
    ("training.min_learning_rate=1", "training.min_learning_rate", "learning_rate"),
    ("training.max_steps", "section.key=value", ""),
    ("training.optim=adamw", "training.optim", "adamw_torch"),
    ("model.init_revision=v1", "model.init_revision", "needs model.init_from"),
    ("training.eval_tokens=0", "training.eval_tokens", "positive or null"),
]


@pytest.mark.parametrize(("override", "key", "hint"), BAD_OVERRIDES, ids=[case[0] for case in BAD_OVERRIDES])
def test_bad_config_exits_2_with_one_line_naming_the_key(override, key, hint, capsys):
    main = load_script("train").main  # the CLI's own main, run as `run_cli` runs it
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: main([str(SMOKE), override]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert key in err and hint in err, err


def test_bad_yaml_files(tmp_path):
    cases = {
        "unknown section": (
            "trainer:\n  max_steps: 3\n",
            "unknown section 'trainer'; did you mean 'training'",
        ),
        "not a mapping": ("- a\n- b\n", "must hold a mapping"),
        "invalid yaml": ("training: [unclosed\n", "invalid YAML"),
        "section not a mapping": ("training: 3\n", "training must be a mapping"),
        "profile with unknown key": (None, "unknown key hardware.bf17"),
    }
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "odd.yaml").write_text("bf17: true\n")
    cases["profile with unknown key"] = ("hardware:\n  profile: odd\n", cases["profile with unknown key"][1])
    for name, (text, message) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_run_config(path)
    with pytest.raises(ConfigError, match="config file not found"):
        load_run_config(tmp_path / "missing.yaml")


def test_override_on_an_empty_section_and_a_missing_section():
    raw: dict = {"training": None}
    apply_override(raw, "training.max_steps=1200")
    apply_override(raw, "hardware.per_device_train_batch_size=2")
    run = build_run_config(raw)
    assert run.training.max_steps == 1200 and run.hardware.per_device_train_batch_size == 2


def test_cli_subprocess_bad_key_exits_2_before_anything_heavy(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(TRAIN_SCRIPT), str(SMOKE), f"training.output_dir={out}", "training.eval_step=3"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: unknown key training.eval_step; did you mean 'training.eval_steps'?"
    assert "Traceback" not in proc.stderr
    assert not out.exists()  # nothing was written


def test_report_to_tensorboard_needs_the_package():
    installed = any(importlib.util.find_spec(name) for name in ("tensorboard", "tensorboardX"))
    if installed:
        assert load_run_config(SMOKE, ["training.report_to=tensorboard"]).training.report_to == "tensorboard"
    else:
        with pytest.raises(ConfigError, match=r"training.report_to: tensorboard is not installed"):
            load_run_config(SMOKE, ["training.report_to=tensorboard"])


def test_init_from_records_which_keys_the_config_wrote_and_defers_the_context_checks():
    run = load_run_config(SMOKE, ["model.init_from=runs/base", "data.block_size=512"])
    # smoke.yaml writes four model keys; the base decides the rest (and the context: checked later)
    assert {k for k in run.explicit_keys if k.startswith("model.")} == {
        "model.hidden_size",
        "model.num_hidden_layers",
        "model.num_attention_heads",
        "model.max_position_embeddings",
        "model.init_from",
    }
    assert "data.block_size" in run.explicit_keys and "model.bias" not in run.explicit_keys
    assert run.to_dict()["model"]["init_from"] == "runs/base"


def write_config(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_extends_merges_each_section_key_by_key_and_overrides_apply_last(tmp_path):
    base = write_config(tmp_path / "base.yaml", SMOKE.read_text())
    write_config(tmp_path / "hardware" / "four.yaml", "torch_num_threads: 4\ngradient_accumulation_steps: 2\n")
    write_config(
        tmp_path / "base-four.yaml",
        "extends: base.yaml\nhardware:\n  profile: four\n  torch_num_threads: 3\n",
    )
    variant = write_config(
        tmp_path / "variants" / "fast.yaml",
        "extends: ../base-four.yaml\n"
        "training:\n  learning_rate: 1.0e-3\n  max_steps: 40\n"
        "model:\n  num_hidden_layers: 3\n",
    )
    smoke = load_run_config(base)
    run = load_run_config(variant, ["training.max_steps=50"])
    assert run.training.learning_rate == 1e-3 and run.training.max_steps == 50  # the override last
    assert run.training.warmup_steps == smoke.training.warmup_steps  # the rest of the section: the base's
    assert (run.model.num_hidden_layers, run.model.hidden_size) == (3, smoke.model.hidden_size)
    assert run.data == smoke.data and run.tokenizer == smoke.tokenizer
    # The middle file's profile, found beside it (not beside the variant); its own key over the profile's.
    assert (run.hardware.torch_num_threads, run.hardware.gradient_accumulation_steps) == (3, 2)
    assert run.hardware.per_device_train_batch_size == smoke.hardware.per_device_train_batch_size
    assert {"model.hidden_size", "model.num_hidden_layers", "hardware.profile"} <= run.explicit_keys
    assert "extends" not in run.to_dict() and run.to_dict()["hardware"]["profile"] == "four"
    assert build_run_config(yaml.safe_load(run.to_yaml()), config_dir=tmp_path) == run  # the merged settings


@pytest.mark.parametrize(
    "files, says",
    [
        ({"a.yaml": "extends: missing.yaml\n"}, r"a\.yaml: extends: config file not found: .*missing\.yaml$"),
        ({"a.yaml": "extends: a.yaml\n"}, r"a\.yaml: extends: a\.yaml makes a cycle: .*a\.yaml -> .*a\.yaml$"),
        ({"a.yaml": "extends: b.yaml\n", "b.yaml": "extends: a.yaml\n"}, r"b\.yaml: extends: a\.yaml makes a cycle"),
        ({"a.yaml": "extends: 3\n"}, r"a\.yaml: extends must be a config file's path .*, got int 3$"),
        ({"a.yaml": "extends: [b.yaml]\n"}, r"a\.yaml: extends must be .*, got list"),
        ({"a.yaml": "extends:\n"}, r"a\.yaml: extends must be .*, got NoneType None$"),
        ({"a.yaml": "extends: b.yaml\ntraining:\n  max_step: 5\n", "b.yaml": ""}, r"unknown key training\.max_step \(in .*a\.yaml\); did you mean"),
        ({"a.yaml": "extends: b.yaml\n", "b.yaml": "training:\n  max_step: 5\n"}, r"unknown key training\.max_step \(in .*b\.yaml\)"),
        ({"a.yaml": "extends: b.yaml\n", "b.yaml": "trainer:\n  max_steps: 5\n"}, r"unknown section 'trainer' \(in .*b\.yaml\)"),
        ({"a.yaml": "extends: b.yaml\n", "b.yaml": "training: [5]\n"}, r"training must be a mapping of keys, got list \(in .*b\.yaml\)$"),
    ],
)
def test_a_bad_extends_is_one_line_naming_the_file(tmp_path, files, says):
    for name, text in files.items():
        write_config(tmp_path / name, text)
    with pytest.raises(ConfigError, match=says) as err:
        load_run_config(tmp_path / "a.yaml")
    assert "\n" not in str(err.value)


