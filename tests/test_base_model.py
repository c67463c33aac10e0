"""Runs that start from a trained model (`model.init_from`): continued pretraining on new text.

A tiny base is trained on Tiny Shakespeare once per module (configs/smoke.yaml, a few seconds);
the new text is the Python language reference that ships with Python (`pydoc_data.topics`).
About 60 s on 2 cores.
"""

from __future__ import annotations

import json
import runpy
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest.mock import patch

import pytest
import torch
import yaml
from conftest import PYTHON, REPO_ROOT, build_tiny_tokenizer
from huggingface_hub import ModelCard
from safetensors.torch import load_file

from minigpt import MiniGPTConfig, MiniGPTForCausalLM
from minigpt.errors import ConfigError
from minigpt.hub.publishing import publish
from minigpt.pipeline import run_training
from minigpt.training.run_config import load_run_config

SMOKE = REPO_ROOT / "configs" / "smoke.yaml"
BLOCK = 32  # configs/smoke.yaml's data.block_size
QUIET = ["tokenizer.show_progress=false", "data.show_progress=false", "hardware.bf16=false"]


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("base_model")


@pytest.fixture(scope="module")
def base(work) -> Path:
    """A run folder trained on Tiny Shakespeare (its final/ is the base)."""
    run = load_run_config(
        SMOKE,
        [
            f"training.output_dir={work / 'shakespeare'}",
            f"tokenizer.path={work / 'shakespeare-tokenizer'}",
            f"data.cache_dir={work / 'cache'}",
            f"data.train_files={REPO_ROOT / 'data' / 'tinyshakespeare.txt'}",
            *QUIET,
        ],
    )
    run_training(run)
    return work / "shakespeare"


@pytest.fixture(scope="module")
def new_text(work, base) -> tuple[Path, Path]:
    """Train and validation files of another text. The validation text encodes to a whole number
    of blocks (EOS included), so training's eval (whole blocks only) and scripts/evaluate.py (every
    window) score the same tokens."""
    from pydoc_data.topics import topics

    from minigpt.data.tokenizer import load_tokenizer

    text = "\n\n".join(topics[key] for key in sorted(topics))
    train, validation = work / "reference-train.txt", work / "reference-validation.txt"
    train.write_text(text[:120_000])
    validation.write_text(whole_blocks(text[120_000:140_000], load_tokenizer(base / "final")))
    return train, validation


def whole_blocks(text: str, tokenizer) -> str:
    """`text` cut to a whole number of blocks of `tokenizer`'s tokens (+ the document's EOS)."""
    backend = tokenizer.backend_tokenizer
    while (len(backend.encode(text).ids) + 1) % BLOCK not in (0, 1):
        text = text[:-1]
    return text


def continue_run(work: Path, new_text: tuple[Path, Path], name: str, *overrides: str):
    """The run config of a continued run: the new text, a few steps, nothing about the architecture."""
    config = work / f"{name}.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "data": {
                    "train_files": [str(new_text[0])],
                    "validation_files": [str(new_text[1])],
                    "block_size": BLOCK,
                    "cache_dir": str(work / "cache"),
                },
                "training": {
                    "output_dir": str(work / name),
                    "max_steps": 8,
                    "warmup_steps": 1,
                    "learning_rate": 1e-3,
                    "logging_steps": 1,
                    "eval_steps": 8,
                    "save_steps": 4,
                    "save_total_limit": None,
                    "sample_steps": 8,
                    "sample_max_new_tokens": 8,
                },
                "hardware": {"profile": "cpu", "bf16": False, "torch_num_threads": 1},
            }
        )
    )
    return config, load_run_config(config, [*QUIET, *overrides])


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_cli(*args: str, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_a_run_from_a_base_starts_at_the_bases_loss_on_the_new_text(work, base, new_text, subprocess_env):
    _, run = continue_run(work, new_text, "continued", f"model.init_from={base}", "model.hidden_dropout=0.1")
    result = run_training(run)
    records = read_jsonl(work / "continued" / "metrics.jsonl")
    step0 = next(r for r in records if r.get("step") == 0 and "eval_loss" in r)
    first_loss = next(r["loss"] for r in records if "loss" in r)

    # scripts/evaluate.py --packed (as training's blocks) of the base on the new validation text: the same figure.
    evaluated = run_cli(
        "scripts/evaluate.py", str(base), "--data", str(new_text[1]), "--packed", "--json", env=subprocess_env
    )
    assert evaluated.returncode == 0, evaluated.stderr
    figures = json.loads(evaluated.stdout)
    assert figures["window"] == BLOCK and figures["num_stream_tokens"] % BLOCK in (0, 1)  # training's blocks
    assert abs(step0["eval_loss"] - figures["loss"]) < 1e-5, (step0, figures)
    assert abs(step0["eval_bpb"] - figures["bits_per_byte"]) < 1e-5

    # A fresh model on the same text, tokenizer and architecture starts far higher.
    _, fresh_run = continue_run(
        work,
        new_text,
        "fresh",
        f"tokenizer.path={base / 'final'}",
        "tokenizer.reuse=always",
        *(f"model.{k}={v}" for k, v in (("hidden_size", 32), ("num_hidden_layers", 2))),
        "model.num_attention_heads=2",
        "model.max_position_embeddings=64",
    )
    fresh = run_training(fresh_run)
    fresh_first_loss = next(r["loss"] for r in fresh.log_history if "loss" in r)
    assert step0["eval_loss"] < fresh_first_loss - 0.5  # a fresh model's loss on any text: ~ln(vocab)
    assert first_loss < fresh_first_loss - 0.5

    # The architecture and tokenizer are the base's; dropout, which may change, is the config's.
    final = MiniGPTForCausalLM.from_pretrained(result.final_dir)
    base_config = MiniGPTConfig.from_pretrained(base / "final")
    assert (final.config.hidden_size, final.config.vocab_size) == (
        base_config.hidden_size,
        base_config.vocab_size,
    )
    assert final.config.hidden_dropout == 0.1 and base_config.hidden_dropout == 0.0
    summary = json.loads((work / "continued" / "summary.json").read_text())
    assert summary["base_model"] == {"folder": "shakespeare", "model_type": "minigpt"}
    assert summary["base_eval_loss"] == step0["eval_loss"]
    resolved = yaml.safe_load((work / "continued" / "resolved_config.yaml").read_text())
    assert resolved["model"]["init_from"] == str(base) and resolved["model"]["hidden_size"] == 32


def train_in_process(argv: list[str], capsys) -> tuple[int, str]:
    """scripts/train.py run as `python scripts/train.py ARGV` would, in this process: (exit code, stderr)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        with patch.object(sys, "argv", ["train.py", *argv]):
            runpy.run_path(str(REPO_ROOT / "scripts" / "train.py"), run_name="__main__")
    return exit_info.value.code, capsys.readouterr().err


def check_refused(command: list[str], capsys, output_dir: Path, cache: Path, *expected: str) -> None:
    cache_before = sorted(p.name for p in cache.rglob("*")) if cache.exists() else []
    code, stderr = train_in_process(command, capsys)
    assert code == 2, (command, stderr[-2000:])
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for text in expected:
        assert text in lines[0], lines[0]
    assert not output_dir.exists()  # nothing written: no run folder, no new cached blocks
    assert (sorted(p.name for p in cache.rglob("*")) if cache.exists() else []) == cache_before


def test_each_bad_base_is_one_line_exit_2_and_nothing_written(work, base, new_text, subprocess_env, capsys):
    config, _ = continue_run(work, new_text, "refused")
    output_dir, cache = work / "refused", work / "cache"
    other_tokenizer = work / "other-tokenizer"
    build_tiny_tokenizer().save_pretrained(other_tokenizer)
    corrupt = work / "corrupt"
    shutil.copytree(base / "final", corrupt)
    weights = corrupt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    not_causal = work / "bert"
    not_causal.mkdir()
    (not_causal / "config.json").write_text(
        json.dumps({"model_type": "bert", "architectures": ["BertModel"]})
    )
    init = f"model.init_from={base}"
    cases = [
        ([init, f"tokenizer.path={other_tokenizer}"], ["tokenizer.path", "another tokenizer"]),
        ([init, "model.hidden_size=64"], ["model.hidden_size is 64", "but 32 in the base model"]),
        ([init, "model.max_position_embeddings=128"], ["model.max_position_embeddings is 128", "64"]),
        ([f"model.init_from={work / 'nothere'}"], ["model.init_from: no model at"]),
        ([f"model.init_from={corrupt}"], ["model.init_from: cannot load the weights of"]),
        ([f"model.init_from={not_causal}"], ["is a bert model (BertModel), not a causal language model"]),
    ]
    for overrides, expected in cases:
        check_refused([str(config), *overrides], capsys, output_dir, cache, *expected)
    # The same through a real command line: exit code 2, one line.
    result = run_cli("scripts/train.py", str(config), *cases[1][0], env=subprocess_env)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and not output_dir.exists()


def test_resume_of_a_run_from_a_base_is_bit_exact_after_sigkill_and_never_reads_the_base(
    work, base, new_text, subprocess_env
):
    own_base = work / "base-copy"
    shutil.copytree(base / "final", own_base)
    overrides = [f"model.init_from={own_base}", "model.hidden_dropout=0.1", "training.max_steps=24"]
    config, run = continue_run(work, new_text, "killed", *overrides)
    reference = run_training(
        load_run_config(config, [*QUIET, *overrides, f"training.output_dir={work / 'whole'}"])
    )

    output_dir = work / "killed"
    process = subprocess.Popen(
        [PYTHON, "scripts/train.py", str(config), *QUIET, *overrides],
        cwd=REPO_ROOT,
        env=subprocess_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while (
        not (output_dir / "checkpoint-4" / "checkpoint_complete.json").is_file() and process.poll() is None and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL, process.stderr.read()
    assert not (output_dir / "final").exists()

    own_base.rename(work / "base-gone")  # resume reads its own checkpoints only
    resumed = run_cli("scripts/train.py", str(config), *QUIET, *overrides, "--resume", env=subprocess_env)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stdout
    final = load_file(output_dir / "final" / "model.safetensors")
    expected = load_file(Path(reference.final_dir) / "model.safetensors")
    assert final.keys() == expected.keys()
    for name in expected:
        assert torch.equal(final[name], expected[name]), f"{name} differs after SIGKILL and resume"
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["base_model"]["folder"] == reference.base_model["folder"] == "base-copy"
    assert summary["base_eval_loss"] == reference.base_metrics["eval_loss"]  # step 0, from before the kill


def test_a_base_from_the_hub_folder_is_named_in_the_card(work, base, new_text):
    hub = work / "hub"
    publish(base, "me/shakespeare-gpt", hub, tag="v1")
    _, run = continue_run(
        work,
        new_text,
        "from-hub",
        "model.init_from=me/shakespeare-gpt",
        "model.init_revision=v1",
        f"model.init_hub_dir={hub}",
        "training.max_steps=2",
        "training.eval_steps=2",
    )
    result = run_training(run)
    assert result.base_model["repo_id"] == "me/shakespeare-gpt" and result.base_model["revision"] == "v1"
    assert len(result.base_model["commit"]) == 40

    commit = publish(work / "from-hub", "me/reference-gpt", hub, tag="v1")
    snapshot = hub / "models--me--reference-gpt" / "snapshots" / commit.commit_id
    card = ModelCard.load(snapshot / "README.md")
    assert card.data.base_model == "me/shakespeare-gpt"
    assert card.data.base_model_relation == "finetune"
    assert "`me/shakespeare-gpt` (revision `v1`)" in card.text
    published = yaml.safe_load((snapshot / "resolved_config.yaml").read_text())
    assert published["model"]["init_from"] == "me/shakespeare-gpt"
    assert published["model"]["init_revision"] == "v1" and "init_hub_dir" not in published["model"]


def test_a_folder_base_is_published_by_name_only(work, base):
    continued = work / "continued"  # from the first test: a run whose base is a local folder
    if not continued.is_dir():
        pytest.skip("needs test_a_run_from_a_base_starts_at_the_bases_loss_on_the_new_text")
    hub = work / "hub-folder"
    commit = publish(continued, "me/continued", hub)
    snapshot = hub / "models--me--continued" / "snapshots" / commit.commit_id
    published_text = (snapshot / "resolved_config.yaml").read_text()
    assert "# model.init_from: the base model, a folder of the training machine, by its name" in published_text
    assert yaml.safe_load(published_text)["model"]["init_from"] == "shakespeare"
    card = ModelCard.load(snapshot / "README.md")
    assert card.data.to_dict().get("base_model") is None  # a folder is no hub model
    assert "`shakespeare` (a local folder, not published)" in card.text
    assert str(base) not in (snapshot / "README.md").read_text()


def test_rotary_base_takes_a_longer_context_through_rope_scaling(work, new_text):
    """A saved model folder (random weights) as the base; context 32 -> 64 with linear scaling."""
    folder = work / "rope-model"
    tokenizer = build_tiny_tokenizer()
    torch.manual_seed(0)
    config = MiniGPTConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=32,
        position_embedding_type="rope",
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    MiniGPTForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    _, run = continue_run(
        work,
        new_text,
        "rope-longer",
        f"model.init_from={folder}",
        "model.max_position_embeddings=64",
        "model.rope_parameters={rope_type: linear, factor: 2.0}",
        "data.block_size=64",
        "training.max_steps=2",
        "training.eval_steps=2",
    )
    result = run_training(run)
    final = MiniGPTConfig.from_pretrained(result.final_dir)
    assert final.max_position_embeddings == 64
    assert final.rope_parameters == {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    with pytest.raises(ConfigError, match=r"model\.rope_parameters rope_theta is 500\.0 .* but 10000\.0"):
        _, bad = continue_run(
            work,
            new_text,
            "rope-theta",
            f"model.init_from={folder}",
            "model.rope_parameters={rope_theta: 500.0}",
        )
        run_training(bad)


def stock_folder(folder: Path, kind: str) -> Path:
    """A stock transformers model with random weights and the tiny tokenizer, saved as transformers does."""
    from transformers import GPT2Config, GPT2LMHeadModel, GPTNeoXConfig, GPTNeoXForCausalLM

    tokenizer = build_tiny_tokenizer()
    tokenizer.bos_token = tokenizer.eos_token  # GPT-2's convention: one end-of-text token
    ids = dict(bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    if kind == "gpt2":
        config = GPT2Config(n_layer=2, n_embd=32, n_head=2, n_positions=64, vocab_size=len(tokenizer), **ids)
        model = GPT2LMHeadModel(config)
    else:
        config = GPTNeoXConfig(
            num_hidden_layers=2,
            hidden_size=32,
            num_attention_heads=2,
            intermediate_size=128,
            max_position_embeddings=64,
            vocab_size=len(tokenizer),
            rotary_pct=1.0,
            use_parallel_residual=False,
            **ids,
        )
        model = GPTNeoXForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("kind", ["gpt2", "gpt_neox"])
def test_a_stock_transformers_folder_is_a_base(work, new_text, kind):
    from minigpt.evaluation import evaluate_model
    from minigpt.hub.loading import resolve_model

    folder = stock_folder(work / f"stock-{kind}", kind)
    validation = work / f"validation-{kind}.txt"  # whole blocks of the stock model's tokenizer
    validation.write_text(whole_blocks(new_text[1].read_text(), build_tiny_tokenizer()))
    _, run = continue_run(
        work,
        (new_text[0], validation),
        f"from-{kind}",
        f"model.init_from={folder}",
        "training.max_steps=2",
        "training.eval_steps=2",
    )
    result = run_training(run)
    step0 = next(r for r in result.log_history if r.get("step") == 0 and "eval_loss" in r)
    stock = evaluate_model(
        resolve_model(folder), data=str(validation), window=BLOCK, packed=True, show_progress=False
    )
    assert abs(step0["eval_loss"] - stock.loss) < 1e-5
    assert result.base_model["model_type"] == kind
