"""Stop training cleanly on Ctrl-C, SIGTERM or a call from another thread.

The first SIGINT/SIGTERM only raises a flag; `StopTrainingCallback` (callbacks.py) sees it at the next optimizer
step boundary and asks Trainer to save a checkpoint and stop, so the run resumes exactly. A second
signal (a second or more after the first) aborts at once: checkpoints are written atomically
(`minigpt.training.checkpoints`), so killing the process mid-save leaves the previous checkpoint intact.

Written by hand because Trainer's `enable_jit_checkpoint` saves from `on_pre_optimizer_step` (half
way through a step), handles SIGTERM only, and does not make several processes agree on the step.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence

from ..console import write_to_stderr
from ..distributed import is_main_process

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# `accelerate launch`/torchrun forward the terminal's Ctrl-C to workers that already got it from the
# terminal: a repeat this soon after the first signal is that copy, not a second Ctrl-C.
DUPLICATE_SIGNAL_WINDOW_S = 1.0


class StopController:
    """A thread-safe "please stop" flag for one training run.

    Set it from a signal handler (`install_signal_handlers`), another thread (`request_stop`) or a
    callback; `StopTrainingCallback` turns it into a checkpoint and a stop at the next step.
    """

    def __init__(self, resume_hint: str | None = None) -> None:
        self.event = threading.Event()
        # A command that resumes the run: said in the one line a signal prints (scripts/train.py).
        self.resume_hint = resume_hint
        self.signum: int | None = None  # the signal that asked to stop, None for request_stop()
        self.reason: str | None = None
        self.stopped_at_step: int | None = None  # global step of the checkpoint written on stop
        self.first_signal_at: float | None = None  # monotonic time of the first signal

    @property
    def stop_requested(self) -> bool:
        return self.event.is_set()

    def request_stop(self, reason: str = "stop requested", signum: int | None = None) -> None:
        """Ask training to save and stop at the next step boundary (safe from any thread)."""
        if not self.event.is_set():
            self.reason = reason
            self.signum = signum
        self.event.set()

    @property
    def exit_code(self) -> int:
        """Shell convention for a run ended by a signal: 128 + signal (130 SIGINT, 143 SIGTERM)."""
        if self.signum is not None:
            return 128 + self.signum
        return 1 if self.stop_requested else 0

    @contextlib.contextmanager
    def install_signal_handlers(self, signals: Sequence[int] = HANDLED_SIGNALS) -> Iterator[StopController]:
        """Route SIGINT/SIGTERM to this controller while the block runs; restore the old handlers after.

        Outside the main thread (where Python cannot install handlers) this does nothing.
        """
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.getsignal(sig) for sig in signals}
        for sig in signals:
            signal.signal(sig, self.handle_signal)
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_signal(self, signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if self.first_signal_at is not None and now - self.first_signal_at < DUPLICATE_SIGNAL_WINDOW_S:
            return  # the launcher's copy of the first signal
        if self.first_signal_at is not None:
            # Second signal: leave now. Checkpoints are renamed into place whole, so nothing breaks.
            _write_stderr(f"\n{name} again: aborting now; the last complete checkpoint is intact.\n")
            os._exit(128 + signum)
        self.first_signal_at = now
        self.request_stop(f"received {name}", signum)
        hint = f"; resume with: {self.resume_hint}" if self.resume_hint else "."
        _write_stderr(
            f"\n{name} received: saving a checkpoint at the end of this step, then stopping "
            f"(send it again to abort at once){hint}\n"
        )


def _write_stderr(text: str) -> None:
    # os.write, not print: a handler may interrupt a print on the same stream (reentrant call
    # error); a closed pipe (`| tee` gone at Ctrl-C) loses the line, never the save that follows.
    if is_main_process():
        write_to_stderr(text)
