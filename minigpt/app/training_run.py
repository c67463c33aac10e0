"""The app's one training run: `run_training` in a background thread of the server, stopped through
its `StopController` (a checkpoint at the end of the step, as after Ctrl-C), and its live record as
the pages show it. Every import the app takes from minigpt.training is here."""

from __future__ import annotations

import copy
import math
import shlex
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from transformers import TrainerCallback

from minigpt.errors import ConfigError, MiniGPTUserError
from minigpt.run_layout import METRICS_FILE, SAMPLES_FILE, Sample, is_number, read_log_records, read_samples
from minigpt.training.callbacks import format_count
from minigpt.training.checkpoints import find_resume_checkpoint
from minigpt.training.interrupt import StopController
from minigpt.training.run_config import REPO_CONFIG_DIR, load_run_config
from minigpt.training.settings import RunConfig
from minigpt.training.start import check_resume_target, claim_output_dir

# Run statuses. "starting" covers tokenizer training and data preparation, before step 1.
IDLE, STARTING, RUNNING, STOPPING = "idle", "starting", "running", "stopping"
STOPPED, FINISHED, FAILED = "stopped", "finished", "failed"
MAX_SAMPLES_SHOWN = 6  # the newest sample blocks kept for the page (samples.txt keeps them all)


@dataclass
class RunSnapshot:
    """A copy of the live record; reading it needs no lock."""

    status: str = IDLE
    message: str = ""  # one line: what happened last (started, stopped with its checkpoint, the error)
    config: str = ""  # the config file the run was started from
    overrides: list[str] = field(default_factory=list)
    output_dir: str | None = None
    step: int = 0
    max_steps: int = 0
    loss: float | None = None  # training loss of the latest log record
    learning_rate: float | None = None
    tokens_per_second: float | None = None
    eta_seconds: float | None = None
    eval_loss: float | None = None
    eval_bpb: float | None = None
    train_curve: list[tuple[int, float]] = field(default_factory=list)  # (step, training loss)
    eval_curve: list[tuple[int, float]] = field(default_factory=list)  # (step, validation loss)
    samples: list[Sample] = field(default_factory=list)  # oldest first
    checkpoint: str | None = None  # the checkpoint written when the run was stopped
    final_dir: str | None = None  # <output_dir>/final once the run finished
    version: int = 0  # bumps on every change: a page redraws only when it moved
    curve_version: int = 0  # bumps when a curve point arrives: the plot redraws only then


def _number(value: Any) -> float | None:
    return float(value) if is_number(value) else None


class LiveRunState:
    """The live record of the current (or last) run, safe to update and read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data = RunSnapshot()

    def snapshot(self) -> RunSnapshot:
        with self._lock:
            return copy.deepcopy(self._data)

    def update(self, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(self._data, name, value)
            self._data.version += 1

    def begin(self, **fields: Any) -> None:
        """A new (or resumed) run replaces the record; its curves come back from metrics.jsonl."""
        with self._lock:
            old = self._data
            self._data = RunSnapshot(status=STARTING, version=old.version + 1, curve_version=old.curve_version + 1, **fields)

    def add_log(self, step: int, logs: dict[str, Any]) -> None:
        """One Trainer log record: a training record (loss, lr, tokens/s) or an evaluation record."""
        with self._lock:
            self._apply_log(step, logs)
            self._data.step = step
            self._data.version += 1

    def replay(self, step: int, max_steps: int, records: list[dict[str, Any]]) -> None:
        """Start the record over from a resumed run's past log records (its curves and last numbers)."""
        with self._lock:
            self._data.train_curve, self._data.eval_curve = [], []
            for record in records:
                self._apply_log(int(record["step"]), record)
            self._data.step, self._data.max_steps = step, max_steps
            self._data.curve_version += 1
            self._data.version += 1

    def _apply_log(self, step: int, logs: dict[str, Any]) -> None:  # the caller holds the lock
        data = self._data
        if is_number(logs.get("loss")):
            data.loss = float(logs["loss"])
            data.learning_rate, data.tokens_per_second = _number(logs.get("learning_rate")), _number(logs.get("tokens_per_second"))
            data.train_curve.append((step, data.loss))
            data.curve_version += 1
        if is_number(logs.get("eval_loss")):
            data.eval_loss, data.eval_bpb = float(logs["eval_loss"]), _number(logs.get("eval_bpb"))
            data.eval_curve.append((step, data.eval_loss))
            data.curve_version += 1

    def set_progress(self, step: int, eta_seconds: float | None) -> None:
        with self._lock:
            self._data.step, self._data.eta_seconds = step, eta_seconds
            if self._data.status == STARTING:
                self._data.status = RUNNING
            self._data.version += 1


class LiveStateCallback(TrainerCallback):
    """Feeds `LiveRunState` from inside Trainer: log records, step and ETA, the newest samples
    (registered after MiniGPT's callbacks, so at a step's end that step's samples are in samples.txt)."""

    def __init__(self, state: LiveRunState, output_dir: str | Path) -> None:
        self.state = state
        self.samples_path, self.metrics_path = Path(output_dir) / SAMPLES_FILE, Path(output_dir) / METRICS_FILE
        self._samples_size = -1
        self._samples_offset = 0  # where this run's samples start in samples.txt
        self._first_step: tuple[int, float] | None = None  # (step, perf_counter) at the first step end

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        if not state.is_world_process_zero:
            return
        # On resume Trainer starts at the checkpoint's step; metrics.jsonl holds the curve so far.
        self.state.replay(state.global_step, state.max_steps, read_log_records(self.metrics_path, state.global_step))
        if state.global_step == 0 and self.samples_path.exists():  # a new run into a used folder:
            self._samples_offset = self.samples_path.stat().st_size  # the old samples are not its own
        self._refresh_samples()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if not state.is_world_process_zero:
            return
        now = time.perf_counter()
        step0, time0 = self._first_step = self._first_step or (state.global_step, now)
        eta = None
        if state.global_step > step0:  # seconds per step so far, evaluation and sampling included
            eta = (state.max_steps - state.global_step) * (now - time0) / (state.global_step - step0)
        self.state.set_progress(state.global_step, eta)
        self._refresh_samples()

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if state.is_world_process_zero and logs:
            self.state.add_log(state.global_step, logs)

    def _refresh_samples(self) -> None:
        size = self.samples_path.stat().st_size if self.samples_path.exists() else -1
        if size != self._samples_size:
            self._samples_size = size
            self.state.update(samples=read_samples(self.samples_path, self._samples_offset)[-MAX_SAMPLES_SHOWN:])


def parse_overrides(text: str) -> list[str]:
    """`section.key=value` items from the page's box: split on whitespace and newlines, shell quoting
    for values with spaces (`training.sample_prompts='[ROMEO:, JULIET:]'`); the loader checks them."""
    try:
        return shlex.split(text, comments=True)
    except ValueError as err:  # an unclosed quote
        raise ConfigError(f"overrides: {err} (quote a value with spaces, e.g. key='a b')") from None


def error_line(err: BaseException) -> str:
    """An error in one line: a user error as the CLI words it; anything else (a bug) with its type,
    and its traceback in the server's log."""
    text = " ".join(str(err).split()) or type(err).__name__
    if isinstance(err, MiniGPTUserError):
        return f"error: {text}"
    traceback.print_exc(file=sys.stderr)
    return f"error: {type(err).__name__}: {text}"


class RunManager:
    """Owns the one training thread of the server and the live record pages read."""

    def __init__(self) -> None:
        self.state = LiveRunState()
        self._lock = threading.Lock()  # start/stop decide under it: never two runs
        self._thread: threading.Thread | None = None
        self._controller: StopController | None = None
        self.is_running = False  # from start until the thread has written the run's last status

    def snapshot(self) -> RunSnapshot:
        return self.state.snapshot()

    def start(self, config: str | Path, overrides: str = "", resume: bool = False, init_from: str | None = None) -> str:
        """Check the config and start training (from `init_from` if given) in the background; returns a
        one-line message. Raises MiniGPTUserError (one line) for a bad config, override or base model, a
        run already training, a folder holding another run, or a resume with no checkpoint."""
        items = parse_overrides(overrides)
        if init_from and init_from.strip():
            items.append(f"model.init_from={init_from.strip()}")
        with self._lock:
            if self.is_running:
                now = self.snapshot()
                raise MiniGPTUserError(
                    f"a run is already training ({now.output_dir}, step {now.step}/{now.max_steps}): stop it first; one run at a time"
                )
            if not str(config).strip():
                raise ConfigError("choose a config file")
            run = load_run_config(config, items)  # ConfigError, one line, before anything heavy
            output_dir = run.training.output_dir
            # What run_training would refuse about the folder, refused here, before the thread starts.
            if resume:
                checkpoint = find_resume_checkpoint(output_dir, info=lambda _: None)  # run_training says it
                if checkpoint is None:
                    raise ConfigError(f"nothing to resume: {output_dir} has no complete checkpoint (press Start)")
                check_resume_target(checkpoint, run.training.max_steps)
                message = f"resuming {output_dir} from {checkpoint}"
            else:
                if not run.training.overwrite_output_dir:  # raises if another run is there; removes nothing
                    claim_output_dir(output_dir, overwrite=False, resume_command="Resume")
                message = f"started: {config} -> {output_dir}"
                if run.model.init_from is not None:  # a base that is not there is said at once
                    from minigpt.hub.base_model import find_base_model  # imports transformers' models

                    find_base_model(run.model)
                    message += f", starting from {run.model.init_from}"
            self._controller = StopController()
            self.is_running = True
            self.state.begin(message=message, config=str(config), overrides=items, output_dir=output_dir, max_steps=run.training.max_steps)
            self._thread = threading.Thread(target=self._train, args=(run, self._controller, resume), name="minigpt-training", daemon=True)
            self._thread.start()
        return message

    def stop(self) -> str:
        """Ask the run to save a checkpoint at the end of this step and end; returns at once."""
        with self._lock:
            if not self.is_running or self._controller is None:
                raise MiniGPTUserError("no run is training")
            self._controller.request_stop("Stop pressed in the app")
            message = "stopping: saving a checkpoint at the end of this step"
            if self.snapshot().status == STARTING:  # the tokenizer or the data is still being prepared
                message = "stopping: saving a checkpoint at the end of the first step, once the data is ready"
            self.state.update(status=STOPPING, message=message)
        return message

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop a training run (checkpoint saved) and wait for it: the server is going away."""
        if self.is_running:
            try:
                self.stop()
            except MiniGPTUserError:
                pass  # it ended in between
        if self._thread is not None:
            self._thread.join(timeout)

    def _train(self, run: RunConfig, controller: StopController, resume: bool) -> None:
        outcome: tuple[str, str, dict] = (FAILED, "error: the run was interrupted", {})
        try:
            outcome = self._run(run, controller, resume)
        finally:
            with self._lock:  # the last word, so a Stop pressed meanwhile cannot overwrite it
                self.is_running = False
                status, message, changes = outcome
                self.state.update(status=status, message=message, **changes)

    def _run(self, run: RunConfig, controller: StopController, resume: bool) -> tuple[str, str, dict]:
        """Train; returns the run's last (status, one-line message, record changes)."""
        from minigpt.pipeline import run_training  # heavy: torch, transformers, datasets

        output_dir = Path(run.training.output_dir)
        callback = LiveStateCallback(self.state, output_dir)
        try:
            result = run_training(run, callbacks=[callback], stop_controller=controller, resume=resume)
        except Exception as err:  # bad data, a checkpoint that does not fit, a bug: the server stays up
            return FAILED, error_line(err), {}
        if result.stopped:
            checkpoint = output_dir / f"checkpoint-{controller.stopped_at_step}"
            if not checkpoint.is_dir():  # the stop came before a step ended: nothing was saved
                return STOPPED, f"stopped at step {result.global_step}: no checkpoint was saved", {}
            message = f"stopped at step {result.global_step}: checkpoint saved to {checkpoint} (Resume continues it)"
            return STOPPED, message, {"step": result.global_step, "checkpoint": str(checkpoint), "eta_seconds": None}
        bpb = result.final_metrics.get("eval_bpb")
        quality = f", validation {bpb:.3f} bits/byte" if bpb is not None else ""
        message = f"finished: {result.global_step} steps{quality}; model saved to {result.final_dir}"
        return FINISHED, message, {"step": result.global_step, "final_dir": str(result.final_dir), "eta_seconds": 0.0}


# ---- what the page shows ------------------------------------------------------------------------

CURVE_COLUMNS = ["step", "loss", "curve"]  # the plot's x, y and colour
TRAIN_CURVE, EVAL_CURVE = "training", "validation"
CURVE_COLOURS = {TRAIN_CURVE: "#2563eb", EVAL_CURVE: "#f97316"}  # blue, orange


def format_duration(seconds: float | None) -> str:
    """73 -> "1:13", 3725 -> "1:02:05"; "?" when unknown."""
    if seconds is None:
        return "?"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def status_markdown(snap: RunSnapshot) -> str:
    """The run's numbers (status, step, loss, lr, tokens/s, ETA), its folder and what happened last."""
    if snap.status == IDLE:
        return "No run yet: choose a config, add overrides if you like, press **Start**."
    parts = [f"**{snap.status}**", f"step {snap.step}/{snap.max_steps}"]
    if snap.loss is not None:
        parts.append(f"loss {snap.loss:.4f}")
    if snap.learning_rate is not None:
        parts.append(f"lr {snap.learning_rate:.2e}")
    if snap.tokens_per_second is not None:
        parts.append(f"{format_count(snap.tokens_per_second)} tokens/s")
    if snap.status not in (STOPPED, FINISHED, FAILED):
        parts.append(f"ETA {format_duration(snap.eta_seconds)}")
    if snap.eval_loss is not None:
        bpb = f", {snap.eval_bpb:.3f} bits/byte" if snap.eval_bpb is not None else ""
        parts.append(f"val loss {snap.eval_loss:.4f}{bpb}")
    return "\n\n".join([" · ".join(parts), f"`{snap.output_dir}`", *([snap.message] if snap.message else [])])


def curve_frame(snap: RunSnapshot) -> pd.DataFrame | None:
    """Long-format loss curves for a line plot (a row per point, `curve` says which); None before the
    first point. Gradio's plot fixes its axes and colours from the first frame it draws, so a curve
    with no point yet is named by a row with no loss (NaN, skipped), and the columns are typed."""
    rows = [(step, loss, TRAIN_CURVE) for step, loss in snap.train_curve]
    rows += [(step, loss, EVAL_CURVE) for step, loss in snap.eval_curve]
    if not rows:
        return None
    first_step = min(step for step, _, _ in rows)
    rows += [(first_step, math.nan, name) for name, points in ((TRAIN_CURVE, snap.train_curve), (EVAL_CURVE, snap.eval_curve)) if not points]
    return pd.DataFrame(rows, columns=CURVE_COLUMNS).astype({"step": "int64", "loss": "float64", "curve": "str"})


def samples_text(snap: RunSnapshot) -> str:
    """The newest samples first, each under a `[step N, prompt P]` line."""
    return "\n\n".join(f"[step {s.step}, prompt {s.prompt}]\n{s.text}" for s in reversed(snap.samples))


def display_path(path: Path) -> str:
    """A path relative to the working folder when it is inside it (shorter in a dropdown)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def config_choices(config_dir: Path | None = None) -> list[str]:
    """The run configs in `config_dir` (default: the repository's configs/), not its profiles."""
    return [display_path(p) for p in sorted((config_dir or REPO_CONFIG_DIR).glob("*.yaml"))]
