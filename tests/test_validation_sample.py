"""training.eval_tokens: an evaluation reads a fixed, seeded sample of the validation blocks when the
split is larger, the same blocks at every evaluation, and the whole split when it is smaller.
(On two processes: tests/test_multiprocess.py; the sample's figures: tests/test_evaluate.py.)"""

from __future__ import annotations

import json

import datasets
import numpy as np
import pytest
from conftest import REPO_ROOT, small_run, write_small_corpus

from minigpt.data.corpus import prepare_corpus
from minigpt.data.run_data import sample_indices, validation_sample
from minigpt.data.sources import find_sources
from minigpt.data.tokenizer import load_tokenizer
from minigpt.pipeline import run_training
from minigpt.training.run_config import load_run_config
from minigpt.training.trainer import MiniGPTTrainer


def test_sample_indices_are_distinct_ascending_and_fixed_by_the_seed():
    drawn = sample_indices(1000, 50, seed=3)
    assert (
        len(set(drawn.tolist())) == 50 and np.all(np.diff(drawn) > 0) and 0 <= drawn[0] and drawn[-1] < 1000
    )
    assert np.array_equal(drawn, sample_indices(1000, 50, seed=3))
    assert not np.array_equal(drawn, sample_indices(1000, 50, seed=4))
    assert np.array_equal(sample_indices(7, 7, seed=3), np.arange(7))
    assert np.array_equal(sample_indices(7, 9, seed=3), np.arange(7))


def test_validation_sample_takes_eval_tokens_worth_of_blocks_or_the_whole_split():
    blocks = datasets.Dataset.from_dict({"input_ids": [[i] * 4 for i in range(10)]})
    sample = validation_sample(blocks, eval_tokens=13, block_size=4, seed=0)  # 13 // 4 = 3 blocks
    assert sample.sampled and sample.total == 10
    assert [row[0] for row in sample.blocks["input_ids"]] == sample_indices(10, 3, seed=0).tolist()
    assert "a fixed sample of 3 of 10 validation blocks (training.eval_tokens=13)" in sample.describe()
    assert validation_sample(blocks, eval_tokens=2, block_size=4, seed=0).blocks.num_rows == 1  # at least one
    for eval_tokens in (40, 10_000, None):  # the whole split (no select view)
        whole = validation_sample(blocks, eval_tokens=eval_tokens, block_size=4, seed=0)
        assert whole.blocks is blocks and not whole.sampled
        assert whole.describe() == "evaluation reads all 10 validation blocks"


def evaluated_rows(tmp_path, monkeypatch, name: str, *overrides: str):
    """Train a small run (evaluations at steps 2 and 4): the blocks each evaluation read, the run
    config and the evaluation records."""
    seen: list[tuple] = []
    real_step = MiniGPTTrainer.prediction_step

    def recording_step(self, model, inputs, *args, **kwargs):
        seen.extend(tuple(row) for row in inputs["input_ids"].tolist())
        return real_step(self, model, inputs, *args, **kwargs)

    monkeypatch.setattr(MiniGPTTrainer, "prediction_step", recording_step)
    corpus = write_small_corpus(tmp_path)
    steps = (
        "training.max_steps=4",
        "training.warmup_steps=1",
        "training.eval_steps=2",
        "training.sample_steps=4",
    )
    run = small_run(tmp_path / name, corpus, "data.validation_fraction=0.5", *steps, *overrides)
    result = run_training(run)
    evaluations = [r for r in result.log_history if "eval_loss" in r]
    assert [r["step"] for r in evaluations] == [2, 4]
    per_evaluation = len(seen) // 2
    assert len(seen) == 2 * per_evaluation
    return [seen[:per_evaluation], seen[per_evaluation:]], run, evaluations


def validation_rows(run) -> list[tuple]:
    corpus = prepare_corpus(find_sources(run.data), load_tokenizer(run.tokenizer.path))  # the run's cached blocks
    return [tuple(row) for row in corpus.validation["input_ids"]]


def test_a_split_larger_than_the_budget_is_evaluated_on_the_same_sample_each_time(
    tmp_path, monkeypatch, capsys
):
    (first, second), run, evaluations = evaluated_rows(
        tmp_path, monkeypatch, "sampled", "training.eval_tokens=48", "training.seed=7"
    )
    everything = validation_rows(run)
    # drawn with data.seed, not training.seed: runs that differ only in training.seed read the same blocks
    expected = [everything[i] for i in sample_indices(len(everything), 48 // 16, seed=run.data.seed)]
    assert run.training.seed != run.data.seed
    assert not np.array_equal(sample_indices(len(everything), 3, seed=7), sample_indices(len(everything), 3, seed=run.data.seed))
    assert len(everything) > 3 and first == second == expected  # exactly the sample, in file order, twice
    out = capsys.readouterr().out
    said = f"evaluation reads a fixed sample of 3 of {len(everything)} validation blocks (training.eval_tokens=48)"
    assert out.count(said) == 1
    assert out.count(f"sample of 3/{len(everything)} blocks") == 2  # in each evaluation's line
    records = [json.loads(line) for line in (tmp_path / "sampled" / "metrics.jsonl").read_text().splitlines()]
    for record in (r for r in records if "eval_loss" in r):
        assert (record["eval_blocks"], record["validation_blocks"]) == (3, len(everything))


def test_a_split_smaller_than_the_budget_is_evaluated_whole(tmp_path, monkeypatch, capsys):
    (first, second), run, evaluations = evaluated_rows(tmp_path, monkeypatch, "whole")
    everything = validation_rows(run)
    assert sorted(first) == sorted(second) == sorted(everything)
    assert len(first) == len(everything) and run.training.eval_tokens > len(everything) * 16
    assert f"evaluation reads all {len(everything)} validation blocks" in capsys.readouterr().out
    assert all(r["eval_blocks"] == r["validation_blocks"] == len(everything) for r in evaluations)


@pytest.mark.parametrize("eval_tokens", [None, 16])
def test_eval_tokens_takes_a_count_or_null(eval_tokens):
    override = "training.eval_tokens=null" if eval_tokens is None else f"training.eval_tokens={eval_tokens}"
    run = load_run_config(str(REPO_ROOT / "configs" / "smoke.yaml"), [override])
    assert run.training.eval_tokens == eval_tokens and run.to_dict()["training"]["eval_tokens"] == eval_tokens
