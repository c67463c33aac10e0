"""Ctrl-C in a real terminal at every stage of `scripts/train.py`: one line, exit 130, promptly.

Each test runs the CLI in a pseudo-terminal whose foreground process group is the run (as a shell
would start it), waits until the run is inside the stage, and types Ctrl-C (`\\x03`): the
terminal sends SIGINT to the whole group, the tokenizing workers included. The stages that are
too quick to hit are slowed by `interrupt_worker.py`; the code that handles the signal is the
real one. Time bound: the process ends within `EXIT_WITHIN_S` seconds of the press (measured
here: 0.05-1 s where Python gets the signal at once; the guard's grace period, 5 s, where it
cannot).
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import re
import select
import subprocess
import termios
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import PYTHON, REPO_ROOT, SHAKESPEARE
from safetensors.torch import load_file

from minigpt.errors import INTERRUPT_GRACE_S, INTERRUPTED_LINE
from minigpt.training.checkpoints import checkpoint_problems, list_checkpoints

WORKER = REPO_ROOT / "tests" / "interrupt_worker.py"
EXIT_WITHIN_S = 10.0  # from the press to the exit, startup of a loaded 2-core machine aside
PROGRESS_BAR = re.compile(r"[█░▏▎▍▌▋▊▉]|\d+%\||\d+/\d+ \[|\[\d\d:\d\d:\d\d\]")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class TerminalRun:
    returncode: int
    after_press: str  # what the terminal showed after the (first) Ctrl-C
    exit_after_s: float  # from the (last) press to the end of the process

    def lines(self) -> list[str]:
        """Lines after the press as a user reads them: progress-bar redraws, the ^C echo and the
        worker's stage markers left out."""
        shown = []
        for raw in self.after_press.replace("^C", "").split("\n"):
            line = ANSI.sub("", raw.rstrip("\r").split("\r")[-1]).strip()  # what the last redraw left
            if line and not PROGRESS_BAR.search(line) and not line.startswith("STAGE "):
                shown.append(line)
        return shown


def run_in_terminal(
    argv: list[str], wait_for: str, *, delay: float = 0.3, presses: int = 1, env: dict, cwd: Path
) -> TerminalRun:
    """Run `argv` on a new pseudo-terminal; after `wait_for` shows up, type Ctrl-C `presses` times
    (1.5 s apart: a repeat within a second is taken for a launcher's copy of the first)."""
    master, slave = os.openpty()

    def become_terminal_session() -> None:  # what a shell does for a foreground job
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, preexec_fn=become_terminal_session, env=env, cwd=cwd
    )
    os.close(slave)
    output, pressed_at, marker, deadline = b"", None, 0, time.monotonic() + 240
    pending = presses
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    chunk = b""
                output += chunk
                if not chunk:
                    break
            elif process.poll() is not None:
                break
            if pending and (pressed_at is None and wait_for.encode() in output):
                time.sleep(delay)
                marker = len(output)
            if pending and marker and (pressed_at is None or time.monotonic() - pressed_at >= 1.5):
                os.write(master, b"\x03")
                pressed_at, pending = time.monotonic(), pending - 1
        process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
        os.close(master)
    assert pressed_at is not None, f"never saw {wait_for!r}:\n{output.decode(errors='replace')[-3000:]}"
    shown = output[marker:].decode(errors="replace")
    shown = shown[shown.find("^C") :] if "^C" in shown else shown  # from the terminal's echo of the press
    return TerminalRun(process.returncode, shown, time.monotonic() - pressed_at)


@pytest.fixture
def terminal_env(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", TERM="xterm")
    env["HF_HOME"] = str(tmp_path / "hf_home")
    env["PYTHONPATH"] = str(REPO_ROOT)
    return env


def train_args(tmp_path: Path, *overrides: str) -> list[str]:
    return [
        str(REPO_ROOT / "configs" / "smoke.yaml"),
        f"training.output_dir={tmp_path / 'run'}",
        f"tokenizer.path={tmp_path / 'tokenizer'}",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"data.train_files={SHAKESPEARE}",
        *overrides,
    ]


def leftovers(folder: Path) -> list[str]:
    """Staging and temporary files anywhere under `folder`: what a half-done write leaves."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if ".staging" in p.name or p.suffix == ".tmp")


def assert_one_interrupted_line(run: TerminalRun) -> None:
    assert run.returncode == 130, run.after_press
    assert run.lines() == [INTERRUPTED_LINE], run.after_press
    assert run.exit_after_s < EXIT_WITHIN_S, run.exit_after_s


def assert_no_blocks(tmp_path: Path) -> None:
    blocks = tmp_path / "cache" / "blocks"
    assert not blocks.exists() or list(blocks.iterdir()) == []
    assert leftovers(tmp_path) == []


def test_ctrl_c_in_tokenizer_training(tmp_path, terminal_env):
    """Training runs in Rust for seconds: the press still ends the run at once."""
    rng = random.Random(0)
    words = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=rng.randint(2, 8))) for _ in range(300_000)]
    corpus = tmp_path / "random.txt"
    corpus.write_text("\n".join(" ".join(words[i : i + 12]) for i in range(0, len(words), 12)))
    argv = [PYTHON, str(WORKER), "none", *train_args(tmp_path, f"data.train_files={corpus}", "tokenizer.vocab_size=20000")]
    run = run_in_terminal(argv, "training a byte-level BPE tokenizer", delay=1.0, env=terminal_env, cwd=tmp_path)
    assert_one_interrupted_line(run)
    assert run.exit_after_s < INTERRUPT_GRACE_S  # not the guard's last resort: the press itself
    assert not (tmp_path / "tokenizer").exists()
    assert leftovers(tmp_path) == []


def test_ctrl_c_while_worker_processes_tokenize(tmp_path, terminal_env):
    argv = [PYTHON, str(WORKER), "map", *train_args(tmp_path, "data.num_proc=2", "data.batch_size=500")]
    run = run_in_terminal(argv, "STAGE map", env=terminal_env, cwd=tmp_path)
    assert_one_interrupted_line(run)
    assert "Traceback" not in run.after_press and "ForkPoolWorker" not in run.after_press
    assert_no_blocks(tmp_path)
    assert (tmp_path / "tokenizer" / "tokenizer.json").is_file()  # the stage before is complete


def test_ctrl_c_while_packing(tmp_path, terminal_env):
    argv = [PYTHON, str(WORKER), "packing", *train_args(tmp_path)]
    run = run_in_terminal(argv, "STAGE packing", env=terminal_env, cwd=tmp_path)
    assert_one_interrupted_line(run)
    assert_no_blocks(tmp_path)


def test_stuck_stage_ends_after_the_grace_period_or_at_a_second_press(tmp_path, terminal_env):
    argv = [PYTHON, str(WORKER), "stuck", *train_args(tmp_path)]
    run = run_in_terminal(argv, "STAGE stuck", env=terminal_env, cwd=tmp_path)
    assert_one_interrupted_line(run)
    assert INTERRUPT_GRACE_S - 0.5 < run.exit_after_s < INTERRUPT_GRACE_S + 3

    run = run_in_terminal(argv, "STAGE stuck", presses=2, env=terminal_env, cwd=tmp_path)
    assert_one_interrupted_line(run)
    assert run.exit_after_s < 1.5  # the second press (1.5 s after the first) ends it at once


def test_ctrl_c_during_training_saves_a_checkpoint_and_says_how_to_resume(tmp_path, terminal_env):
    argv = [PYTHON, str(WORKER), "none", *train_args(tmp_path, "training.max_steps=100000")]
    run = run_in_terminal(argv, "step 10/", env=terminal_env, cwd=tmp_path)
    assert run.returncode == 130, run.after_press
    lines = run.lines()  # read once: the terminal's output is what it held at this moment
    assert len(lines) == 2, run.after_press
    line, saved = lines  # at once, then once the checkpoint is written
    assert line.startswith("SIGINT received: saving a checkpoint at the end of this step")
    assert line.endswith("training.max_steps=100000 --resume")
    assert run.exit_after_s < EXIT_WITHIN_S
    checkpoints = list_checkpoints(tmp_path / "run")  # the stop's, and checkpoint-15 if it got that far
    assert checkpoints and all(checkpoint_problems(c) == [] for c in checkpoints)
    assert saved.startswith(f"stopped (received SIGINT): saved {checkpoints[0]}; resume with: ")
    assert saved.endswith("training.max_steps=100000 --resume")
    assert leftovers(tmp_path) == []


def test_ctrl_c_during_evaluation_skips_the_rest_of_it(tmp_path, terminal_env):
    overrides = ("training.max_steps=100000", "training.eval_steps=10", "hardware.per_device_eval_batch_size=8")
    argv = [PYTHON, str(WORKER), "evaluation", *train_args(tmp_path, *overrides)]
    run = run_in_terminal(argv, "STAGE evaluation", env=terminal_env, cwd=tmp_path)
    assert run.returncode == 130, run.after_press
    assert len(run.lines()) == 2, run.after_press
    line, saved = run.lines()
    assert line.startswith("SIGINT received: saving a checkpoint")
    assert saved.startswith(f"stopped (received SIGINT): saved {tmp_path / 'run' / 'checkpoint-10'}; resume with: ")
    assert run.exit_after_s < EXIT_WITHIN_S  # the whole evaluation is about 60 batches of 0.3 s
    (checkpoint,) = list_checkpoints(tmp_path / "run")
    assert checkpoint.name == "checkpoint-10" and checkpoint_problems(checkpoint) == []
    records = [line for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert not any('"eval_loss"' in record for record in records)  # no score of a part of the split


def test_ctrl_c_while_saving_the_final_model_then_resume_finishes_the_run(tmp_path, terminal_env):
    overrides = ("training.max_steps=8", "training.save_steps=100", "training.eval_steps=100")
    argv = [PYTHON, str(WORKER), "saving", *train_args(tmp_path, *overrides)]
    run = run_in_terminal(argv, "STAGE saving", env=terminal_env, cwd=tmp_path)
    assert_one_interrupted_line(run)
    run_dir = tmp_path / "run"
    assert not (run_dir / "final").exists()
    assert leftovers(tmp_path) == []
    (checkpoint,) = list_checkpoints(run_dir)  # the end of training is saved: only final/ is missing
    assert checkpoint.name == "checkpoint-8"
    evaluations_before = (run_dir / "metrics.jsonl").read_text().count('"eval_loss"')

    # --resume finishes it: the checkpoint's weights evaluated and saved as final/, no step trained
    resumed = subprocess.run(
        [PYTHON, str(REPO_ROOT / "scripts" / "train.py"), *train_args(tmp_path, *overrides), "--resume"],
        env=terminal_env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "checkpoint-8 is the run's last step and its final model was never saved" in resumed.stdout
    assert "step 9" not in resumed.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["global_step"] == 8 and summary["stopped"] is False and summary["eval_bpb"] > 0
    assert [p.name for p in list_checkpoints(run_dir)] == ["checkpoint-8"]
    final_weights = load_file(run_dir / "final" / "model.safetensors")
    checkpoint_weights = load_file(checkpoint / "model.safetensors")
    assert final_weights.keys() == checkpoint_weights.keys()
    assert all(torch.equal(final_weights[k], checkpoint_weights[k]) for k in final_weights)
    records = (run_dir / "metrics.jsonl").read_text()
    assert records.count('"eval_loss"') == evaluations_before == 1  # the end's evaluation, once
    # and now it is finished: a second --resume is refused, as for any finished run
    again = subprocess.run(
        [PYTHON, str(REPO_ROOT / "scripts" / "train.py"), *train_args(tmp_path, *overrides), "--resume"],
        env=terminal_env, cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert again.returncode == 2 and "nothing to resume" in again.stderr


def test_an_evaluation_a_stop_cuts_before_its_first_batch_is_no_best_and_no_record(tmp_path):
    """A stop asked just before an evaluation leaves it no batch: Trainer would then look for the
    best-model metric among metrics that lack it (a KeyError seen in the app). The cut evaluation's
    metric is NaN (never the best) and nothing is logged."""
    import math

    import torch
    from transformers import TrainingArguments, default_data_collator

    from minigpt import MiniGPTConfig, MiniGPTForCausalLM
    from minigpt.training.interrupt import StopController
    from minigpt.training.trainer import MiniGPTTrainer

    blocks = [{"input_ids": torch.arange(8), "labels": torch.arange(8)} for _ in range(4)]
    args = TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none", metric_for_best_model="loss",
                             per_device_eval_batch_size=2, disable_tqdm=True)
    model = MiniGPTForCausalLM(MiniGPTConfig(vocab_size=16, hidden_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, max_position_embeddings=8))
    controller = StopController()
    trainer = MiniGPTTrainer(model=model, args=args, eval_dataset=blocks, data_collator=default_data_collator,
                             stop_controller=controller)
    assert "eval_loss" in trainer.evaluate()  # not stopped: the whole split
    records = len(trainer.state.log_history)
    controller.request_stop("test")
    metrics = trainer.evaluate()
    assert math.isnan(metrics["eval_loss"]) and not trainer.evaluation_cut
    assert len(trainer.state.log_history) == records  # the cut evaluation is not recorded
