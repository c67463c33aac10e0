"""Stop training cleanly on Ctrl-C, SIGTERM or a call from another thread: the first signal raises a
flag that `StopTrainingCallback` turns into a checkpoint and a stop at the next step; a second aborts.
(Trainer's `enable_jit_checkpoint` saves mid-step, handles SIGTERM only, and does not agree across processes.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator

from ..distributed import is_main_process
from ..errors import DUPLICATE_SIGNAL_WINDOW_S, GUARDED_SIGNALS


class StopController:
    """A thread-safe "please stop" flag for one run, set by a signal (`install_signal_handlers`),
    another thread (`request_stop`) or a callback."""

    def __init__(self, resume_hint: str | None = None) -> None:
        self.event = threading.Event()
        self.resume_hint = resume_hint  # the command that resumes the run, said when a signal arrives
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
            self.reason, self.signum = reason, signum
        self.event.set()

    @property
    def exit_code(self) -> int:
        """128 + signal for a run ended by one (130 SIGINT, 143 SIGTERM), 1 for another stop, else 0."""
        return 128 + self.signum if self.signum is not None else int(self.stop_requested)

    @contextlib.contextmanager
    def install_signal_handlers(self) -> Iterator[StopController]:
        """Route SIGINT/SIGTERM to this controller in the block (main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {sig: signal.signal(sig, self.handle_signal) for sig in GUARDED_SIGNALS}
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
            _write_stderr(f"\n{name} again: aborting now; the last complete checkpoint is intact.\n")
            os._exit(128 + signum)
        self.first_signal_at = now
        self.request_stop(f"received {name}", signum)
        hint = f"; resume with: {self.resume_hint}" if self.resume_hint else "."
        _write_stderr(f"\n{name} received: saving a checkpoint at the end of this step, then stopping "
                      f"(send it again to abort at once){hint}\n")


def _write_stderr(text: str) -> None:
    # os.write, not print: a handler may interrupt a print on the same stream. A closed pipe or a
    # full disk loses the text, never the run.
    if is_main_process():
        with contextlib.suppress(OSError):
            os.write(2, text.encode())
