"""scripts/evaluate.py: loss, perplexity and bits per byte, by hand and against training's eval."""

from __future__ import annotations

import dataclasses
import json
import math
import runpy
import subprocess

import evaluate
import numpy as np
import pytest
import torch
from conftest import PYTHON, REPO_ROOT, build_tiny_tokenizer, tiny_model
from hub_fixtures import BLOCK_SIZE, make_run
from transformers import Trainer, TrainingArguments, default_data_collator

from minigpt.data.corpus import prepare_corpus
from minigpt.evaluation import (
    METRIC_PATH,
    data_settings_from,
    evaluate_model,
    evaluate_stream,
    load_split,
    plan_windows,
    read_run_config,
    token_stream,
)
from minigpt.hub.loading import load_model, load_tokenizer, resolve_model

EVALUATE = REPO_ROOT / "scripts" / "evaluate.py"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return make_run(tmp_path_factory.mktemp("evaluate"), seed=0, tokenizer=build_tiny_tokenizer())


@pytest.mark.parametrize(
    "n, window, stride",
    [(100, 32, 32), (96, 32, 32), (33, 32, 32), (5, 32, 32), (100, 32, 8), (100, 16, 1), (10, 32, 4)],
)
def test_windows_score_each_token_at_most_once(n, window, stride):
    scored = []
    for w in plan_windows(n, window, stride):
        assert (
            0 <= w.start < w.end <= n and w.end - w.start <= window and 1 <= w.targets < w.end - w.start + 1
        )
        scored += range(w.end - w.targets, w.end)
        if stride < window and w.start > 0:
            assert w.end - w.targets - w.start >= window - stride  # every scored token has that much context
    if stride == window:  # training's blocks: each block's first token has no context
        assert scored == [t for t in range(n) if t % window != 0 and t // window * window + 1 < n]
    else:
        assert scored == list(range(1, n))


def test_metric_module_loads_offline_and_computes_the_formulas():
    metric = evaluate.load(str(METRIC_PATH), keep_in_memory=True)
    metric.add_batch(nll_sum=[2.0], num_tokens=[2])
    metric.add_batch(nll_sum=[4.0], num_tokens=[2])
    scores = metric.compute(num_bytes=8, num_text_tokens=6)
    assert scores["loss"] == 1.5 and scores["perplexity"] == pytest.approx(math.exp(1.5))
    assert scores["bits_per_byte"] == pytest.approx(1.5 * 6 / 8 / math.log(2))


def test_non_overlapping_windows_match_a_hand_computation():
    model = tiny_model(seed=3)
    ids = np.random.default_rng(0).integers(2, 300, size=150)  # 4 full windows of 32 + 22 tokens
    result = evaluate_stream(model, ids, num_bytes=400, window=32, batch_size=3, show_progress=False)

    nats, predicted = 0.0, 0
    for start in range(0, 150, 32):
        chunk = torch.as_tensor(ids[start : start + 32])[None]
        logprobs = torch.log_softmax(model(chunk).logits[0].double(), dim=-1)  # (T, V)
        nats -= logprobs[:-1].gather(1, chunk[0, 1:, None]).sum().item()  # position t predicts t+1
        predicted += chunk.shape[1] - 1
    assert (result.num_windows, result.num_tokens, result.num_text_tokens) == (5, predicted, 150)
    assert result.loss == pytest.approx(nats / predicted, rel=1e-5)
    assert result.perplexity == pytest.approx(math.exp(nats / predicted), rel=1e-5)
    assert result.bits_per_byte == pytest.approx(nats / predicted * 150 / 400 / math.log(2), rel=1e-5)


def test_sliding_windows_match_a_per_token_hand_computation():
    model, window = tiny_model(seed=4), 16
    ids = np.random.default_rng(1).integers(2, 300, size=60)
    result = evaluate_stream(model, ids, num_bytes=100, window=window, stride=1, show_progress=False)
    nats = 0.0
    for t in range(1, 60):  # token t with the window-1 tokens before it (fewer at the start)
        context = torch.as_tensor(ids[max(0, t - window + 1) : t])[None]
        logprobs = torch.log_softmax(model(context).logits[0, -1].double(), dim=-1)
        nats -= logprobs[ids[t]].item()
    assert result.num_tokens == 59
    assert result.loss == pytest.approx(nats / 59, rel=1e-5)


def test_bits_per_byte_agree_with_training_eval_on_the_validation_split(run, tmp_path):
    location = resolve_model(run)
    model, tokenizer = load_model(location), load_tokenizer(location)
    run_config = read_run_config(location.local_dir)
    corpus = prepare_corpus(data_settings_from(run_config), tokenizer)

    # Training's number: Trainer's eval loss over the packed blocks -> SplitStats.bits_per_byte.
    args = TrainingArguments(
        output_dir=str(tmp_path), per_device_eval_batch_size=16, report_to="none", use_cpu=True
    )
    trainer = Trainer(
        model=model, args=args, eval_dataset=corpus.validation, data_collator=default_data_collator
    )
    eval_loss = trainer.evaluate()["eval_loss"]
    training_bpb = corpus.validation_stats.bits_per_byte(eval_loss)

    result = evaluate_model(location, split="validation", show_progress=False)
    assert result.window == BLOCK_SIZE and result.num_bytes == corpus.validation_stats.bytes
    assert result.num_text_tokens == corpus.validation_stats.tokens
    # Only the last partial window (which training drops) differs: a few tokens of ~2,000.
    assert result.bits_per_byte == pytest.approx(training_bpb, rel=5e-3)

    # Same tokens as training's blocks, and the same loss over exactly those blocks.
    split = load_split(None, "validation", run_config, str(tmp_path / "scratch"))
    ids = token_stream(split, tokenizer)
    full = corpus.validation_stats.blocks * BLOCK_SIZE
    assert np.array_equal(ids[:full], np.asarray(corpus.validation["input_ids"]).reshape(-1))
    blocks_only = evaluate_stream(model, ids[:full], split.bytes, BLOCK_SIZE, show_progress=False)
    assert blocks_only.loss == pytest.approx(eval_loss, rel=1e-5)


def test_cli_json_from_another_folder_matches_the_library(run, tmp_path, subprocess_env):
    corpus, elsewhere = run.parent / "corpus.txt", tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run(
        [PYTHON, str(EVALUATE), str(run), "--data", str(corpus), "--json"],
        cwd=elsewhere,
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    expected = evaluate_model(resolve_model(run), data=corpus, show_progress=False)
    assert report["method"] == f"non-overlapping windows of {BLOCK_SIZE} tokens"
    assert report["num_bytes"] == len(corpus.read_bytes())
    for key, value in dataclasses.asdict(expected).items():
        assert report[key] == (pytest.approx(value, rel=1e-9) if isinstance(value, float) else value), key
    assert not list(elsewhere.iterdir())  # nothing left in the folder it ran from (no datasets cache)


def test_cli_errors_are_one_line(run, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", [str(EVALUATE), str(run), "--data", str(tmp_path / "missing.txt")])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(EVALUATE), run_name="__main__")
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert "missing.txt" in err
