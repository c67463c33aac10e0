"""Issue 20's smaller things: Literal values in type errors, counts in words, a failed start that
writes nothing, a push of a checkpoint that says what main now is."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from conftest import REPO_ROOT, build_tiny_tokenizer
from hub_fixtures import make_run

from minigpt.console import plural
from minigpt.errors import ConfigError, DataError
from minigpt.training.run_config import load_run_config

SMOKE = REPO_ROOT / "configs" / "smoke.yaml"


def test_a_literal_value_is_named_in_the_type_error():
    with pytest.raises(ConfigError) as info:
        load_run_config(SMOKE, ["hardware.bf16=maybe"])
    assert str(info.value) == "hardware.bf16 must be true/false or 'auto', got str 'maybe'"


def test_counts_are_said_in_words():
    assert [plural(n, "document") for n in (0, 1, 2, 1234)] == [
        "0 documents",
        "1 document",
        "2 documents",
        "1,234 documents",
    ]


def test_a_start_refused_for_its_data_leaves_no_run_file(tmp_path):
    from minigpt.pipeline import run_training

    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 64)
    run = load_run_config(
        SMOKE,
        [
            f"data.train_files={tmp_path / 'binary.txt'}",
            f"training.output_dir={tmp_path / 'run'}",
            f"tokenizer.path={tmp_path / 'tokenizer'}",
            f"data.cache_dir={tmp_path / 'cache'}",
        ],
    )
    with pytest.raises(DataError):
        run_training(run)
    assert not (tmp_path / "run").exists()


def test_pushing_a_checkpoint_says_that_main_now_points_to_it(tmp_path, monkeypatch, capsys):
    run = make_run(tmp_path, seed=0, tokenizer=build_tiny_tokenizer())
    script = REPO_ROOT / "scripts" / "push.py"
    monkeypatch.setattr("sys.argv", [str(script), str(run / "checkpoint-10"), "--repo-id", "me/x", "--hub-dir", str(tmp_path / "hub")])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(script), run_name="__main__")
    assert exit_info.value.code == 0
    err = capsys.readouterr().err
    assert f"note: main now points to checkpoint-10, a checkpoint, not the run's final model in {run / 'final'}" in err
    assert Path(tmp_path / "hub").is_dir()


def test_the_model_card_shows_each_resumed_segments_thread_count(tmp_path):
    from types import SimpleNamespace

    from minigpt.export.model_card import CardFacts, read_segments, render_model_card
    from minigpt.training.callbacks import MetricsFileCallback

    metrics = tmp_path / "metrics.jsonl"
    for step, threads in ((0, None), (635, 1)):  # started with a thread per core, resumed with 1
        callback = MetricsFileCallback(metrics, segment={"hardware": {"torch_num_threads": threads}, "threads": 2})
        callback.on_train_begin(None, SimpleNamespace(is_world_process_zero=True, global_step=step), None)
    segments = read_segments(tmp_path)
    assert segments == [(0, {"torch_num_threads": None}), (635, {"torch_num_threads": 1})]
    facts = CardFacts(
        repo_id="me/x",
        model_config={"model_type": "minigpt"},
        num_parameters=1000,
        license="apache-2.0",
        run_config={"hardware": {"torch_num_threads": 1, "bf16": False}},
        metrics_step=2000,
        segments=segments,
    )
    card = render_model_card(facts)
    assert "| torch_num_threads | `None (steps 0-635), 1 (steps 635-2000)` |" in card
    assert "| bf16 | `False` |" in card
