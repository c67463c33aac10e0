"""The data files a run names, found, checked and fingerprinted once: `find_sources` -> `Sources`.
Standard library only: a bad file is one `error:` line before `datasets` or torch are imported."""

from __future__ import annotations

import codecs
import fnmatch
import glob
import hashlib
import itertools
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..console import plural
from ..distributed import is_main_process
from ..errors import DataError
from .settings import DataSettings

SUFFIX_FORMATS = {".jsonl": "json", ".json": "json", ".ndjson": "json", ".parquet": "parquet"}
COMPILED_SUFFIXES = frozenset(
    (".pyc", ".pyo", ".pyd", ".so", ".o", ".a", ".obj", ".dll", ".dylib", ".exe", ".class", ".jar", ".whl")
)
INVALID_CHARS = ("\ufffd", "\x00")  # what undecodable bytes become (errors="replace") and binary's NULs
SNIFF_BYTES = 8192  # bytes read from a file's start to tell text from binary, and a sample's unit
BINARY_INVALID_SHARE = 0.1  # a folder's file with more undecodable characters than this at its start is binary
# Inputs up to this size are hashed whole (an edit anywhere is seen); larger ones by evenly spaced
# samples of each file (at least its first SNIFF_BYTES) plus its modification time, so a start on a
# 10 GB corpus reads megabytes, not the corpus.
WHOLE_HASH_BYTES = 64 << 20


@dataclass(frozen=True)
class SourceFile:
    """One data source as records and published configs name it: no folder of the machine."""

    name: str  # relative to the folder or glob given (a file given by path: its name)
    bytes: int | None  # size on disk (a `save_to_disk` folder: all its files); None = not found

    def describe(self) -> str:
        return f"{self.name} ({self.bytes:,} bytes)" if self.bytes is not None else f"{self.name} (size unknown)"


def describe_sources(sources: list[SourceFile], limit: int = 3) -> str:
    """`a.txt (10 bytes), b.txt (20 bytes) and 5 more files (1,234 bytes in all)`."""
    shown = ", ".join(s.describe() for s in sources[:limit])
    if len(sources) <= limit:
        return shown
    more = f"{shown} and {len(sources) - limit} more files"
    if any(s.bytes is None for s in sources):
        return more
    return f"{more} ({sum(s.bytes for s in sources):,} bytes in all)"


@dataclass(frozen=True)
class SourceList:
    """The files of one split."""

    paths: list[Path]
    files: list[SourceFile]  # the same files by name and size
    format: str  # "text", "json", "parquet", "arrow" or "chat"
    fingerprint: str  # file names, sizes and bytes: the same data in another folder has the same one
    key: str  # the fingerprint plus the modification times of files hashed by samples: keys the caches


@dataclass(frozen=True)
class Sources:
    """What `settings` names, resolved, checked and fingerprinted."""

    settings: DataSettings
    train: SourceList
    validation: SourceList | None  # None: validation is split off the train files

    @property
    def key(self) -> str:
        return self.train.key + (self.validation.key if self.validation else "")


def find_sources(settings: DataSettings) -> Sources:
    """The train and validation files of `settings`; `DataError` (one line) for a path that names
    nothing, an empty file, or one whose start is not UTF-8 text."""
    settings.validate()
    train = _source_list(settings.train_files, "train", settings)
    validation = _source_list(settings.validation_files, "validation", settings) if settings.validation_files else None
    return Sources(settings, train, validation)


def _source_list(entries: list[str], role: str, settings: DataSettings) -> SourceList:
    found = resolve_files(entries, role, settings.exclude)
    paths = [path for path, _ in found]
    fmt = "chat" if settings.format == "chat" else detect_format(paths, settings.format)
    members = [(i, file, file.stat()) for i, path in enumerate(paths) for file in _members(path)]
    total = sum(stat.st_size for _, _, stat in members)
    share = None if total <= WHOLE_HASH_BYTES else max(SNIFF_BYTES, WHOLE_HASH_BYTES // len(members))
    fingerprint, key, sizes = hashlib.sha256(), hashlib.sha256(), [0] * len(paths)
    for i, file, stat in members:
        path = paths[i]
        name = path.name if file == path else f"{path.name}/{file.relative_to(path).as_posix()}"
        checked = settings if fmt in ("text", "json", "chat") and file == path else None
        digest, whole = _digest(file, stat.st_size, share, checked)
        fingerprint.update(f"{name}\0{stat.st_size}\0".encode() + digest)
        if not whole:
            key.update(f"{name}\0{stat.st_mtime_ns}\0".encode())
        sizes[i] += stat.st_size
    fingerprint_hex = fingerprint.hexdigest()[:16]
    key.update(fingerprint_hex.encode())
    files = [SourceFile(name, size) for (_, name), size in zip(found, sizes, strict=True)]
    return SourceList(paths, files, fmt, fingerprint_hex, key.hexdigest()[:16] if share else fingerprint_hex)


def _members(path: Path) -> list[Path]:
    """`path`, or every file of a `save_to_disk` folder, in a stable order."""
    return sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]


def _digest(file: Path, size: int, share: int | None, settings: DataSettings | None) -> tuple[bytes, bool]:
    """(SHA-256 of `file`, or of evenly spaced samples when it is larger than `share`; whether whole).
    With `settings`, the file's start is checked to be UTF-8 text first."""
    digest = hashlib.sha256()
    with open(file, "rb") as handle:
        head = handle.read(SNIFF_BYTES)
        if settings is not None:
            text = codecs.getincrementaldecoder("utf-8")("replace").decode(head, final=len(head) < SNIFF_BYTES)
            invalid = sum(text.count(bad) for bad in INVALID_CHARS)  # its start: all of it is checked as it loads
            if (error := invalid_text(file, len(text), invalid, settings.max_invalid_utf8_fraction)) is not None:
                raise error
        digest.update(head)
        if share is None or size <= share:
            while block := handle.read(1 << 20):
                digest.update(block)
            return digest.digest(), True
        count = share // SNIFF_BYTES  # samples, the head first, evenly spaced to the file's end
        for k in range(1, count):
            handle.seek(k * (size - SNIFF_BYTES) // (count - 1))
            digest.update(handle.read(SNIFF_BYTES))
    return digest.digest(), False


def invalid_text(where: object, chars: int, invalid: int, max_fraction: float) -> DataError | None:
    """The error for text whose share of undecodable or NUL characters (`INVALID_CHARS`) is over
    `max_fraction` (data.max_invalid_utf8_fraction), or None."""
    if chars and invalid / chars > max_fraction:
        return DataError(
            f"{where} does not look like UTF-8 text: {invalid / chars:.1%} of its characters are "
            f"undecodable or NUL (data.max_invalid_utf8_fraction={max_fraction})"
        )
    return None


def resolve_files(entries: list[str], role: str, exclude: Sequence[str] = ()) -> list[tuple[Path, str]]:
    """Files, folders and globs as (file, its name relative to the folder or glob given), in order (a
    `save_to_disk` folder stays whole); a folder gives its text files only (docs/data.md, "Formats")."""
    found: list[tuple[Path, str]] = []
    for entry in entries:
        path = Path(entry).expanduser()
        if any(char in entry for char in "*?["):
            base = Path(*itertools.takewhile(lambda part: not glob.has_magic(part), path.parts))  # before the wildcard
            matches = [Path(p) for p in sorted(glob.glob(str(path), recursive=True)) if Path(p).is_file()]
            matches = [p for p in matches if not _excluded(p, exclude)]
            if not matches:
                raise DataError(f"{role} path {entry!r}: no files match this pattern")
            matches = [p for p in matches if p.stat().st_size > 0]
            if not matches:
                raise DataError(f"{role} path {entry!r}: all matching files are empty")
            found += [(p, p.relative_to(base).as_posix() if p.is_relative_to(base) else p.name) for p in matches]
        elif path.is_dir():
            if (path / "state.json").is_file() or (path / "dataset_dict.json").is_file():  # save_to_disk
                found.append((path, path.name))
                continue
            files, skipped = _folder_files(path, exclude)
            if not files:
                reasons = f" (skipped: {_describe_skips(skipped)})" if skipped else ""
                raise DataError(f"{role} folder {entry} is empty of text files{reasons}")
            if skipped and is_main_process():
                print(f"{role} folder {entry}: {plural(len(files), 'text file')}, skipped {sum(skipped.values()):,} "
                      f"({_describe_skips(skipped)})", flush=True)
            found += [(path / relative, relative) for relative in files]
        elif path.is_file():
            if path.stat().st_size == 0:
                raise DataError(f"{role} file {entry} is empty")
            found.append((path, path.name))
        else:
            raise DataError(f"{role} path {entry} does not exist")
    if not found:
        raise DataError(f"no {role} data given")
    return found


def list_sources(entries: list[str], role: str, exclude: Sequence[str] = ()) -> list[SourceFile]:
    """The files `entries` name, by name and size, without reading them (what a published config says)."""
    return [
        SourceFile(name, sum(f.stat().st_size for f in _members(path))) for path, name in resolve_files(entries, role, exclude)
    ]


def _folder_files(root: Path, exclude: Sequence[str]) -> tuple[list[str], Counter]:
    """The text files of the folder `root` (paths relative to it, in `Path` order) and how many
    others were skipped, by reason."""
    skipped: Counter = Counter()
    files = []
    # tuples of parts, sorted: the order of sorted Paths (links to folders are not followed, as rglob)
    for parts in sorted((*Path(os.path.relpath(d, root)).parts, name) for d, _, names in os.walk(root) for name in names):
        relative = "/".join(parts)
        reason = _skip_reason(parts, exclude)
        if reason is None:
            try:
                reason = "empty" if os.stat(root / relative).st_size == 0 else "binary" if _looks_binary(root / relative) else None
            except OSError:  # gone since it was listed
                continue
        if reason is None:
            files.append(relative)
        else:
            skipped[reason] += 1
    return files, skipped


def _skip_reason(parts: tuple[str, ...], exclude: Sequence[str]) -> str | None:
    """Why a file of a folder corpus (its path parts below the folder) is skipped by its name."""
    if any(part.startswith(".") for part in parts):
        return "hidden"
    if exclude and _excluded(Path(*parts), exclude):
        return "excluded"
    if os.path.splitext(parts[-1])[1].lower() in COMPILED_SUFFIXES or "__pycache__" in parts[:-1]:
        return "compiled"
    return None


def _excluded(path: Path, patterns: Sequence[str]) -> bool:
    """`path` matches a pattern (`*.log`, `tests/*`), or one of its folders does (`tests`, `docs*`)."""
    return any(
        path.match(pattern) or any(fnmatch.fnmatch(part, pattern) for part in path.parts[:-1]) for pattern in patterns
    )


def _looks_binary(path: Path) -> bool:
    """A NUL byte, or mostly undecodable bytes, in the first SNIFF_BYTES."""
    with open(path, "rb") as handle:
        head = handle.read(SNIFF_BYTES)
    text = head.decode("utf-8", errors="replace")
    return b"\x00" in head or text.count("\ufffd") > BINARY_INVALID_SHARE * max(1, len(text))


def _describe_skips(skipped: Counter) -> str:
    return ", ".join(f"{count:,} {reason}" for reason, count in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])))


def detect_format(paths: list[Path], requested: str = "auto") -> str:
    """The loader for `paths`: `requested` unless "auto", else from the folder kind or file suffix."""
    kinds = {"arrow" if p.is_dir() else SUFFIX_FORMATS.get(p.suffix.lower(), "text") for p in paths}
    if requested != "auto":
        if "arrow" in kinds and requested != "arrow":
            raise DataError(f"a save_to_disk folder cannot be read as data.format={requested!r}")
        return requested
    if len(kinds) > 1:
        raise DataError(f"the data mixes formats ({', '.join(sorted(kinds))}); give one kind per split")
    return kinds.pop()
