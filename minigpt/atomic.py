"""Outputs that appear whole or not at all: write into a staging path, then rename.

A crash, SIGKILL or Ctrl-C at any instant leaves either the previous output or the new one,
never a half-written mix. `os.replace` is atomic on POSIX within one filesystem, which is why
the staging path is always a sibling of the target.

Temporary files and folders are private while they are written (`tempfile` makes them 0600 and
0700); before the rename they get the modes the user's umask gives a new file or folder, as `cp`
or `mkdir` would, so a model shared with a colleague on the same machine is readable.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def current_umask() -> int:
    """The process's umask, read without changing it (Linux), else by setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # not atomic: another thread creating a file now gets 0o022
    os.umask(mask)
    return mask


def file_mode(base: int = 0o666) -> int:
    """The mode `open()` would give a new file (`base` & ~umask)."""
    return base & ~current_umask()


def dir_mode() -> int:
    """The mode `mkdir` would give a new folder."""
    return 0o777 & ~current_umask()


def make_temp_file(directory: str | os.PathLike, prefix: str, suffix: str = "") -> tuple[int, str]:
    """`tempfile.mkstemp`, with the mode a new file would get instead of 0600."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    os.fchmod(fd, file_mode())
    return fd, path


def make_temp_dir(directory: str | os.PathLike, prefix: str) -> Path:
    """`tempfile.mkdtemp`, with the mode a new folder would get instead of 0700."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=directory))
    os.chmod(path, dir_mode())
    return path


def apply_umask_modes(folder: str | os.PathLike) -> None:
    """Give `folder` and every file and folder in it the umask's modes (libraries such as
    safetensors write through private temporary files: their 0600 would reach the output)."""
    files, folders = file_mode(), dir_mode()
    os.chmod(folder, folders)
    for root, dirnames, filenames in os.walk(folder):
        for name in dirnames:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, folders)
        for name in filenames:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, files)


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a directory entry (the rename itself) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary sibling of `path` for writers that take a file name, not a handle (GGUF's);
    flushed and renamed over `path` when the block ends without an error, removed otherwise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = make_temp_file(path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as handle:  # the bytes on disk before the rename makes them visible
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_write_file(path: str | os.PathLike, mode: str = "w", **open_kwargs) -> Iterator:
    """Open a temporary sibling of `path` for writing; rename it over `path` on success."""
    with atomic_output_path(path) as temporary, open(temporary, mode, **open_kwargs) as handle:
        yield handle


def replace_dir(staging: str | os.PathLike, target: str | os.PathLike) -> None:
    """Move a finished `staging` directory to `target`, replacing any previous `target`.

    The old target is first renamed aside, so at every instant either the old or the new
    complete directory exists under a known name (`target` or `<target>.old-*`).
    """
    staging, target = Path(staging), Path(target)
    apply_umask_modes(staging)
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
    staging = make_temp_dir(target.parent, prefix=f".{target.name}.staging-")
    try:
        yield staging
        replace_dir(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
