"""The SHA-256 of each source file, read once: the fingerprints of a corpus are made from these.

A run fingerprints its files several times (the tokenizer's record, the Arrow copy of the text,
the cache key of the blocks), and every start of a run does it again: for a corpus of gigabytes
that is seconds to minutes of reading before the first step. So each file's digest is computed
once per process and, under `data.cache_dir`, remembered across runs by the file's stat signature
(size, modification and change times in ns, inode, device), as git's index does: an edit changes
the change time (ctime), which no tool sets back, so an edited file is always read again. A file
changed in the last RACY_SECONDS is not remembered (a second edit could keep every stat field).

The same memory keeps, for the files of a folder corpus, whether each looks binary (`binary_verdicts`):
that takes a read of the file's first bytes, so a cached start of a run on a folder of 100,000 files
reads none of them and costs one `stat` per file, as `git status` does.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path

from ..atomic import atomic_write_file

RACY_SECONDS = 2.0  # a file modified this recently may change again within its timestamps' resolution
# Kept as bytes, not Python ints and hex strings: a few hundred bytes less per file of a large corpus.
_SIGNATURE = struct.Struct("<QqqQQ")  # size, modification and change times (ns), inode, device
_memory: dict[str, tuple[bytes, bytes]] = {}  # absolute path -> (stat signature, SHA-256), this process
# absolute folder -> {path relative to it: stat signature + one byte, 1 if it looks binary}, this process
_verdicts: dict[str, dict[str, bytes]] = {}
_stored: dict[Path, int] = {}  # a store -> its entries as this process last read or wrote it (-1: stale)


def _signature(stat: os.stat_result) -> bytes:
    return _SIGNATURE.pack(stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev)


def _packed(values: object) -> bytes | None:
    """A signature as a store lists it, packed; None for a damaged entry."""
    try:
        return _SIGNATURE.pack(*values)
    except (struct.error, TypeError):
        return None


def _hash_file(path: str) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def file_digests(
    files: list[Path],
    cache_dir: str | Path | None = None,
    save: bool = True,
    stats: list[os.stat_result | None] | None = None,
) -> list[tuple[int, str]]:
    """(size, SHA-256 hex) of each of `files`, in order; read only when not known for its stat signature
    (`stats`: the files' stats when the caller just took them, None where not).

    With `cache_dir`, the digests of this list of files are also looked up in, and (with `save`)
    kept in, `<cache_dir>/digests/<hash of the paths>.json` for the next run. A check that may
    refuse a run passes save=False: a refused command writes nothing.
    """
    names = [os.path.abspath(f) for f in files]  # not resolve(): a syscall per path component
    store = _store_path(names, cache_dir) if cache_dir is not None else None
    if store is not None and store not in _stored:  # read once per process, into its memory
        saved = _read_store(store)
        _stored[store] = len(saved)
        for name, entry in saved.items():
            if isinstance(entry, list) and len(entry) == 2 and (signature := _packed(entry[0])) is not None:
                with contextlib.suppress(TypeError, ValueError):
                    _memory.setdefault(name, (signature, bytes.fromhex(entry[1])))
    results, settled, changed, now = [], [], False, time.time()
    for index, name in enumerate(names):
        stat = stats[index] if stats is not None and stats[index] is not None else os.stat(name)
        signature = _signature(stat)
        known = _memory.get(name)
        if known is None or known[0] != signature:
            known = _memory[name] = (signature, bytes.fromhex(_hash_file(name)))
            changed = True
        if now - max(stat.st_mtime, stat.st_ctime) >= RACY_SECONDS:
            settled.append(name)
        results.append((stat.st_size, known[1].hex()))
    if store is not None and save and (changed or len(settled) != _stored[store]):
        entries = {name: [list(_SIGNATURE.unpack(_memory[name][0])), _memory[name][1].hex()] for name in settled}
        _write_store(store, entries)
        _stored[store] = len(settled)
    elif store is not None and changed:  # not written now: the next call that may write does
        _stored[store] = -1
    return results


def binary_verdicts(
    root: str,
    files: list[tuple[str, os.stat_result]],
    looks_binary: Callable[[str], bool],
    cache_dir: str | Path | None = None,
    save: bool = True,
) -> list[bool]:
    """Whether each of `files` (its path relative to the folder `root`, its stat) looks binary:
    `looks_binary(path)` is asked only for a file not known by its stat signature.

    Known in this process and, with `cache_dir`, in `<cache_dir>/digests/folder-<hash of root>.json`
    (written with `save`, as `file_digests`' store)."""
    root = os.path.abspath(root)
    known = _verdicts.setdefault(root, {})
    store = _folder_store_path(root, cache_dir) if cache_dir is not None else None
    if store is not None and store not in _stored:
        saved = _read_store(store)
        _stored[store] = len(saved)
        for relative, entry in saved.items():
            if isinstance(entry, list) and len(entry) == 6 and entry[5] in (0, 1):
                if (signature := _packed(entry[:5])) is not None:
                    known.setdefault(relative, signature + bytes([entry[5]]))
    verdicts, settled, changed, now = [], [], False, time.time()
    for relative, stat in files:
        signature = _signature(stat)
        entry = known.get(relative)
        if entry is None or entry[:-1] != signature:
            entry = known[relative] = signature + bytes([looks_binary(os.path.join(root, relative))])
            changed = True
        if now - max(stat.st_mtime, stat.st_ctime) >= RACY_SECONDS:
            settled.append(relative)
        verdicts.append(bool(entry[-1]))
    if store is not None and save and (changed or len(settled) != _stored[store]):
        entries = {relative: [*_SIGNATURE.unpack(known[relative][:-1]), known[relative][-1]] for relative in settled}
        _write_store(store, entries)
        _stored[store] = len(settled)
    elif store is not None and changed:  # not written now: the next call that may write does
        _stored[store] = -1
    return verdicts


def _folder_store_path(root: str, cache_dir: str | Path) -> Path:
    key = hashlib.sha256(root.encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return Path(os.path.abspath(cache_dir)) / "digests" / f"folder-{key}.json"


def _store_path(names: list[str], cache_dir: str | Path) -> Path:
    key = hashlib.sha256("\0".join(names).encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return Path(os.path.abspath(cache_dir)) / "digests" / f"{key}.json"


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


__all__ = ["binary_verdicts", "file_digests"]
