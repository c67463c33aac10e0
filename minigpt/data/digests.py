"""The SHA-256 of each source file, read once: the fingerprints of a corpus are made from these.

A run fingerprints its files several times (the tokenizer's record, the Arrow copy of the text,
the cache key of the blocks), and every start of a run does it again: for a corpus of gigabytes
that is seconds to minutes of reading before the first step. So each file's digest is computed
once per process and, under `data.cache_dir`, remembered across runs by the file's stat signature
(size, modification and change times in ns, inode, device), as git's index does: an edit changes
the change time (ctime), which no tool sets back, so an edited file is always read again. A file
changed in the last RACY_SECONDS is not remembered (a second edit could keep every stat field).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from ..atomic import atomic_write_file

RACY_SECONDS = 2.0  # a file modified this recently may change again within its timestamps' resolution
_memory: dict[str, tuple[tuple[int, ...], str]] = {}  # absolute path -> (stat signature, digest), this process


def _signature(stat: os.stat_result) -> tuple[int, ...]:
    return (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev)


def _hash_file(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def file_digests(
    files: list[Path], cache_dir: str | Path | None = None, save: bool = True
) -> list[tuple[int, str]]:
    """(size, SHA-256 hex) of each of `files`, in order; read only when not known for its stat signature.

    With `cache_dir`, the digests of this list of files are also looked up in, and (with `save`)
    kept in, `<cache_dir>/digests/<hash of the paths>.json` for the next run. A check that may
    refuse a run passes save=False: a refused command writes nothing.
    """
    names = [os.path.abspath(f) for f in files]  # not resolve(): a syscall per path component
    store = _store_path(names, cache_dir) if cache_dir is not None else None
    saved = _read_store(store)
    results, changed, now = [], False, time.time()
    keep: dict[str, list] = {}
    for name in names:
        stat = os.stat(name)
        signature = _signature(stat)
        known = _memory.get(name)
        digest = known[1] if known is not None and known[0] == signature else None
        if digest is None and name in saved and tuple(saved[name][0]) == signature:
            digest = saved[name][1]
        if digest is None:
            digest = _hash_file(name)
            changed = True
        _memory[name] = (signature, digest)
        if now - max(stat.st_mtime, stat.st_ctime) >= RACY_SECONDS:
            keep[name] = [list(signature), digest]
        results.append((stat.st_size, digest))
    if store is not None and save and (changed or keep.keys() != saved.keys()):
        _write_store(store, keep)
    return results


def _store_path(names: list[str], cache_dir: str | Path) -> Path:
    key = hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return Path(cache_dir) / "digests" / f"{key}.json"


def _read_store(store: Path | None) -> dict[str, list]:
    if store is None or not store.is_file():
        return {}
    try:
        saved = json.loads(store.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # a damaged store is only a lost shortcut
        return {}
    return saved if isinstance(saved, dict) else {}


def _write_store(store: Path, entries: dict[str, list]) -> None:
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write_file(store, encoding="utf-8") as handle:
            json.dump(entries, handle)
    except OSError:  # a read-only cache folder: digests are recomputed next time
        pass


__all__ = ["file_digests"]
