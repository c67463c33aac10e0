"""A real, diverse corpus for the data benchmark: the Python sources of an installed environment.

`build_python_corpus` copies every non-empty `*.py` file under a folder (by default this Python's
site-packages) into ONE flat folder, each under a distinct name made from its relative path
(`numpy/core/numeric.py` -> `numpy__core__numeric.py`). It is built at benchmark time, never
committed, and deterministically: the files are taken in an order spread over the whole tree (a
hash of their relative path, so a size cap keeps a sample of every package, not the
alphabetically first ones), up to `max_bytes`; past the tree's size it starts over with names
prefixed `copy1__`, `copy2__`, ... (the ~1 GB variant of a 300 MB environment).
"""

from __future__ import annotations

import hashlib
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

COPY_PREFIX = "copy{}__"  # names of the second and later passes over the tree


@dataclass(frozen=True)
class BuiltCorpus:
    """What `build_python_corpus` wrote."""

    folder: Path
    files: int
    bytes: int
    source_files: int  # non-empty .py files found in the source tree
    source_bytes: int


def site_packages() -> Path:
    """This interpreter's site-packages (purelib)."""
    return Path(sysconfig.get_paths()["purelib"])


def _spread_order(relative: str) -> bytes:
    """A deterministic key that scatters files over the tree (not sorted by package name)."""
    return hashlib.sha1(relative.encode("utf-8", "surrogateescape")).digest()


def python_files(source: Path) -> list[tuple[str, Path, int]]:
    """(relative path, path, bytes) of every non-empty regular `*.py` file under `source`, in spread order."""
    found = []
    for path in sorted(source.rglob("*.py")):
        if path.is_symlink() or not path.is_file():
            continue
        size = path.stat().st_size
        if size:
            found.append((path.relative_to(source).as_posix(), path, size))
    return sorted(found, key=lambda item: _spread_order(item[0]))


def _flat_names(relatives: list[str]) -> list[str]:
    """`a/b/c.py` -> `a__b__c.py`, made distinct where two paths flatten alike (`a__b.py`, `a/b.py`)."""
    names, used = [], set()
    for relative in relatives:
        name = relative.replace("/", "__")
        if name in used:
            name = f"{_spread_order(relative).hex()[:8]}__{name}"
        used.add(name)
        names.append(name)
    return names


def build_python_corpus(folder: Path, max_bytes: int | None = None, source: Path | None = None) -> BuiltCorpus:
    """Copy the `*.py` files of `source` (default: site-packages) into `folder`, flat, up to
    `max_bytes` (None: every file once); the folder is emptied first."""
    source = Path(source) if source is not None else site_packages()
    files = python_files(source)
    if not files:
        raise ValueError(f"no non-empty .py files under {source}")
    source_bytes = sum(size for _, _, size in files)
    folder = Path(folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    limit = source_bytes if max_bytes is None else int(max_bytes)
    names = _flat_names([relative for relative, _, _ in files])
    written = count = 0
    passes = 0
    while written < limit:
        prefix = COPY_PREFIX.format(passes) if passes else ""
        for name, (_, path, size) in zip(names, files, strict=True):
            if written + size > limit and written:  # the cap: stop before the file that crosses it
                break
            shutil.copyfile(path, folder / (prefix + name))
            written, count = written + size, count + 1
        else:
            passes += 1
            continue
        break
    return BuiltCorpus(folder, count, written, len(files), source_bytes)


__all__ = ["BuiltCorpus", "build_python_corpus", "python_files", "site_packages"]
