"""Killed, interrupted and resumed runs end bit-identical to an uninterrupted run.

Each interrupted run is a real process (tests/resume_worker.py, or scripts/train.py) killed with
SIGKILL, SIGTERM or SIGINT; the resume runs in-process. On the same machine, final weights must be
bitwise equal and every loss logged after the first full logging window after the resume must
equal the uninterrupted run's.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import resume_worker
import torch
from conftest import PYTHON, REPO_ROOT
from safetensors.torch import load_file

from minigpt.training.checkpoints import checkpoint_problems, find_resume_checkpoint, list_checkpoints

LOGGING_STEPS = 2  # resume_worker's default


def run_in_process(output_dir: Path, result: Path, *extra: str) -> dict:
    assert resume_worker.main(["--output-dir", str(output_dir), "--result", str(result), *extra]) == 0
    return {
        "weights": load_file(f"{result}.safetensors"),
        "losses": {step: loss for step, loss in json.loads(Path(f"{result}.json").read_text())["losses"]},
    }


def start_worker(output_dir: Path, env: dict, *extra: str) -> subprocess.Popen:
    command = [PYTHON, str(Path(resume_worker.__file__)), "--output-dir", str(output_dir), *extra]
    return subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def wait_for_line(process: subprocess.Popen, wanted: str) -> list[str]:
    """Read the worker's output up to the line `wanted` (fails if the process ends first)."""
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.strip() == wanted:
            return seen
    pytest.fail(f"worker ended before printing {wanted!r}:\n{''.join(seen)}")


def assert_same_run(reference: dict, resumed: dict, resumed_from_step: int) -> None:
    for name, tensor in reference["weights"].items():
        assert torch.equal(tensor, resumed["weights"][name]), f"{name} differs after resume"
    # The first window that starts after the resume step (a window cut by the resume differs).
    first_full_window = -(-(resumed_from_step + LOGGING_STEPS) // LOGGING_STEPS) * LOGGING_STEPS
    compared = [step for step in reference["losses"] if step >= first_full_window]
    assert compared, "nothing logged after the resume"
    for step in compared:
        assert resumed["losses"][step] == reference["losses"][step], f"loss at step {step} differs"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The uninterrupted 12-step run (dropout 0.1, two epochs, checkpoints every 4 steps)."""
    folder = tmp_path_factory.mktemp("reference")
    return run_in_process(folder / "run", folder / "result")


def test_sigkill_at_a_random_step_then_resume_is_bitwise_identical(reference, tmp_path, subprocess_env):
    expected = reference
    kill_step = random.Random().randrange(5, 12)  # after the first checkpoint; 12 is the last step
    output_dir = tmp_path / "run"
    process = start_worker(output_dir, subprocess_env, "--kill-at-step", str(kill_step))
    output = process.communicate(timeout=300)[0]
    assert process.returncode == -signal.SIGKILL, output

    last_saved = (kill_step - 1) // 4 * 4  # killed at the end of kill_step, before its own save
    assert find_resume_checkpoint(output_dir) == str(output_dir / f"checkpoint-{last_saved}")
    resumed = run_in_process(output_dir, tmp_path / "result", "--resume")
    assert_same_run(expected, resumed, last_saved)


def test_kill_during_a_checkpoint_write_keeps_the_previous_one_and_resumes_exactly(
    reference, tmp_path, subprocess_env
):
    # save_total_limit=1: the only complete checkpoint must survive a kill while the next is written.
    output_dir = tmp_path / "run"
    process = start_worker(output_dir, subprocess_env, "--kill-in-save-at", "8", "--save-total-limit", "1")
    output = process.communicate(timeout=300)[0]
    assert process.returncode == -signal.SIGKILL, output
    # Trainer writes checkpoint-8 in place; without its marker, resume never loads it.
    assert sorted(p.name for p in output_dir.iterdir()) == ["checkpoint-4", "checkpoint-8"]
    assert checkpoint_problems(output_dir / "checkpoint-4") == []
    assert "no checkpoint_complete.json: its save did not finish" in checkpoint_problems(output_dir / "checkpoint-8")

    resumed = run_in_process(output_dir, tmp_path / "result", "--resume", "--save-total-limit", "1")
    assert_same_run(reference, resumed, 4)
    assert sorted(p.name for p in output_dir.iterdir()) == ["checkpoint-12"]


def test_sigterm_saves_at_the_step_boundary_exits_143_and_resumes_exactly(
    reference, tmp_path, subprocess_env
):
    output_dir = tmp_path / "run"
    process = start_worker(output_dir, subprocess_env, "--pause-after-step", "5")
    wait_for_line(process, "step 5")
    process.send_signal(signal.SIGTERM)  # arrives during the pause after step 5: the stop lands on step 5
    output = process.communicate(timeout=300)[0]

    assert process.returncode == 128 + signal.SIGTERM, output
    assert "SIGTERM received: saving a checkpoint" in output
    assert "training stopped at step 5 (received SIGTERM); resume with:" in output and "--resume" in output
    assert [p.name for p in list_checkpoints(output_dir)] == ["checkpoint-5", "checkpoint-4"]
    assert checkpoint_problems(output_dir / "checkpoint-5") == []

    resumed = run_in_process(output_dir, tmp_path / "result", "--resume")
    assert_same_run(reference, resumed, 5)


def test_second_sigint_aborts_at_once_and_leaves_checkpoints_intact(tmp_path, subprocess_env):
    output_dir = tmp_path / "run"
    process = start_worker(
        output_dir, subprocess_env, "--pause-after-step", "5", "--pause", "30", "--pause-ignores-stop"
    )
    wait_for_line(process, "step 5")
    process.send_signal(signal.SIGINT)
    # Two signals before Python runs its handler count as one: wait for the first to be handled.
    wait_for_line(
        process,
        "SIGINT received: saving a checkpoint at the end of this step, then stopping "
        "(send it again to abort at once).",
    )
    time.sleep(1.5)  # a repeat within a second is taken for the launcher's copy of the first
    process.send_signal(signal.SIGINT)  # still in the pause after step 5: no checkpoint-5 is written
    output = process.communicate(timeout=60)[0]

    assert process.returncode == 128 + signal.SIGINT, output
    assert "SIGINT again: aborting now" in output
    assert sorted(p.name for p in output_dir.iterdir()) == ["checkpoint-4"]
    assert checkpoint_problems(output_dir / "checkpoint-4") == []


def test_cli_sigterm_then_resume_ends_like_an_uninterrupted_run(tmp_path, subprocess_env, monkeypatch):
    """scripts/train.py configs/smoke.yaml, interrupted with SIGTERM, then `--resume`: same weights
    and losses as the same config run in one go (the real data, callbacks, eval and sampling)."""
    output_dir = tmp_path / "smoke"
    overrides = [
        f"tokenizer.path={tmp_path / 'tokenizer'}",
        *("training.max_steps=8", "training.save_steps=4", "training.logging_steps=1"),
        *("training.eval_steps=4", "training.sample_steps=4"),  # eval and sampling must not disturb resume
    ]
    command = [
        PYTHON,
        "scripts/train.py",
        "configs/smoke.yaml",
        f"training.output_dir={output_dir}",
        *overrides,
    ]
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    for line in process.stdout:  # the first log line, "step 1/8 | loss ...", comes after step 1
        if line.startswith("step 1/"):
            break
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 128 + signal.SIGTERM, stderr

    said = [line for line in stderr.splitlines() if line.strip() and not line.rstrip().endswith(("it/s]", "s/it]"))]
    signal_line, saved_line = said[-2:]  # the signal's line at once, the checkpoint's at the end
    assert signal_line.startswith("SIGTERM received: saving a checkpoint at the end of this step")
    assert "; resume with: python scripts/train.py" in signal_line
    assert signal_line.endswith("--resume")
    checkpoint = list_checkpoints(output_dir)[0]  # the one written on the stop
    stop_step = int(checkpoint.name.split("-")[1])
    assert 1 <= stop_step < 8 and checkpoint_problems(checkpoint) == []
    assert saved_line.startswith(f"stopped (received SIGTERM): saved {checkpoint}; resume with: python scripts/train.py")
    assert saved_line.endswith("--resume")
    assert not (output_dir / "final").exists()  # a stopped run publishes no final model

    resumed = subprocess.run(
        [*command, "--resume"], cwd=REPO_ROOT, env=subprocess_env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming from {checkpoint}" in resumed.stdout

    # The uninterrupted reference, in-process (imports are already paid for), same tokenizer.
    from minigpt.pipeline import run_training
    from minigpt.training.run_config import load_run_config

    monkeypatch.chdir(REPO_ROOT)
    reference_dir = tmp_path / "reference"
    run_training(load_run_config("configs/smoke.yaml", [*overrides, f"training.output_dir={reference_dir}"]))

    final = load_file(output_dir / "final" / "model.safetensors")
    expected = load_file(reference_dir / "final" / "model.safetensors")
    assert final.keys() == expected.keys()
    for name in expected:
        assert torch.equal(final[name], expected[name]), f"{name} differs after SIGTERM and resume"

    def losses(folder: Path) -> dict[int, float]:
        history = json.loads((folder / "checkpoint-8" / "trainer_state.json").read_text())["log_history"]
        return {record["step"]: record["loss"] for record in history if "loss" in record}

    after_resume = {step: loss for step, loss in losses(reference_dir).items() if step > stop_step}
    assert after_resume and {step: losses(output_dir)[step] for step in after_resume} == after_resume


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def read_records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


TEE = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n"


def test_ctrl_c_through_a_pipe_that_exits_still_saves_the_stop_step_and_resumes_exactly(
    tmp_path, subprocess_env, monkeypatch
):
    """`scripts/train.py ... 2>&1 | tee log` and Ctrl-C: the terminal's SIGINT reaches the reader
    too, which exits; every later write of the run meets a closed pipe. The run still saves a
    checkpoint at the stop step, writes summary.json and exits 130; resumed, it ends with the weights
    of the same run never interrupted."""
    output_dir = tmp_path / "run"
    overrides = [
        f"tokenizer.path={tmp_path / 'tokenizer'}",
        *("training.max_steps=400", "training.warmup_steps=5", "training.logging_steps=5"),
        *("training.save_steps=1000", "training.eval_steps=1000", "training.sample_steps=0"),
    ]
    command = [PYTHON, "scripts/train.py", "configs/smoke.yaml", f"training.output_dir={output_dir}", *overrides]
    train = subprocess.Popen(command, cwd=REPO_ROOT, env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    tee = subprocess.Popen(
        [PYTHON, "-c", TEE], stdin=train.stdout, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    train.stdout.close()  # the reader holds the pipe's read end alone, as `tee` does
    for line in tee.stdout:
        if "step 20/400" in line:
            break
    for process in (tee, train):  # the terminal's Ctrl-C reaches the whole pipeline
        process.send_signal(signal.SIGINT)
    tee.wait(timeout=60)
    assert train.wait(timeout=300) == 128 + signal.SIGINT

    (checkpoint,) = list_checkpoints(output_dir)  # the one written on the stop
    stop_step = int(checkpoint.name.split("-")[1])
    assert 20 <= stop_step < 400 and checkpoint_problems(checkpoint) == []
    summary = json.loads((output_dir / "summary.json").read_text())
    assert summary["stopped"] is True and summary["global_step"] == stop_step

    resumed = subprocess.run(
        [*command, "--resume"], cwd=REPO_ROOT, env=subprocess_env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr
    from minigpt.pipeline import run_training
    from minigpt.training.run_config import load_run_config

    monkeypatch.chdir(REPO_ROOT)
    reference_dir = tmp_path / "reference"
    run_training(load_run_config("configs/smoke.yaml", [*overrides, f"training.output_dir={reference_dir}"]))
    final = load_file(output_dir / "final" / "model.safetensors")
    expected = load_file(reference_dir / "final" / "model.safetensors")
    assert final.keys() == expected.keys()
    assert all(torch.equal(final[name], expected[name]) for name in expected)
    # the resumed session's throughput counts the steps it trained, not max_steps (Trainer's own figure)
    (session,) = [r for r in read_records(output_dir) if "train_runtime" in r][-1:]
    assert session["train_steps_per_second"] * session["train_runtime"] == pytest.approx(400 - stop_step, rel=1e-3)
    assert session["train_samples_per_second"] == pytest.approx(8 * session["train_steps_per_second"], rel=1e-6)
