"""User-facing errors: a `MiniGPTUserError` ends a script (`run_cli`) with one line `error: ...` and
exit code 2, no traceback; anything else is a bug and keeps its traceback. `run_cli` also owns Ctrl-C
and SIGTERM outside training (`InterruptGuard`)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator

from .distributed import is_main_process

USER_ERROR_EXIT_CODE = 2
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, what shells report for a Ctrl-C
INTERRUPTED_LINE = "interrupted: nothing was left half-written"
INTERRUPT_GRACE_S = 5.0  # after the first Ctrl-C, the most the unwinding may take before exiting anyway
# A repeat this soon is the launcher's forwarded copy of the terminal's Ctrl-C, not a second press.
DUPLICATE_SIGNAL_WINDOW_S = 1.0
GUARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class MiniGPTUserError(Exception):
    """A problem with the user's config, data or paths (not a bug in MiniGPT)."""


class ConfigError(MiniGPTUserError):
    """An invalid run config: unknown key, wrong type, impossible value."""


class DataError(MiniGPTUserError):
    """An unusable corpus: missing, empty, not text, too small."""


class InterruptGuard:
    """Ctrl-C/SIGTERM for a whole CLI run. The first signal raises `KeyboardInterrupt` in the main thread
    so `with` blocks clean up; a watcher thread exits if the unwinding is stuck past INTERRUPT_GRACE_S (a pool, a
    call into Rust), or at once on a second signal. It stands aside while training's handlers are in."""

    def __init__(self) -> None:
        self.signum: int | None = None  # the first signal received
        self._first_at: float | None = None
        self._raised = False  # the main thread got its KeyboardInterrupt
        self._owner_pid = os.getpid()
        self._finished, self._noting = threading.Lock(), threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()

    @property
    def interrupted(self) -> bool:
        return self.signum is not None

    @property
    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)

    def handle(self, signum: int, frame: object) -> None:
        """The Python-level handler (main thread): the first signal unwinds the main thread."""
        if os.getpid() != self._owner_pid:
            return  # a forked child in the instant before its at-fork reset: the parent decides
        if not self._raised:  # (the watcher may have noted the signal already)
            self._raised = True
            self._note(signum)
            raise KeyboardInterrupt

    def _note(self, signum: int) -> None:
        """Record the first signal (from the handler or the watcher, whichever runs first)."""
        with self._noting:
            if self.signum is None:
                self.signum, self._first_at = signum, time.monotonic()

    def finish(self) -> None:
        """Print the one line and leave now (any thread, once), skipping atexit handlers."""
        if self._finished.acquire(blocking=False):
            if threading.current_thread() is threading.main_thread():
                for stream in (sys.stdout, sys.stderr):  # the watcher must not wait on their locks
                    with contextlib.suppress(Exception):
                        stream.flush()
            # In a terminal a progress bar may be mid-line: start a line of our own.
            newline = "\n" if os.isatty(2) else ""
            os.write(2, f"{newline}{INTERRUPTED_LINE}\n".encode())
            os._exit(self.exit_code)

    def _watch(self) -> None:
        """Runs in a daemon thread: sees every signal as the C-level handler writes its number."""
        deadline = None
        while True:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                self._wake_r.settimeout(timeout)
                data = self._wake_r.recv(64)
            except TimeoutError:
                self.finish()  # the grace period is over: the unwinding is stuck
                return
            except OSError:
                return  # closed: the guard was removed
            if not data:
                return
            for signum in data:
                if signum not in GUARDED_SIGNALS or signal.getsignal(signum) != self.handle:
                    continue  # another handler (training's checkpoint-then-stop) is in charge
                self._note(signum)
                if deadline is None:  # the first press: the unwinding has INTERRUPT_GRACE_S to end the process
                    deadline = time.monotonic() + INTERRUPT_GRACE_S
                elif time.monotonic() - (self._first_at or 0.0) >= DUPLICATE_SIGNAL_WINDOW_S:
                    self.finish()  # a second press: at once

    @contextlib.contextmanager
    def installed(self) -> Iterator[InterruptGuard]:
        """Install the guard for the block (main thread only; elsewhere it does nothing)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        global _ACTIVE_GUARD
        previous = {sig: signal.getsignal(sig) for sig in GUARDED_SIGNALS}
        self._wake_w.setblocking(False)
        previous_fd = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        for sig in GUARDED_SIGNALS:
            signal.signal(sig, self.handle)
        _ACTIVE_GUARD = self
        threading.Thread(target=self._watch, name="minigpt-interrupt-guard", daemon=True).start()
        try:
            yield self
        finally:
            _ACTIVE_GUARD = None
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(previous_fd)
            with contextlib.suppress(OSError):
                self._wake_r.shutdown(socket.SHUT_RDWR)  # wakes the watcher: it returns
            self._wake_w.close()
            self._wake_r.close()


_ACTIVE_GUARD: InterruptGuard | None = None


def _reset_signals_in_child() -> None:
    # A forked worker leaves Ctrl-C to its parent, and dies on the SIGTERM its pool sends.
    if _ACTIVE_GUARD is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.set_wakeup_fd(-1)


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_reset_signals_in_child)


def run_cli(main: Callable[[], int | None]) -> None:
    """Run a script's `main()`: a `MiniGPTUserError` becomes one line on stderr and exit code 2; a
    Ctrl-C one line and exit 130, whatever error the interruption caused on its way up."""
    guard = InterruptGuard()
    with guard.installed():
        try:
            code = main()
        except MiniGPTUserError as err:
            if is_main_process():  # under `accelerate launch` every process finds it: say it once
                message = " ".join(str(err).split())  # one line, whatever the message held
                print(f"error: {message}", file=sys.stderr)
            sys.exit(USER_ERROR_EXIT_CODE)
        except BaseException as err:
            if guard.interrupted:  # whatever the interruption raised on its way up
                guard.finish()
            if isinstance(err, KeyboardInterrupt):
                print(INTERRUPTED_LINE, file=sys.stderr)
                sys.exit(INTERRUPTED_EXIT_CODE)
            if isinstance(err, BrokenPipeError):  # stdout's reader left (`| head`): no traceback at exit
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                sys.exit(1)
            raise
    sys.exit(code or 0)
