"""Console output: plural counts, library progress bars switched off around one call, and output that
never stops a run. With `train.py | tee log` and Ctrl-C, `tee` exits too and the run's next write
would raise `BrokenPipeError` mid-step, losing the stop's checkpoint: `never_failing_output()` sends a
failed stream to /dev/null and carries on (installed before anything keeps a reference to the streams).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO


def plural(count: int, noun: str) -> str:
    """`1 document`, `2 documents`, `1,234 documents`."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


# One bar per real piece of work: datasets also draws bars for steps that are not work here (a local
# file list as "downloads"), transformers one for writing a single small weights file.
@contextlib.contextmanager
def _progress_bars(show: bool, is_enabled: Callable[[], bool], disable: Callable, enable: Callable) -> Iterator[None]:
    was_enabled = is_enabled()
    if not show:
        disable()
    try:
        yield
    finally:
        if was_enabled:
            enable()


def datasets_progress_bars(show: bool) -> contextlib.AbstractContextManager[None]:
    """`datasets`' (and so `evaluate`'s) progress bars on or off for the block."""
    import datasets

    return _progress_bars(
        show, datasets.is_progress_bar_enabled, datasets.disable_progress_bars, datasets.enable_progress_bars
    )


def transformers_progress_bars(show: bool) -> contextlib.AbstractContextManager[None]:
    """transformers' progress bars ("Writing model shards", "Loading weights") on or off for the block."""
    from transformers.utils import logging

    return _progress_bars(show, logging.is_progress_bar_enabled, logging.disable_progress_bar, logging.enable_progress_bar)


class NeverFailingStream:
    """A text stream whose writes and flushes never raise `OSError`: the first failure sends the
    descriptor, and everything after it, to /dev/null."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.silenced = stream, False

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
        with contextlib.suppress(OSError):
            self.stream.flush()  # the text still buffered for the dead pipe

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, buffer: the stream's
        return getattr(self.stream, name)


def never_failing_output() -> None:
    """Wrap `sys.stdout` and `sys.stderr` in `NeverFailingStream` (once) for the rest of the process."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, NeverFailingStream):
            setattr(sys, name, NeverFailingStream(stream))
