"""Complete-checkpoint markers, rotation, resume discovery, compatibility checks and the stop controller.

In-process runs of tests/resume_worker.py (a 2-layer MiniGPT, 12 steps, about a second each).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import resume_worker
import yaml

from minigpt.errors import ConfigError
from minigpt.training import interrupt
from minigpt.training.checkpoints import (
    COMPLETE_MARKER,
    RESOLVED_CONFIG_NAME,
    check_resume_compatible,
    checkpoint_problems,
    find_resume_checkpoint,
    list_checkpoints,
)
from minigpt.training.interrupt import StopController


def run_worker(output_dir: Path, *extra: str) -> int:
    return resume_worker.main(["--output-dir", str(output_dir), *extra])


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A 12-step run with checkpoints at steps 4, 8 and 12 (do not modify: copy it)."""
    output_dir = tmp_path_factory.mktemp("finished") / "run"
    assert run_worker(output_dir) == 0
    return output_dir


@pytest.fixture
def run_copy(finished_run, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def test_checkpoints_are_complete_and_carry_the_resolved_config(finished_run):
    assert [p.name for p in list_checkpoints(finished_run)] == [
        "checkpoint-12",
        "checkpoint-8",
        "checkpoint-4",
    ]
    assert sorted(p.name for p in finished_run.iterdir()) == ["checkpoint-12", "checkpoint-4", "checkpoint-8"]
    for checkpoint in list_checkpoints(finished_run):
        assert checkpoint_problems(checkpoint) == []
        step = int(checkpoint.name.split("-")[1])
        assert json.loads((checkpoint / "trainer_state.json").read_text())["global_step"] == step
        resolved = yaml.safe_load((checkpoint / RESOLVED_CONFIG_NAME).read_text())
        assert resolved["model"]["hidden_size"] == 32
        assert resolved["data"] == {"num_samples": 48}


def test_rotation_keeps_only_the_newest_with_limit_one(tmp_path):
    assert run_worker(tmp_path / "run", "--save-total-limit", "1") == 0
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoint-12"]


def test_rotation_keeps_the_best_checkpoint_and_records_its_final_path(tmp_path):
    # "Best" = highest eval loss, so the best is the first checkpoint, never the newest one.
    output_dir = tmp_path / "run"
    assert (
        run_worker(output_dir, "--save-total-limit", "1", "--max-steps", "8", "--best-is-highest-train-loss")
        == 0
    )
    # save_total_limit=1 keeps the newest complete checkpoint (where a resume starts) and the best.
    assert sorted(p.name for p in output_dir.iterdir()) == ["checkpoint-4", "checkpoint-8"]
    state = json.loads((output_dir / "checkpoint-8" / "trainer_state.json").read_text())
    assert state["best_model_checkpoint"] == str(output_dir / "checkpoint-4")


def test_requested_stop_saves_at_that_step_and_keeps_it_despite_rotation(tmp_path):
    output_dir = tmp_path / "run"
    code = run_worker(
        output_dir, "--stop-at-step", "6", "--save-total-limit", "1", "--best-is-highest-train-loss"
    )
    assert code == 1  # stopped by request_stop(), not by a signal
    # checkpoint-4 is the best, checkpoint-6 the one to resume from: end-of-training rotation and
    # load_best_model_at_end must not run after a stop.
    assert sorted(p.name for p in output_dir.iterdir()) == ["checkpoint-4", "checkpoint-6"]
    assert checkpoint_problems(output_dir / "checkpoint-6") == []
    assert find_resume_checkpoint(output_dir) == str(output_dir / "checkpoint-6")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda c: _truncate(c / "model.safetensors"), "model.safetensors is truncated or unreadable"),
        (lambda c: (c / "model.safetensors").unlink(), "model.safetensors is missing"),
        (lambda c: (c / "optimizer.pt").write_bytes(b""), "optimizer.pt is truncated or unreadable"),
        (lambda c: _truncate(c / "optimizer.pt"), "optimizer.pt is truncated or unreadable"),
        (lambda c: (c / "scheduler.pt").unlink(), "scheduler.pt is missing"),
        (lambda c: (c / "rng_state.pth").unlink(), "rng_state.pth is missing"),
        (lambda c: (c / "trainer_state.json").unlink(), "trainer_state.json is missing"),
        (lambda c: (c / "trainer_state.json").write_text('{"global_st'), "trainer_state.json is truncated or unreadable"),
        (lambda c: [p.unlink() for p in c.iterdir() if p.name != COMPLETE_MARKER], "trainer_state.json is missing"),
    ],
    ids=[
        "truncated-weights",
        "no-weights",
        "empty-optimizer",
        "truncated-optimizer",
        "no-scheduler",
        "no-rng",
        "no-state",
        "bad-state",
        "empty-folder",
    ],
)
def test_a_damaged_newest_checkpoint_is_set_aside_for_the_previous_one(run_copy, damage, reason, capsys):
    damage(run_copy / "checkpoint-12")
    assert reason in checkpoint_problems(run_copy / "checkpoint-12")

    assert find_resume_checkpoint(run_copy) == str(run_copy / "checkpoint-8")

    err = capsys.readouterr().err
    assert "checkpoint-12 is incomplete or corrupt" in err and reason in err
    assert "moved it to corrupt-checkpoint-12" in err
    assert (run_copy / "corrupt-checkpoint-12").is_dir() and not (run_copy / "checkpoint-12").exists()


def test_resume_walks_back_over_several_bad_checkpoints_and_removes_unfinished_saves(run_copy, capsys):
    _truncate(run_copy / "checkpoint-12" / "model.safetensors")
    (run_copy / "checkpoint-8" / "rng_state.pth").write_bytes(b"")
    shutil.copytree(run_copy / "checkpoint-4", run_copy / "checkpoint-16")  # a killed save: no marker
    (run_copy / "checkpoint-16" / COMPLETE_MARKER).unlink()
    assert f"no {COMPLETE_MARKER}: its save did not finish" in checkpoint_problems(run_copy / "checkpoint-16")

    assert find_resume_checkpoint(run_copy) == str(run_copy / "checkpoint-4")

    out = capsys.readouterr().out
    assert "removed checkpoint-16: a checkpoint save that was interrupted" in out
    assert f"resuming from {run_copy / 'checkpoint-4'}" in out
    assert sorted(p.name for p in run_copy.iterdir()) == [
        "checkpoint-4",
        "corrupt-checkpoint-12",
        "corrupt-checkpoint-8",
    ]


def test_no_complete_checkpoint_means_a_fresh_start_with_a_message(tmp_path, run_copy, capsys):
    assert find_resume_checkpoint(tmp_path / "does-not-exist") is None
    assert "no complete checkpoint" in capsys.readouterr().out

    for checkpoint in list_checkpoints(run_copy):
        (checkpoint / "optimizer.pt").unlink()
    assert find_resume_checkpoint(run_copy) is None
    assert "starting training from scratch" in capsys.readouterr().out
    assert list_checkpoints(run_copy) == []


def test_setting_aside_twice_keeps_both_copies(run_copy):
    (run_copy / "checkpoint-12" / "scheduler.pt").unlink()
    (run_copy / "corrupt-checkpoint-12").mkdir()
    assert find_resume_checkpoint(run_copy) == str(run_copy / "checkpoint-8")
    assert (run_copy / "corrupt-checkpoint-12-2" / "model.safetensors").exists()


def test_resume_compatibility_compares_model_tokenizer_and_data_only(finished_run):
    checkpoint = finished_run / "checkpoint-12"
    saved = yaml.safe_load((checkpoint / RESOLVED_CONFIG_NAME).read_text())

    check_resume_compatible({**saved, "training": {"max_steps": 999}}, checkpoint)  # may change
    check_resume_compatible({**saved, "data": {"num_samples": 48, "num_proc": 8}}, checkpoint)  # ignored key

    with pytest.raises(ConfigError, match=r"model\.hidden_size is 64 here but 32 in the checkpoint"):
        check_resume_compatible({**saved, "model": {**saved["model"], "hidden_size": 64}}, checkpoint)
    with pytest.raises(ConfigError, match=r"data\.num_samples is 50 here but 48"):
        check_resume_compatible({**saved, "data": {"num_samples": 50}}, checkpoint)
    with pytest.raises(ConfigError, match=r"tokenizer\.vocab_size is 99 here but '<unset>'"):
        check_resume_compatible({**saved, "tokenizer": {"vocab_size": 99}}, checkpoint)


def test_a_checkpoint_without_resolved_config_is_not_checked(run_copy):
    (run_copy / "checkpoint-12" / RESOLVED_CONFIG_NAME).unlink()
    check_resume_compatible({"model": {"hidden_size": 1}}, run_copy / "checkpoint-12")


def test_signal_handlers_raise_the_flag_once_and_are_restored():
    controller = StopController()
    before = signal.getsignal(signal.SIGTERM)
    with controller.install_signal_handlers():
        assert not controller.stop_requested
        os.kill(os.getpid(), signal.SIGTERM)  # Python runs the handler before the next bytecode
        assert controller.stop_requested
        assert controller.signum == signal.SIGTERM and controller.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is before

    controller = StopController()
    assert controller.exit_code == 0
    controller.request_stop("button")
    assert controller.reason == "button" and controller.exit_code == 1


def test_a_repeat_within_a_second_is_the_launchers_copy_and_a_later_one_aborts(monkeypatch):
    exits = []
    monkeypatch.setattr(interrupt.os, "_exit", exits.append)  # instead of ending pytest
    controller = StopController()
    with controller.install_signal_handlers():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # accelerate launch forwards the terminal's Ctrl-C
        assert controller.stop_requested and exits == []
        controller.first_signal_at -= interrupt.DUPLICATE_SIGNAL_WINDOW_S  # a second later
        os.kill(os.getpid(), signal.SIGINT)
        assert exits == [128 + signal.SIGINT]
