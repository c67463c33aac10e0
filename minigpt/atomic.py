"""Outputs that appear whole or not at all: write into a staging path, then rename.

A crash, SIGKILL or Ctrl-C at any instant leaves either the previous output or the new one,
never a half-written mix. `os.replace` is atomic on POSIX within one filesystem, which is why
the staging path is always a sibling of the target.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a directory entry (the rename itself) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write_file(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator:
    """Open a temporary sibling of `path` for writing; rename it over `path` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **open_kwargs) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def replace_dir(staging: str | os.PathLike, target: str | os.PathLike) -> None:
    """Move a finished `staging` directory to `target`, replacing any previous `target`.

    The old target is first renamed aside, so at every instant either the old or the new
    complete directory exists under a known name (`target` or `<target>.old-*`).
    """
    staging, target = Path(staging), Path(target)
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        os.replace(target, old)
    os.replace(staging, target)
    fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_output_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty staging directory; on success it replaces `target` in one rename.

    On any exception (Ctrl-C included) the staging directory is removed and `target` is left
    exactly as it was.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.staging-", dir=target.parent))
    try:
        yield staging
        replace_dir(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
