"""scripts/generate.py: seeded sampling is reproducible across processes; settings precedence."""

from __future__ import annotations

import subprocess

import pytest
from conftest import PYTHON, REPO_ROOT, build_tiny_tokenizer
from hub_fixtures import make_run
from transformers import GenerationConfig

from minigpt.errors import ConfigError
from minigpt.generation import SamplingSettings, build_generation_config, generate_samples
from minigpt.hub.loading import load_model, load_tokenizer, resolve_model
from minigpt.hub.publishing import publish
from minigpt.run_layout import read_run_config

GENERATE = REPO_ROOT / "scripts" / "generate.py"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("generate"), seed=0, tokenizer=build_tiny_tokenizer())


def test_same_seed_gives_same_text_in_another_process(run, tmp_path, subprocess_env):
    hub_dir = tmp_path / "hub"
    publish(run, "org/gen", hub_dir, tag="v1")
    args = [
        "--prompt",
        "ROMEO:",
        "--seed",
        "7",
        "--num-samples",
        "2",
        "--temperature",
        "1.0",
        "--top-k",
        "50",
    ]
    result = subprocess.run(
        [PYTHON, str(GENERATE), "org/gen", "--hub-dir", str(hub_dir), "--revision", "v1", *args],
        cwd=tmp_path,
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--- sample 1/2 (seed 7) ---" in result.stderr and "(seed 8)" in result.stderr

    location = resolve_model(run)  # the run folder the repo was published from
    model, tokenizer = load_model(location), load_tokenizer(location)
    settings = SamplingSettings(temperature=1.0, top_k=50, seed=7, num_samples=2)
    texts = generate_samples(
        model, tokenizer, "ROMEO:", settings, read_run_config(location.local_dir), stream=False
    )
    assert result.stdout == texts[0] + "\n\n" + texts[1] + "\n"  # streamed text == generated text
    assert texts[0] != texts[1]  # sample i uses seed + i


def test_piped_generate_on_a_run_folder_asks_nothing(run, tmp_path, subprocess_env):
    """#48: the run's own model folder (remote code beside it) loads without transformers' "run the
    custom code? [y/N]" on stdin, and without a bare config's warning."""
    result = subprocess.run(
        [PYTHON, str(GENERATE), str(run), "--prompt", "ROMEO:", "--max-new-tokens", "4", "--seed", "1"],
        cwd=tmp_path, env=subprocess_env, input="y\n", capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("ROMEO:") and "custom code" not in result.stdout + result.stderr
    assert "instantiate a model of type" not in result.stderr


def test_settings_come_from_cli_then_run_config_then_generation_config():
    model_config = GenerationConfig(max_new_tokens=99, eos_token_id=0)
    run_config = {"training": {"sample_max_new_tokens": 12, "sample_temperature": 0.8, "sample_top_k": 20}}

    config = build_generation_config(model_config, SamplingSettings(), run_config)
    assert (config.max_new_tokens, config.temperature, config.top_k, config.do_sample) == (12, 0.8, 20, True)
    assert config.eos_token_id == 0

    config = build_generation_config(model_config, SamplingSettings(temperature=1.3, top_p=0.9), run_config)
    assert (config.temperature, config.top_k, config.top_p) == (1.3, 20, 0.9)

    config = build_generation_config(model_config, SamplingSettings(temperature=0.0), run_config)
    assert config.do_sample is False  # temperature 0 is greedy decoding

    config = build_generation_config(model_config, SamplingSettings(), None)
    assert config.max_new_tokens == 99 and config.do_sample is False


def test_greedy_generation_ignores_the_seed(run):
    location = resolve_model(run)
    model, tokenizer = load_model(location), load_tokenizer(location)
    greedy = [
        generate_samples(
            model, tokenizer, "To be", SamplingSettings(temperature=0, max_new_tokens=6, seed=s), stream=False
        )
        for s in (1, 2)
    ]
    assert greedy[0] == greedy[1]


def test_a_static_cache_samples_the_same_text_as_the_dynamic_one(run):
    location = resolve_model(run)
    model, tokenizer = load_model(location), load_tokenizer(location)
    texts = {
        decoding: generate_samples(
            model,
            tokenizer,
            "To be",
            SamplingSettings(temperature=1.0, top_k=20, max_new_tokens=12, seed=3, decoding=decoding),
            stream=False,
        )
        for decoding in ("dynamic", "static")
    }
    assert texts["static"] == texts["dynamic"]


@pytest.mark.parametrize(
    "settings, match",
    [
        (SamplingSettings(decoding="fast"), "--decoding"),
        (SamplingSettings(max_new_tokens=500), "exceeds the model's context of 64"),
        (SamplingSettings(top_p=1.5), "--top-p"),
        (SamplingSettings(temperature=-1), "--temperature"),
        (SamplingSettings(num_samples=0), "--num-samples"),
    ],
)
def test_bad_settings_are_user_errors(run, settings, match):
    location = resolve_model(run)
    with pytest.raises(ConfigError, match=match):
        generate_samples(load_model(location), load_tokenizer(location), "x", settings, stream=False)


@pytest.mark.parametrize(
    "model, says",
    [
        ("runs/nothere", "no model at runs/nothere: not a folder, and not a repo id in hub folder hub/"),
        ("./runs/nothere", "no model at ./runs/nothere: no such folder"),
        ("runs/a/nothere", "no model at runs/a/nothere: no such folder"),
        ("nothere", "no model at nothere: no such folder (a repo id reads ORG/NAME)"),
    ],
)
def test_a_missing_model_names_both_readings_in_one_line(model, says, tmp_path, monkeypatch, capsys):
    import runpy

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)  # the default hub folder: ./hub
    monkeypatch.setattr("sys.argv", [str(GENERATE), model])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(GENERATE), run_name="__main__")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"error: {says}\n"
    assert list(tmp_path.iterdir()) == []  # no hub folder made on the way


def test_top_k_zero_switches_the_filter_off():
    run_config = {"training": {"sample_top_k": 20}}
    config = build_generation_config(
        GenerationConfig(), SamplingSettings(temperature=1.0, top_k=0), run_config
    )
    assert config.top_k == 0  # transformers adds no top-k warper for 0
    with pytest.raises(ConfigError, match=r"^--top-k must be >= 0 \(0: no top-k filter\), got -1$"):
        SamplingSettings(top_k=-1).validate()


def test_saved_model_generates_max_new_tokens_without_a_warning_and_pipelines_stop_at_the_context(
    tmp_path, capfd
):
    """The saved generation config holds max_length = the context (pipelines stop there), and a
    call's max_new_tokens is taken without transformers' "Both max_new_tokens and max_length" warning."""
    import torch
    from conftest import tiny_model
    from transformers import AutoModelForCausalLM, pipeline

    from minigpt.training.run import generation_defaults
    from minigpt.training.settings import TrainingSettings

    model = tiny_model(seed=0)
    tokenizer = build_tiny_tokenizer()
    tokenizer.model_max_length = model.config.max_position_embeddings
    model.generation_config = generation_defaults(model.config, TrainingSettings(sample_temperature=0.0))
    model.save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "model", trust_remote_code=True)
    assert loaded.generation_config.max_length == 64

    ids = tokenizer("ROMEO:", return_tensors="pt")["input_ids"]
    capfd.readouterr()
    output = loaded.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=7)
    assert output.shape[1] == ids.shape[1] + 7
    assert "seem to have been set" not in capfd.readouterr().err  # transformers' logger writes to stderr

    generator = pipeline("text-generation", model=loaded, tokenizer=tokenizer)
    token_ids = generator("ROMEO:", return_tensors=True, do_sample=False)[0]["generated_token_ids"]
    assert len(token_ids) == 64  # prompt + new tokens: stopped at the context, not 256 new tokens on
    assert loaded.generate(ids, attention_mask=torch.ones_like(ids)).shape[1] == 64  # generate() alike
