"""Console output: plural counts, library progress bars switched off around one call, and output that
never stops a run.

Output that never stops a run: a closed pipe, a full disk or a vanished terminal only silences it.

`python scripts/train.py 2>&1 | tee log` and Ctrl-C: the terminal's SIGINT reaches `tee` too, which
exits; the run's next write to the pipe raises `BrokenPipeError` (Python ignores SIGPIPE), from a
progress bar or a log line in the middle of the step, and would take the checkpoint at the stop
step with it. `never_failing_output()` wraps stdout and stderr so that a write that fails points the
stream's file descriptor at /dev/null once and carries on: the run saves, writes its summary and
exits as it would have. Standard library only: a script installs it before anything is imported
that keeps a reference to the streams (transformers' log handler, tqdm's bars).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


def plural(count: int, noun: str) -> str:
    """`1 document`, `2 documents`, `1,234 documents`."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


# One bar per real piece of work: datasets also draws bars for steps that are not work here (a local
# file list as "downloads", the Arrow table behind an evaluate metric), transformers one for writing a
# single small weights file. Each context turns one library's bars off for the block, then restores them.
@contextlib.contextmanager
def datasets_progress_bars(show: bool) -> Iterator[None]:
    """`datasets`' (and so `evaluate`'s) progress bars on or off for the block."""
    import datasets

    was_enabled = datasets.is_progress_bar_enabled()
    if not show:
        datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


@contextlib.contextmanager
def transformers_progress_bars(show: bool) -> Iterator[None]:
    """transformers' progress bars ("Writing model shards", "Loading weights") on or off for the block."""
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    if not show:
        logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            logging.enable_progress_bar()


class NeverFailingStream:
    """A text stream whose writes and flushes never raise `OSError`: the first failure sends the
    descriptor to /dev/null (what was buffered goes there too), and everything after it."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.silenced = False

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError:
            self.silence()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError:
            self.silence()

    def silence(self) -> None:
        """The pipe, disk or terminal behind the stream is gone: its descriptor writes to /dev/null."""
        if self.silenced:
            return
        self.silenced = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.stream.fileno())
        finally:
            os.close(devnull)
        try:
            self.stream.flush()  # the text still buffered for the dead pipe
        except OSError:
            pass

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer: the stream's
        return getattr(self.stream, name)


def never_failing_output() -> None:
    """Wrap `sys.stdout` and `sys.stderr` in `NeverFailingStream` (once) for the rest of the process."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, NeverFailingStream):
            setattr(sys, name, NeverFailingStream(stream))


def write_to_stderr(text: str) -> None:
    """`os.write` to descriptor 2, for signal handlers (a print may be interrupted mid-call); a
    closed pipe or a full disk loses the text, never the run."""
    try:
        os.write(2, text.encode())
    except OSError:
        pass

