"""A run owns its output folder; the CLI takes options in any order; configs fail early and clearly."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import child_env, load_script

from minigpt.errors import ConfigError
from minigpt.training.run_config import load_run_config
from minigpt.training.start import check_resume_target, claim_output_dir, run_outputs

REPO = Path(__file__).resolve().parents[1]
TRAIN_SCRIPT = REPO / "scripts" / "train.py"
SMOKE = REPO / "configs" / "smoke.yaml"
QUIET = ["tokenizer.show_progress=false", "data.show_progress=false"]


def tree_digest(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file below `folder` (what "nothing changed" compares)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def train_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = child_env(tmp_path)  # this checkout's code, not the editable install's
    return subprocess.run(
        [sys.executable, str(TRAIN_SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


# ---- the output folder ----------------------------------------------------------------------


def fake_run(folder: Path) -> Path:
    """A folder as a finished run leaves it, plus a user's own file that must never be touched."""
    (folder / "checkpoint-1500").mkdir(parents=True)
    (folder / "checkpoint-1500" / "model.safetensors").write_bytes(b"old weights")
    (folder / "final").mkdir()
    (folder / "final" / "config.json").write_text("{}")
    (folder / "metrics.jsonl").write_text('{"step": 1500}\n')
    (folder / "notes.txt").write_text("mine")
    return folder


def test_a_new_run_refuses_a_folder_holding_another_run_and_changes_nothing(tmp_path):
    folder = fake_run(tmp_path / "run")
    before = tree_digest(folder)
    with pytest.raises(ConfigError) as caught:
        claim_output_dir(folder, overwrite=False)
    message = str(caught.value)
    assert "already holds a run" in message and "checkpoint-1500/" in message and "final/" in message
    assert "--resume" in message and "training.overwrite_output_dir=true" in message
    assert tree_digest(folder) == before


def test_overwrite_removes_only_what_a_run_wrote(tmp_path):
    folder = fake_run(tmp_path / "run")
    (folder / "corrupt-checkpoint-3").mkdir()
    (folder / ".staging-checkpoint-9").mkdir()
    removed = claim_output_dir(folder, overwrite=True)
    assert sorted(removed) == sorted(
        [".staging-checkpoint-9", "checkpoint-1500", "corrupt-checkpoint-3", "final", "metrics.jsonl"]
    )
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
    assert run_outputs(folder) == []


def test_an_empty_or_new_folder_is_claimed_without_a_word(tmp_path):
    assert claim_output_dir(tmp_path / "new", overwrite=False) == []
    (tmp_path / "logs-only").mkdir()
    (tmp_path / "logs-only" / "metrics.jsonl").write_text("{}\n")  # no checkpoint, no final/: nothing to mix
    assert claim_output_dir(tmp_path / "logs-only", overwrite=False) == []


def finished_folder(tmp_path: Path, step: int) -> Path:
    """A run folder whose final model was saved at `step`: final/ and the summary written after it."""
    (tmp_path / "final").mkdir()
    (tmp_path / "summary.json").write_text(json.dumps({"global_step": step, "stopped": False}))
    return tmp_path / f"checkpoint-{step}"


def test_resume_at_or_past_max_steps_is_refused_once_the_final_model_is_saved(tmp_path):
    checkpoint = finished_folder(tmp_path, 50)
    with pytest.raises(
        ConfigError, match=r"checkpoint-50 is already at step 50 and training.max_steps is 50"
    ):
        check_resume_target(checkpoint, max_steps=50)
    with pytest.raises(ConfigError, match="nothing to resume"):
        check_resume_target(checkpoint, max_steps=40)
    assert check_resume_target(checkpoint, max_steps=51) is False  # one more step to go: train it


def test_a_run_stopped_while_saving_its_final_model_is_finished_not_refused(tmp_path):
    checkpoint = tmp_path / "checkpoint-50"
    assert check_resume_target(checkpoint, max_steps=50) is True  # no final/: finish, train nothing
    (tmp_path / "final").mkdir()  # a final/ of an earlier end (the summary says step 30)
    (tmp_path / "summary.json").write_text(json.dumps({"global_step": 30, "stopped": False}))
    assert check_resume_target(checkpoint, max_steps=50) is True
    assert check_resume_target(checkpoint, max_steps=60) is False


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> tuple[Path, list[str]]:
    """A real 10-step smoke run through the CLI, and the overrides that made it."""
    tmp_path = tmp_path_factory.mktemp("finished")
    overrides = [
        f"training.output_dir={tmp_path / 'run'}",
        f"tokenizer.path={tmp_path / 'tokenizer'}",
        "training.max_steps=10",
        "training.warmup_steps=2",
        "training.save_steps=5",
        "training.eval_steps=5",
        "training.sample_steps=0",
        *QUIET,
    ]
    proc = train_cli(tmp_path, str(SMOKE), *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp_path / "run", overrides


def test_cli_second_run_into_the_same_folder_is_refused(finished_run, tmp_path):
    run_dir, overrides = finished_run
    before = tree_digest(run_dir)
    proc = train_cli(tmp_path, str(SMOKE), *overrides)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "already holds a run" in lines[0]
    assert "--resume" in lines[0] and "training.overwrite_output_dir" in lines[0]
    assert tree_digest(run_dir) == before


def test_cli_resume_past_the_end_changes_nothing_with_options_in_any_order(finished_run, tmp_path):
    run_dir, overrides = finished_run
    before = tree_digest(run_dir)
    # --resume between the config and the overrides (argparse alone rejected this order)
    proc = train_cli(tmp_path, str(SMOKE), "--resume", *overrides)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert (
        "checkpoint-10 is already at step 10 and training.max_steps is 10: nothing to resume" in proc.stderr
    )
    assert tree_digest(run_dir) == before


def test_cli_overwrite_starts_over_and_leaves_no_old_checkpoint(finished_run, tmp_path):
    run_dir, overrides = finished_run
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(run_dir), str(copy)], check=True)
    (copy / "checkpoint-999").mkdir()  # an old run's later checkpoint: resume must never find it
    (copy / "checkpoint-999" / "model.safetensors").write_bytes(b"x")
    changed = [o for o in overrides if not o.startswith("training.output_dir=")]
    proc = train_cli(
        tmp_path,
        str(SMOKE),
        f"training.output_dir={copy}",
        *changed,
        "training.max_steps=6",
        "training.overwrite_output_dir=true",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "removed the previous run's" in proc.stdout
    assert sorted(p.name for p in copy.glob("checkpoint-*")) == ["checkpoint-5", "checkpoint-6"]
    steps = [json.loads(line)["step"] for line in (copy / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and max(steps) == 6  # one run, in order: nothing of the old one


# ---- config files and overrides ---------------------------------------------------------------


def test_one_value_where_a_list_is_expected_is_a_list_of_one(tmp_path):
    run = load_run_config(SMOKE, ["data.train_files=my.jsonl", "training.sample_prompts=def"])
    assert run.data.train_files == ["my.jsonl"]
    assert run.training.sample_prompts == ["def"]
    run = load_run_config(SMOKE, ["training.sample_prompts=007"])  # taken literally, not the number 7
    assert run.training.sample_prompts == ["007"]
    assert load_run_config(SMOKE, ["training.sample_prompts=null"]).training.sample_prompts is None  # from the corpus
    config = tmp_path / "one.yaml"
    config.write_text("data:\n  train_files: corpus.txt\ntraining:\n  output_dir: runs/one\n")
    assert load_run_config(config).data.train_files == ["corpus.txt"]


def test_cli_empty_config_is_an_error(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    default_output = REPO / "runs" / "minigpt"
    existed = default_output.exists()
    proc = train_cli(tmp_path, str(empty))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"error: {empty} is empty: a run config names at least its training.output_dir "
        "(see configs/shakespeare.yaml)"
    )
    assert default_output.exists() == existed  # no run started


def test_cli_invalid_yaml_names_file_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("training:\n  max_steps: 3\n  output_dir: [runs/x\n")
    proc = train_cli(tmp_path, str(bad))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {bad}:4:1: invalid YAML: expected ',' or ']'")
    assert "<unicode string>" not in proc.stderr


def test_cli_options_and_overrides_in_any_order():
    script = load_script("train")
    for argv in (
        ["configs/smoke.yaml", "--resume", "training.max_steps=40"],
        ["--resume", "configs/smoke.yaml", "training.max_steps=40"],
        ["configs/smoke.yaml", "training.max_steps=40", "--resume"],
    ):
        args = script.parse_args(argv)
        assert (args.resume, str(args.config), args.overrides) == (
            True,
            "configs/smoke.yaml",
            ["training.max_steps=40"],
        )


def test_resume_hint_shows_the_config_as_readme_does(monkeypatch, tmp_path):
    script = load_script("train")
    monkeypatch.chdir(REPO)
    assert script.parse_args([]).shown_config == "configs/shakespeare.yaml"
    monkeypatch.chdir(tmp_path)  # outside the repository the path stays absolute, and still works
    assert script.parse_args([]).shown_config == str(script.DEFAULT_CONFIG)


