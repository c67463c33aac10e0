"""What a tokenizer was trained on: data files by name with byte counts, a content fingerprint and
the split settings that decide the training text.

No heavy imports (no `datasets`). The hub stage names a published model's data sources with the
same `SourceFile`s. Files are named by their file name only, never by a folder: records and
published files must not carry the training machine's paths.
"""

from __future__ import annotations

import hashlib
import os
import stat as stat_module
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .digests import file_digests
from .settings import DataSettings


@dataclass(frozen=True)
class SourceFile:
    """One data source as published: its file name and size."""

    name: str  # file name only (a `save_to_disk` folder: the folder's name)
    bytes: int | None  # size on disk (a folder: all its files); None = not found, size unknown

    def describe(self) -> str:
        return (
            f"{self.name} ({self.bytes:,} bytes)" if self.bytes is not None else f"{self.name} (size unknown)"
        )


def _files_of(path: Path) -> list[Path]:
    """`path` itself, or every file of a folder (a `save_to_disk` dataset), in a stable order."""
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def list_sources(paths: list[Path]) -> list[SourceFile]:
    """The resolved data files as (file name, bytes), in order."""
    return [SourceFile(p.name, sum(f.stat().st_size for f in _files_of(p))) for p in paths]


def content_fingerprint(
    paths: list[Path], portable: bool = False, cache_dir: str | Path | None = None, save: bool = True
) -> str:
    """A hash of the inputs' names, sizes and bytes (every file of a `save_to_disk` folder).

    `portable=True` hashes file names relative to each input instead of absolute paths, so the
    same data moved to another folder or machine keeps its fingerprint. Each file is read once per
    process and, with `cache_dir` (`data.cache_dir`), once until it changes (`digests`; `save`:
    whether new digests are written there).
    """
    return fingerprint_sources(paths, portable, cache_dir, save)[0]


def fingerprint_sources(
    paths: list[Path], portable: bool = False, cache_dir: str | Path | None = None, save: bool = True
) -> tuple[str, list[SourceFile]]:
    """`content_fingerprint` and `list_sources` of `paths` at once: one `stat` per file."""
    named, files, stats = [], [], []  # (name hashed, index of its input), file, its stat (None: to take)
    for index, path in enumerate(paths):
        stat = os.stat(path)
        members = _files_of(path) if stat_module.S_ISDIR(stat.st_mode) else [path]
        for file in members:
            if portable:
                name = path.name if file is path else f"{path.name}/{file.relative_to(path)}"
            else:
                name = os.path.abspath(file)
            named.append((name, index))
            files.append(file)
            stats.append(stat if file is path else None)
    digest = hashlib.sha256()
    sizes = [0] * len(paths)
    for (name, index), (size, file_digest) in zip(named, file_digests(files, cache_dir, save, stats), strict=True):
        digest.update(f"{name}\0{size}\0".encode())
        digest.update(bytes.fromhex(file_digest))
        sizes[index] += size
    return digest.hexdigest()[:16], [SourceFile(path.name, size) for path, size in zip(paths, sizes, strict=True)]


def describe_sources(sources: list[SourceFile], limit: int = 3) -> str:
    """Sources in words: `a.txt (10 bytes), b.txt (20 bytes) and 5 more files (1,234 bytes in all)`."""
    shown = ", ".join(s.describe() for s in sources[:limit])
    if len(sources) <= limit:
        return shown
    more = f"{shown} and {len(sources) - limit} more files"
    if any(s.bytes is None for s in sources):
        return more
    return f"{more} ({sum(s.bytes for s in sources):,} bytes in all)"


def split_settings(data: DataSettings, fmt: str, num_files: int = 1) -> dict[str, Any]:
    """The settings that decide which text the training split holds, and nothing else.

    With separate validation files the training text is all of the train files; otherwise the
    split method and fraction (and, for a random split, its seed) decide it. The format and the
    text field decide how the files are read, data.dedup which documents are left.
    """
    decisive: dict[str, Any] = {"format": fmt}
    if fmt != "text":
        decisive["text_field"] = data.text_field
    if data.dedup:  # fewer documents (absent when off: records from before data.dedup still match)
        decisive["dedup"] = True
    if data.validation_files:
        decisive["validation_split"] = "validation_files"
        return decisive
    method = data.split_method(num_files)  # "auto" as decided for these `num_files` train files
    decisive.update(validation_split=method, validation_fraction=data.validation_fraction)
    if method == "random":
        decisive["seed"] = data.seed
    return decisive


@dataclass
class TrainingData:
    """The training text of a tokenizer: which files, their fingerprint, how the split was made."""

    files: list[SourceFile]
    fingerprint: str  # content_fingerprint(..., portable=True) of the train files
    split: dict[str, Any]  # split_settings(...)
    train_bytes: int | None = None  # UTF-8 bytes of the train split, when it was read
    # A train split over tokenizer.train_max_bytes was sampled (tokenizer_sample.py): the plan
    # (max_bytes, doc_max_chars, seed) and the bytes and rows read; None = the whole split.
    sample: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        if record["sample"] is None:  # a record as before sampling existed: the whole split
            del record["sample"]
        return record

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> TrainingData:
        return cls(
            files=[SourceFile(str(f["name"]), int(f["bytes"])) for f in record.get("files", [])],
            fingerprint=str(record.get("fingerprint", "")),
            split=dict(record.get("split") or {}),
            train_bytes=record.get("train_bytes"),
            sample=record.get("sample"),
        )

    def same_text(self, other: TrainingData) -> bool:
        """True when both name the same file contents split the same way."""
        return self.fingerprint == other.fingerprint and self.split == other.split

    def describe(self) -> str:
        """The record in words: `tinyshakespeare.txt (1,115,394 bytes), train split 1,003,856 bytes`."""
        text = describe_sources(self.files)
        if self.train_bytes is not None and self.split.get("validation_split") != "validation_files":
            text += f", train split {self.train_bytes:,} bytes"
        if self.sample is not None:
            text += f", a sample of {self.sample['bytes']:,} bytes from {self.sample['rows']:,} rows across it"
        return text

    def differences(self, other: TrainingData) -> str:
        """How `other` (the config's data) differs from this record, in words."""
        if self.fingerprint != other.fingerprint:
            then, now = describe_sources(self.files), describe_sources(other.files)
            if then == now:  # same names and sizes, other bytes
                return f"{then} as it was then (its content has changed since)"
            return f"{then}, not on {now}"
        keys = self.split.keys() | other.split.keys()
        changed = sorted(k for k in keys if self.split.get(k) != other.split.get(k))
        details = ", ".join(
            f"data.{k} {self.split.get(k)!r} (this config: {other.split.get(k)!r})" for k in changed
        )
        return f"{describe_sources(self.files)} with {details}"


__all__ = [
    "SourceFile",
    "TrainingData",
    "content_fingerprint",
    "describe_sources",
    "fingerprint_sources",
    "list_sources",
    "split_settings",
]
