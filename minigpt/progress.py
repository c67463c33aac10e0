"""Progress bars of the libraries MiniGPT drives, switched off around one call at a time.

One bar per real piece of work: `datasets` also draws bars for steps that are not work here
(turning a local file list into "downloads", the Arrow table behind an `evaluate` metric) and
transformers one for writing a single small weights file. Each context manager below turns one
library's bars off for the block and restores their previous state, rather than muting warnings
or bars for the whole process. The libraries are imported only when used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


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


__all__ = ["datasets_progress_bars", "transformers_progress_bars"]
