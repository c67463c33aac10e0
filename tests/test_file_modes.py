"""What a run and a push write gets the modes the user's umask gives, as `cp` and `mkdir` would,
temporary files renamed into place included: 0644/0755 under umask 022 (a colleague can read a
shared model), 0600/0700 under umask 077."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from conftest import SHAKESPEARE

from minigpt.atomic import atomic_output_dir, atomic_write_file
from minigpt.hub.publishing import publish
from minigpt.pipeline import run_training
from minigpt.training.run_config import load_run_config

REPO = Path(__file__).resolve().parent.parent


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request):
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def test_atomic_writes_take_the_umask_modes(tmp_path, umask):
    with atomic_write_file(tmp_path / "a.txt") as handle:
        handle.write("x")
    with atomic_output_dir(tmp_path / "folder") as staging:
        (staging / "inside.txt").write_text("y")
    assert mode(tmp_path / "a.txt") == 0o666 & ~umask
    assert mode(tmp_path / "folder") == 0o777 & ~umask
    assert mode(tmp_path / "folder" / "inside.txt") == 0o666 & ~umask


def test_a_run_and_a_push_write_what_the_umask_allows(tmp_path, umask, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = load_run_config(
        REPO / "configs" / "smoke.yaml",
        [
            f"data.train_files={SHAKESPEARE}",
            f"data.cache_dir={tmp_path / 'cache'}",
            f"training.output_dir={tmp_path / 'run'}",
            f"tokenizer.path={tmp_path / 'run' / 'tokenizer'}",
            *("training.max_steps=6", "training.warmup_steps=2", "training.save_steps=3"),
            *("training.eval_steps=6", "training.sample_steps=0"),
            *("tokenizer.show_progress=false", "data.show_progress=false"),
        ],
    )
    run_training(run)
    publish(tmp_path / "run", "me/tiny", tmp_path / "hub", tag="v1")

    folder, file = 0o777 & ~umask, 0o666 & ~umask
    output = tmp_path / "run"
    for name in ("final", "tokenizer", "checkpoint-6"):
        assert mode(output / name) == folder, name
    for name in ("final/model.safetensors", "loss.png", "summary.json", "resolved_config.yaml", "metrics.jsonl"):
        assert mode(output / name) == file, name
    (blocks,) = (tmp_path / "cache" / "blocks").iterdir()
    assert mode(blocks) == folder
    assert {mode(p) for p in blocks.iterdir()} == {file}
    repo = tmp_path / "hub" / "models--me--tiny"
    (snapshot,) = (repo / "snapshots").iterdir()
    assert mode(snapshot) == folder
    assert {mode(p) for p in (repo / "blobs").iterdir()} == {0o444 & ~umask}  # read-only, as the hub's
    assert {mode(p) for p in (repo / "refs").iterdir()} == {file}
    assert {mode(p) for p in (repo / "commits").iterdir()} == {file}
