"""What a web page shows about the one training run: a thread-safe record and the callback that fills it.

The training thread writes (`LiveStateCallback`, `LiveRunState.begin/finish/fail`), any number of
page sessions read (`LiveRunState.snapshot`). The record lives in the server process, not in a
page, so closing or reloading a page loses nothing: the next snapshot shows the run as it is.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

# samples.txt and metrics.jsonl are read where they are named (the run page reads them too)
from ..run_layout import Sample, read_log_records, read_samples
from ..run_layout import is_number as _is_number

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

    def begin(self, config: str, overrides: list[str], output_dir: str, max_steps: int, message: str) -> None:
        """A new run (or a resumed one) replaces the record; curves come back from metrics.jsonl."""
        with self._lock:
            self._data = RunSnapshot(
                status=STARTING,
                message=message,
                config=config,
                overrides=list(overrides),
                output_dir=output_dir,
                max_steps=max_steps,
                version=self._data.version + 1,
                curve_version=self._data.curve_version + 1,
            )

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
        if _is_number(logs.get("loss")):
            data.loss = float(logs["loss"])
            data.learning_rate = _float_or_none(logs.get("learning_rate"))
            data.tokens_per_second = _float_or_none(logs.get("tokens_per_second"))
            data.train_curve.append((step, data.loss))
            data.curve_version += 1
        if _is_number(logs.get("eval_loss")):
            data.eval_loss = float(logs["eval_loss"])
            data.eval_bpb = _float_or_none(logs.get("eval_bpb"))
            data.eval_curve.append((step, data.eval_loss))
            data.curve_version += 1

    def set_progress(self, step: int, eta_seconds: float | None) -> None:
        with self._lock:
            self._data.step = step
            self._data.eta_seconds = eta_seconds
            if self._data.status == STARTING:
                self._data.status = RUNNING
            self._data.version += 1

    def set_samples(self, samples: list[Sample]) -> None:
        with self._lock:
            self._data.samples = samples[-MAX_SAMPLES_SHOWN:]
            self._data.version += 1

    def set_status(self, status: str, message: str, **changes: Any) -> None:
        self.update(status=status, message=message, **changes)


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


class LiveStateCallback(TrainerCallback):
    """Feeds `LiveRunState` from inside Trainer: log records, step and ETA, the newest samples.

    Registered after MiniGPT's own callbacks, so at a step's end the samples of that step are
    already in samples.txt; the file is read again only when its size changed.
    """

    def __init__(
        self, state: LiveRunState, output_dir: str | Path, samples_file: str, metrics_file: str
    ) -> None:
        self.state = state
        self.samples_path = Path(output_dir) / samples_file
        self.metrics_path = Path(output_dir) / metrics_file
        self._samples_size = -1
        self._samples_offset = 0  # where this run's samples start in samples.txt
        self._first_step: tuple[int, float] | None = None  # (step, perf_counter) at the first step end

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        if not state.is_world_process_zero:
            return
        # On resume Trainer starts at the checkpoint's step; metrics.jsonl holds the curve so far
        # (MetricsFileCallback, registered earlier, has just cut it back to that step).
        self.state.replay(
            state.global_step, state.max_steps, read_log_records(self.metrics_path, state.global_step)
        )
        if state.global_step == 0 and self.samples_path.exists():  # a new run into a used folder:
            self._samples_offset = self.samples_path.stat().st_size  # the old samples are not its own
        self._refresh_samples()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if not state.is_world_process_zero:
            return
        now = time.perf_counter()
        if self._first_step is None:
            self._first_step = (state.global_step, now)
        step0, time0 = self._first_step
        eta = None
        if state.global_step > step0:  # seconds per step so far, evaluation and sampling included
            eta = (state.max_steps - state.global_step) * (now - time0) / (state.global_step - step0)
        self.state.set_progress(state.global_step, eta)
        self._refresh_samples()

    def on_log(self, args, state, control, logs=None, **kwargs) -> None:
        if state.is_world_process_zero and logs:
            self.state.add_log(state.global_step, logs)

    def _refresh_samples(self) -> None:
        try:
            size = self.samples_path.stat().st_size
        except FileNotFoundError:
            return
        if size != self._samples_size:
            self._samples_size = size
            self.state.set_samples(read_samples(self.samples_path, self._samples_offset))


__all__ = [
    "LiveRunState",
    "LiveStateCallback",
    "RunSnapshot",
    "Sample",
    "read_log_records",
    "read_samples",
]
