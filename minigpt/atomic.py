"""Outputs that appear whole or not at all: written into a sibling staging path, then renamed
(`os.replace` is atomic within one filesystem), with the modes the umask gives a new file or folder."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


def current_umask() -> int:
    """The process's umask, read without changing it (Linux), else by setting and restoring it."""
    with contextlib.suppress(OSError, ValueError, StopIteration), open("/proc/self/status", encoding="ascii") as status:
        return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
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
    """`tempfile.mkstemp` with the mode a new file would get, not 0600."""
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=directory)
    os.fchmod(fd, file_mode())
    return fd, path


def make_temp_dir(directory: str | os.PathLike, prefix: str) -> Path:
    """`tempfile.mkdtemp` with the mode a new folder would get, not 0700."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=directory))
    os.chmod(path, dir_mode())
    return path


def apply_umask_modes(folder: str | os.PathLike) -> None:
    """Give `folder` and everything in it the umask's modes (safetensors writes private temporary files)."""
    files, folders = file_mode(), dir_mode()
    os.chmod(folder, folders)
    for root, dirnames, filenames in os.walk(folder):
        for name, mode in [*((d, folders) for d in dirnames), *((f, files) for f in filenames)]:
            if not os.path.islink(path := os.path.join(root, name)):
                os.chmod(path, mode)


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a directory entry (the rename itself) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary sibling of `path` for writers that take a file name; flushed and renamed over `path`
    when the block ends without an error, removed otherwise."""
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


@contextlib.contextmanager
def atomic_output_dir(target: str | os.PathLike) -> Iterator[Path]:
    """An empty staging directory that replaces `target` on success, the old one renamed aside first,
    so the old or the new whole directory exists at every instant (as `target` or `.<target>.old-*`);
    on any exception it is removed and `target` left as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = make_temp_dir(target.parent, prefix=f".{target.name}.staging-")
    try:
        yield staging
        apply_umask_modes(staging)
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        if target.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(target, old)
        os.replace(staging, target)
        fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
