"""Find, load, check and split the raw text: user paths -> `datasets` with a `text` column.

Text files are read by `text_files` into rows of up to 64K characters (a file is one row, or
several cut after line ends), so joining the rows in order gives back the file (with universal
newlines: CRLF and CR become LF, as `datasets`' text loader reads in text mode). A text FILE is
one document. JSON lines, parquet and `save_to_disk` sources hold one document per row, read
from `text_field` (`datasets.load_dataset`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tqdm.auto import tqdm

from ..atomic import atomic_write_file
from ..console import datasets_progress_bars, plural
from ..distributed import is_main_process
from ..errors import ConfigError, DataError, MiniGPTUserError
from .digests import binary_verdicts
from .duplicates import (
    NUM_PERM,
    PREFIX_CHARS,
    SHINGLE_WORDS,
    THRESHOLD,
    DuplicateIndex,
    join_documents,
    minhash_scheme,
)
from .provenance import content_fingerprint
from .settings import FORMATS, DataSettings, seeded_unit
from .text_files import INVALID_CHARS, load_text_files, text_features

SUFFIX_FORMATS = {".jsonl": "json", ".json": "json", ".ndjson": "json", ".parquet": "parquet"}
LOCAL_FILES_BAR_THRESHOLD = 16  # datasets' DownloadManager draws a per-file bar from this many files
SCAN_BATCH_ROWS = 10_000  # rows per Arrow batch when scanning sizes and bad characters
SIZE_COLUMNS = ["doc", "bytes"]  # the columns of text-file rows that counting a split reads (not the text)
DEDUP_VERSION = 1  # bump when data.dedup removes other documents from the same inputs


@dataclass
class RawSplit:
    """One split of raw text: rows of a `text` column, with their sizes.

    Rows of text files also have `doc`, `end` (the row ends its document), `bytes`, `chars` and
    `invalid` (`text_files.text_features`); rows of other sources are whole documents.
    """

    name: str  # "train" or "validation"
    dataset: datasets.Dataset | datasets.IterableDataset
    rows: int  # number of rows
    bytes: int  # UTF-8 bytes of all its text (for bits per byte)
    documents: int  # documents with text in this split (a text file cut by the split counts in both)

    @property
    def by_document(self) -> bool:
        """Rows are pieces of documents, with an `end` column (text files), not whole documents."""
        return "end" in (self.dataset.column_names or [])

    def describe(self) -> str:
        return (
            f"the {self.name} split ({self.bytes:,} bytes, {self.rows:,} rows, {plural(self.documents, 'document')})"
        )


@dataclass
class RawCorpus:
    """The train and validation text a run trains and evaluates on."""

    train: RawSplit
    validation: RawSplit
    format: str  # "text", "json", "parquet" or "arrow"
    # data.dedup: what it removed, {pool: {"documents": before, "exact": n, "near": n}} with pool "corpus"
    # (before the split), or "validation" and "train" (separate files; train's "copies_of_validation")
    dedup: dict | None = None


@dataclass
class _Loaded:
    """A loaded source list before splitting."""

    dataset: datasets.Dataset | datasets.IterableDataset
    rows: int
    bytes: int
    documents: int


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """datasets in offline mode while it reads our local files: no Hub probe, no download count.

    HF_HUB_OFFLINE is read when datasets is imported, usually before MiniGPT runs, so the
    setting is switched for the duration of the load instead.
    """
    saved = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE = saved


def resolve_files(
    entries: str | list[str],
    role: str,
    exclude: Sequence[str] = (),
    cache_dir: str | Path | None = None,
    save: bool = True,
) -> list[Path]:
    """Expand files, folders and globs into a sorted list of files (a `save_to_disk` folder stays whole).

    A folder gives its text files only: hidden files and folders, compiled files (`__pycache__/`,
    `.pyc`, `.so`, ...), empty files and binaries (by their first bytes: a NUL or invalid UTF-8)
    are skipped, and so is whatever matches an `exclude` pattern (also in globs); one line says
    how many were skipped and why. Whether a file looks binary is read once per version of it
    (`digests.binary_verdicts`, kept under `cache_dir` when given; `save`: whether to write there).
    """
    entries = [entries] if isinstance(entries, str) else list(entries)
    found: list[Path] = []
    for entry in entries:
        path = Path(entry).expanduser()
        if any(char in entry for char in "*?["):
            matches = [Path(p) for p in sorted(glob.glob(str(path), recursive=True)) if Path(p).is_file()]
            matches = [p for p in matches if not _excluded(p, exclude)]
            if not matches:
                raise DataError(f"{role} path {entry!r}: no files match this pattern")
            found.extend(p for p in matches if p.stat().st_size > 0)
            if not any(p.stat().st_size > 0 for p in matches):
                raise DataError(f"{role} path {entry!r}: all matching files are empty")
        elif path.is_dir():
            if _is_saved_dataset(path):
                found.append(path)
                continue
            files, skipped = _folder_files(path, exclude, cache_dir, save)
            if not files:
                reasons = f" (skipped: {_describe_skips(skipped)})" if skipped else ""
                raise DataError(f"{role} folder {entry} is empty of text files{reasons}")
            if skipped:
                _say_once(
                    f"{role} folder {entry}: {plural(len(files), 'text file')}, skipped {sum(skipped.values()):,} "
                    f"({_describe_skips(skipped)})"
                )
            found.extend(files)
        elif path.is_file():
            if path.stat().st_size == 0:
                raise DataError(f"{role} file {entry} is empty")
            found.append(path)
        else:
            raise DataError(f"{role} path {entry} does not exist")
    if not found:
        raise DataError(f"no {role} data given")
    return found


COMPILED_SUFFIXES = frozenset(
    (".pyc", ".pyo", ".pyd", ".so", ".o", ".a", ".obj", ".dll", ".dylib", ".exe", ".class", ".jar", ".whl")
)
COMPILED_FOLDERS = frozenset(("__pycache__",))
SNIFF_BYTES = 8192  # bytes read from the start of a file in a folder to tell text from binary
BINARY_INVALID_SHARE = 0.1  # more undecodable characters than this in those bytes: a binary file
_said: set[str] = set()


def _folder_files(root: Path, exclude: Sequence[str], cache_dir, save: bool) -> tuple[list[Path], Counter]:
    """The text files of the folder `root` in `Path` order, and how many others were skipped, why.

    One `stat` per file that is not skipped by its name; its first bytes are read only when not
    known by that stat (`binary_verdicts`)."""
    skipped: Counter = Counter()
    candidates = []  # (path relative to root, its stat)
    for parts in sorted(_walk(str(root), ())):  # tuples of parts: the order of sorted Paths
        reason = _name_skip_reason(parts, exclude)
        relative = "/".join(parts)
        if reason is None:
            try:
                stat = os.stat(os.path.join(root, relative))
            except OSError:  # gone since it was listed
                continue
            if stat.st_size == 0:
                reason = "empty"
            else:
                candidates.append((relative, stat))
                continue
        skipped[reason] += 1
    binary = binary_verdicts(str(root), candidates, _looks_binary, cache_dir, save)
    skipped["binary"] += sum(binary)
    files = [root / relative for (relative, _), is_binary in zip(candidates, binary, strict=True) if not is_binary]
    return files, +skipped


def _walk(folder: str, parents: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """The regular files (or links to one) under `folder`, as tuples of path parts below it; links
    to folders are not followed (as `Path.rglob`)."""
    try:
        with os.scandir(folder) as listing:
            entries = list(listing)
    except PermissionError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                yield from _walk(entry.path, (*parents, entry.name))
            elif entry.is_file():
                yield (*parents, entry.name)
        except OSError:
            continue


def _name_skip_reason(parts: tuple[str, ...], exclude: Sequence[str]) -> str | None:
    """Why a file inside a folder corpus (its path parts below the folder) is skipped by its name."""
    if any(part.startswith(".") for part in parts):
        return "hidden"
    if exclude and _excluded(Path(*parts), exclude):
        return "excluded"
    if os.path.splitext(parts[-1])[1].lower() in COMPILED_SUFFIXES or COMPILED_FOLDERS.intersection(parts[:-1]):
        return "compiled"
    return None


def _excluded(path: Path, patterns: Sequence[str]) -> bool:
    """`path` matches a pattern (`*.log`, `tests/*`), or one of its folders does (`tests`, `docs*`)."""
    return any(
        path.match(pattern) or any(fnmatch.fnmatch(part, pattern) for part in path.parts[:-1])
        for pattern in patterns
    )


def _looks_binary(path: str) -> bool:
    """A NUL byte, or mostly undecodable bytes, in the first SNIFF_BYTES. Text in another encoding
    with a few bad bytes is read, and checked against data.max_invalid_utf8_fraction like any text."""
    with open(path, "rb") as handle:
        head = handle.read(SNIFF_BYTES)
    if b"\x00" in head:
        return True
    text = head.decode("utf-8", errors="replace")
    return text.count("\ufffd") > BINARY_INVALID_SHARE * max(1, len(text))


def _describe_skips(skipped: Counter) -> str:
    return ", ".join(f"{count:,} {reason}" for reason, count in sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0])))


def _say_once(line: str) -> None:
    """Print `line` once per process (a corpus is resolved several times during a run)."""
    if line not in _said and is_main_process():
        _said.add(line)
        print(line, flush=True)


def _is_saved_dataset(path: Path) -> bool:
    """A folder written by `Dataset.save_to_disk` or `DatasetDict.save_to_disk`."""
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def detect_format(paths: list[Path], requested: str = "auto") -> str:
    """The loader for `paths`: `requested` unless "auto", else from the folder kind or file suffix."""
    if requested not in FORMATS:
        raise ConfigError(f"data.format must be one of {', '.join(FORMATS)}, got {requested!r}")
    if requested == "chat":  # conversations are encoded by the chat stage (minigpt/chat/corpus.py)
        raise ConfigError(
            "data.format=chat is read by a chat run (scripts/train.py with model.init_from), not as text"
        )
    kinds = {"arrow" if p.is_dir() else SUFFIX_FORMATS.get(p.suffix.lower(), "text") for p in paths}
    if requested != "auto":
        if "arrow" in kinds and requested != "arrow":
            raise DataError(f"a save_to_disk folder cannot be read as data.format={requested!r}")
        return requested
    if len(kinds) > 1:
        raise DataError(f"the data mixes formats ({', '.join(sorted(kinds))}); give one kind per split")
    return kinds.pop()


def _load(paths: list[Path], fmt: str, settings: DataSettings, role: str) -> _Loaded:
    """Load `paths` with `datasets` into a `text` column (text files: `text_files`' rows); check that it is text."""
    fingerprint = content_fingerprint(paths, cache_dir=settings.cache_dir)
    names = ", ".join(str(p) for p in paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    with _offline():
        return _load_offline(paths, fmt, settings, role, fingerprint, names)


def _load_offline(
    paths: list[Path], fmt: str, settings: DataSettings, role: str, fingerprint: str, names: str
) -> _Loaded:
    # From 16 files on, datasets draws a "Downloading data: N files" bar for what are local paths
    # (no download happens); its bars for real work ("Generating train split") stay for fewer.
    show = settings.show_progress and (fmt == "text" or len(paths) < LOCAL_FILES_BAR_THRESHOLD)
    with datasets_progress_bars(show):
        return _load_local(paths, fmt, settings, role, fingerprint, names)


def _load_local(
    paths: list[Path], fmt: str, settings: DataSettings, role: str, fingerprint: str, names: str
) -> _Loaded:
    try:
        if fmt == "arrow":
            if len(paths) != 1:
                raise DataError(f"{role}: give one save_to_disk folder, got {len(paths)} paths")
            dataset = _load_saved(paths[0], role)
            if settings.streaming:
                dataset = dataset.to_iterable_dataset()
        elif fmt == "text":
            dataset = load_text_files(
                [str(p) for p in paths],
                cache_dir=str(Path(settings.cache_dir) / "datasets"),
                fingerprint=fingerprint,  # the files' names and bytes: an edit makes a new copy
                num_proc=settings.processes(),
                streaming=settings.streaming,
            )
            return _scan_text_rows(dataset, paths, settings)  # a stream is read (and can fail) here
        else:
            dataset = datasets.load_dataset(
                fmt,
                data_files=[str(p) for p in paths],
                split="train",
                # datasets keys its own cache on file paths and mtimes; a folder per content hash
                # also catches an edit that keeps the mtime (the stale Arrow copy is then never read).
                cache_dir=str(Path(settings.cache_dir) / "datasets" / fingerprint),
                streaming=settings.streaming,
            )
        dataset = _select_text_field(dataset, settings.text_field, role, names)
        return _scan_documents(dataset, paths, settings, role)  # a stream is read (and can fail) here
    except MiniGPTUserError:
        raise
    except (
        datasets.exceptions.DatasetGenerationError,
        pa.ArrowException,
        UnicodeDecodeError,
        ValueError,
    ) as err:
        cause = err.__cause__ or err
        raise DataError(f"cannot read {role} data {names} as {fmt}: {type(cause).__name__}: {cause}") from err


def _load_saved(path: Path, role: str) -> datasets.Dataset:
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        wanted = "train" if role == "train" else "validation"
        if len(loaded) == 1:
            return next(iter(loaded.values()))
        if wanted not in loaded:
            raise DataError(f"{role} folder {path} has splits {', '.join(loaded)} but no {wanted!r} split")
        return loaded[wanted]
    return loaded


def _select_text_field(dataset, field: str, role: str, names: str):
    if isinstance(dataset, datasets.IterableDataset) and dataset.features is None:
        dataset = dataset._resolve_features()  # a stream of JSON lines learns its columns from the first rows
    columns = dataset.column_names if dataset.column_names is not None else list(dataset.features or {})
    if field not in columns:
        raise DataError(
            f"{role} data {names} has no field {field!r} (fields: {', '.join(columns) or 'none'}); set data.text_field"
        )
    feature = dataset.features[field] if dataset.features else None
    if feature is not None and getattr(feature, "dtype", None) not in ("string", "large_string"):
        raise DataError(f"field {field!r} of {role} data {names} holds {feature}, not text")
    dataset = dataset.select_columns([field])
    return dataset.rename_column(field, "text") if field != "text" else dataset


def arrow_batches(
    dataset: datasets.Dataset | datasets.IterableDataset,
    start: int = 0,
    stop: int | None = None,
    batch_rows: int = SCAN_BATCH_ROWS,
    columns: list[str] | None = None,
) -> Iterator[pa.Table]:
    """Rows [start, stop) of a Dataset or IterableDataset as Arrow tables (memory: one batch), with
    only `columns` when given."""
    if columns is not None:
        dataset = dataset.select_columns(columns)
    if isinstance(dataset, datasets.Dataset):
        stop = dataset.num_rows if stop is None else int(stop)
        arrow = dataset.with_format("arrow")  # once: each with_format copies the dataset's description
        for begin in range(int(start), stop, batch_rows):
            yield arrow[begin : min(begin + batch_rows, stop)]
        return
    stream = dataset.skip(start) if start else dataset
    if stop is not None:
        stream = stream.take(stop - start)
    yield from stream.with_format("arrow").iter(batch_size=batch_rows)


def _numbers(table: pa.Table, column: str) -> np.ndarray:
    return table.column(column).to_numpy().astype(np.int64, copy=False)


def _too_invalid(where: object, chars: int, invalid: int, settings: DataSettings) -> DataError | None:
    if chars and invalid / chars > settings.max_invalid_utf8_fraction:
        return DataError(
            f"{where} does not look like UTF-8 text: {invalid / chars:.1%} of its characters are "
            f"undecodable or NUL (data.max_invalid_utf8_fraction={settings.max_invalid_utf8_fraction})"
        )
    return None


def _scan_text_rows(dataset, paths: list[Path], settings: DataSettings) -> _Loaded:
    """Sizes of text files' rows, and each file checked for undecodable text, from the counts taken
    as they were read (`text_files`): no pass over the text."""
    chars = np.zeros(len(paths), dtype=np.int64)
    invalid = np.zeros(len(paths), dtype=np.int64)
    rows = total = 0
    for table in arrow_batches(dataset, columns=["doc", "bytes", "chars", "invalid"]):
        doc = _numbers(table, "doc")
        chars += np.bincount(doc, weights=_numbers(table, "chars"), minlength=len(paths)).astype(np.int64)
        invalid += np.bincount(doc, weights=_numbers(table, "invalid"), minlength=len(paths)).astype(np.int64)
        rows, total = rows + table.num_rows, total + int(_numbers(table, "bytes").sum())
    for doc in np.flatnonzero(invalid):
        error = _too_invalid(paths[doc], int(chars[doc]), int(invalid[doc]), settings)
        if error is not None:
            raise error
    if total == 0:
        raise DataError(f"text files {', '.join(map(str, paths[:3]))} hold no text")
    return _Loaded(dataset, rows, total, int((chars > 0).sum()))


def _text_sizes(table: pa.Table) -> tuple[int, int, int]:
    """(UTF-8 bytes, characters, invalid characters) of a table's `text` column."""
    column = table.column("text")
    size = pc.sum(pc.binary_length(column)).as_py() or 0
    chars = pc.sum(pc.utf8_length(column)).as_py() or 0
    invalid = sum(pc.sum(pc.count_substring(column, pattern=bad)).as_py() or 0 for bad in INVALID_CHARS)
    return size, chars, invalid


def _scan_documents(dataset, paths: list[Path], settings: DataSettings, role: str) -> _Loaded:
    """Count rows and bytes of a source of documents, and refuse text that is mostly undecodable."""
    rows = size = chars = invalid = 0
    for table in arrow_batches(dataset):
        b, c, i = _text_sizes(table)
        rows, size, chars, invalid = rows + table.num_rows, size + b, chars + c, invalid + i
    error = _too_invalid(paths[0] if len(paths) == 1 else f"{role} data", chars, invalid, settings)
    if error is not None:
        raise error
    if size == 0:
        raise DataError(f"{role} data {', '.join(map(str, paths[:3]))} holds no text")
    return _Loaded(dataset, rows, size, rows)


def row_bytes(table: pa.Table) -> np.ndarray:
    """UTF-8 bytes of each row of an Arrow batch: the `bytes` column of text files' rows, else measured."""
    if "bytes" in table.column_names:
        return _numbers(table, "bytes")
    return pc.binary_length(table.column("text")).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def size_columns(dataset) -> list[str]:
    """The columns `_row_bytes` needs: never the text of text files' rows."""
    return SIZE_COLUMNS if "doc" in (dataset.column_names or []) else ["text"]


def _count(dataset) -> tuple[int, int, int]:
    """(rows, UTF-8 bytes, documents with text) of a split; text files' rows are counted by their
    `doc` column (a file's rows are consecutive), other rows are documents."""
    rows = size = documents = 0
    last_doc = -1
    for table in arrow_batches(dataset, columns=size_columns(dataset)):
        sizes = row_bytes(table)
        rows, size = rows + table.num_rows, size + int(sizes.sum())
        if "doc" in table.column_names:
            doc = _numbers(table, "doc")
            if len(doc):
                documents += int((np.diff(doc) != 0).sum()) + int(doc[0] != last_doc)
                last_doc = int(doc[-1])
        else:
            documents += int((sizes > 0).sum())
    return rows, size, documents


def _row_range(dataset, start: int, stop: int):
    if isinstance(dataset, datasets.Dataset):
        if stop <= start:
            return dataset.select([])  # datasets refuses an empty contiguous range at the end
        return dataset.select(range(start, stop))  # contiguous: no indices mapping
    stream = dataset.skip(start) if start else dataset
    return stream.take(stop - start)


def _tail_cut(loaded: _Loaded, fraction: float) -> tuple[int, dict | None, dict | None]:
    """Where the tail split cuts: (row, head, tail). Rows [0, row) go to train, rows after `row` to
    validation; `row` itself is split at the first line end at or after (1 - fraction) of the bytes
    into `head` (train) and `tail` (validation), or goes whole to train (head and tail None)."""
    target = loaded.bytes * (1.0 - fraction)
    seen, row = 0, 0
    for table in arrow_batches(loaded.dataset, columns=size_columns(loaded.dataset)):
        sizes = row_bytes(table)
        batch_total = int(sizes.sum())
        if seen + batch_total >= target:
            ends = seen + np.cumsum(sizes)  # bytes up to the end of each row
            k = int(np.searchsorted(ends, target, side="left"))
            row += k
            start = int(ends[k] - sizes[k])
            break
        seen, row = seen + batch_total, row + table.num_rows
    else:
        return loaded.rows, None, None
    if "end" not in (loaded.dataset.column_names or []):  # a document per row: cut after it
        return row + 1, None, None
    [record] = next(arrow_batches(loaded.dataset, row, row + 1)).to_pylist()
    data = record["text"].encode("utf-8")
    local = int(np.ceil(target - start))  # the cut is at a line end at or after this byte of the row
    newline = data.find(b"\n", max(local - 1, 0))
    cut = len(data) if newline < 0 else newline + 1
    if cut >= len(data):
        return row + 1, None, None
    head, tail = data[:cut].decode("utf-8"), data[cut:].decode("utf-8")  # cut after "\n": whole characters
    return row, _text_row(head, record["doc"], False), _text_row(tail, record["doc"], record["end"])


def _text_row(text: str, doc: int, end: bool) -> dict:
    invalid = sum(text.count(bad) for bad in INVALID_CHARS)
    return {"text": text, "doc": doc, "end": end, "bytes": len(text.encode()), "chars": len(text), "invalid": invalid}


def _with_row(dataset, row: dict, first: bool):
    """`dataset` with one more text-file row before (`first`) or after it."""
    one = datasets.Dataset.from_list([row], features=text_features())
    if isinstance(dataset, datasets.IterableDataset):
        one = one.to_iterable_dataset()
    return datasets.concatenate_datasets([one, dataset] if first else [dataset, one])


def _split_tail(loaded: _Loaded, fraction: float) -> tuple[RawSplit, RawSplit]:
    """Train = the first (1 - fraction) of the bytes, validation = the rest, cut at a line (or row) end."""
    row, head, tail = _tail_cut(loaded, fraction)
    train = _row_range(loaded.dataset, 0, row)
    validation = _row_range(loaded.dataset, row + (head is not None), loaded.rows)
    if head is not None:
        train, validation = _with_row(train, head, first=False), _with_row(validation, tail, first=True)
    return _counted("train", train), _counted("validation", validation)


def _counted(name: str, dataset) -> RawSplit:
    rows, size, documents = _count(dataset)
    return RawSplit(name, dataset, rows, size, documents)


def _in_validation(*columns_and_indices, seed: int, fraction: float, keep: bool) -> list[bool]:
    """`Dataset.filter` predicate: is each row's document in the validation set (== `keep`)?
    Called with (doc column, indices) for text files' rows, else (indices): a row is a document."""
    docs = np.asarray(columns_and_indices[0], dtype=np.int64)
    return list((seeded_unit(docs, seed) < fraction) == keep)


def _split_random(loaded: _Loaded, settings: DataSettings) -> tuple[RawSplit, RawSplit]:
    """Whole documents drawn for validation by a seeded hash of their index (same in streaming)."""
    by_document = "doc" in (loaded.dataset.column_names or [])
    splits = []
    for name, keep in (("train", False), ("validation", True)):
        kwargs = dict(seed=settings.seed, fraction=settings.validation_fraction, keep=keep)
        part = loaded.dataset.filter(
            _in_validation,
            batched=True,
            with_indices=True,
            input_columns=["doc"] if by_document else [],  # never the text
            fn_kwargs=kwargs,
            **({} if isinstance(loaded.dataset, datasets.IterableDataset) else {"desc": f"{name} documents"}),
        )
        splits.append(_counted(name, part))
    return splits[0], splits[1]


def source_files(settings: DataSettings, save: bool = True) -> tuple[list[Path], list[Path]]:
    """(train files, validation files) named by the settings, resolved and checked to exist (what
    a folder's files look like is remembered under data.cache_dir; `save`: whether to write there)."""
    known = dict(cache_dir=settings.cache_dir, save=save)
    train = resolve_files(settings.train_files, "train", settings.exclude, **known)
    validation = (
        resolve_files(settings.validation_files, "validation", settings.exclude, **known)
        if settings.validation_files
        else []
    )
    return train, validation


def load_raw_corpus(settings: DataSettings) -> RawCorpus:
    """Load, check and split the raw text named by `settings` (Arrow on disk, or streamed)."""
    settings.validate()
    train_paths, validation_paths = source_files(settings)
    fmt = detect_format(train_paths, settings.format)
    loaded = _load(train_paths, fmt, settings, "train")
    removed = None
    if validation_paths:
        val_fmt = detect_format(validation_paths, settings.format)
        other = _load(validation_paths, val_fmt, settings, "validation")
        if settings.dedup:  # the validation files stay whole but for their own copies; training loses its copies of them
            (other, loaded), removed = _deduplicated([other, loaded], [validation_paths, train_paths], fmt, settings)
        train = RawSplit("train", loaded.dataset, loaded.rows, loaded.bytes, loaded.documents)
        validation = RawSplit("validation", other.dataset, other.rows, other.bytes, other.documents)
    else:
        if settings.dedup:  # before the split: a document and its copies end up on one side, as one
            (loaded,), removed = _deduplicated([loaded], [train_paths], fmt, settings)
        if settings.split_method(len(train_paths)) == "tail":
            train, validation = _split_tail(loaded, settings.validation_fraction)
        else:
            train, validation = _split_random(loaded, settings)
    for split in (train, validation):
        if split.bytes == 0:
            raise DataError(
                f"the {split.name} split is empty ({fmt} data too small for data.validation_fraction="
                f"{settings.validation_fraction}, split {settings.split_method(len(train_paths))!r}); add text, "
                "give data.validation_files or set data.validation_split"
            )
    return RawCorpus(train, validation, fmt, removed)


def document_batches(dataset, picked: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, list]]:
    """A split's documents as batches of (keys, texts) for `duplicates.join_documents`.

    Rows of a source of documents are keyed by their position (only the sorted positions `picked`,
    when given). Rows of text files are keyed by their file (only the files `picked`), and of each
    file only the rows holding its first PREFIX_CHARS characters are read, found from the rows'
    sizes: a 10 GB file costs one row. A stream is read through (it cannot skip).
    """
    by_document = "doc" in (dataset.column_names or [])
    rows = _prefix_rows(dataset, picked) if by_document else picked
    columns = ["doc", "text"] if by_document else ["text"]
    if rows is not None and isinstance(dataset, datasets.Dataset):
        dataset, positions = dataset.select(rows), rows
    else:
        positions = None
    start = 0
    for table in arrow_batches(dataset, columns=columns):
        texts = table.column("text").to_pylist()
        if positions is not None:  # the rows selected
            index = positions[start : start + len(texts)]
        else:  # every row, or a stream's rows to sift
            index = np.arange(start, start + len(texts))
        start += len(texts)
        keys = _numbers(table, "doc") if by_document else index
        if positions is None and rows is not None:
            wanted = np.isin(index, rows)
            keys, texts = keys[wanted], [text for text, keep in zip(texts, wanted, strict=True) if keep]
        yield keys, texts


def _prefix_rows(dataset, picked: np.ndarray | None) -> np.ndarray:
    """The rows of text files' rows that hold each file's first PREFIX_CHARS characters (of the
    files `picked` only, when given), from the `doc` and `chars` columns alone."""
    rows, doc_seen, before, start = [], -1, 0, 0  # before: characters of the current file in rows before
    for table in arrow_batches(dataset, columns=["doc", "chars"]):
        docs, chars = _numbers(table, "doc"), _numbers(table, "chars")
        wanted = np.isin(docs, picked) if picked is not None else np.ones(len(docs), dtype=bool)
        for offset, (doc, size, keep) in enumerate(zip(docs.tolist(), chars.tolist(), wanted.tolist(), strict=True)):
            if doc != doc_seen:
                doc_seen, before = doc, 0
            if keep and before < PREFIX_CHARS:
                rows.append(start + offset)
            before += size
        start += len(docs)
    return np.asarray(rows, dtype=np.int64)


def _dedup_key(paths: list[list[Path]], fmt: str, settings: DataSettings) -> str:
    """What decides which documents data.dedup removes: the sources' bytes, in order (the first
    source's documents are kept before the next's), how they are read, the comparison."""
    decisive = {
        "inputs": [content_fingerprint(p, cache_dir=settings.cache_dir) for p in paths],
        "format": fmt,
        "text_field": None if fmt == "text" else settings.text_field,
        "comparison": [SHINGLE_WORDS, THRESHOLD, NUM_PERM, PREFIX_CHARS, minhash_scheme()],
        "version": DEDUP_VERSION,
    }
    return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:20]


def _dedup_decisions(splits: list[_Loaded], settings: DataSettings) -> dict:
    """Which documents data.dedup removes from each source list (its keys: rows, or text files), and
    why: the sources in order through one `DuplicateIndex`, a document removed when it copies one
    kept before it (in its own source list or an earlier one)."""
    index = DuplicateIndex()
    record: dict = {"removed": [], "pools": []}
    total = sum(loaded.documents for loaded in splits)
    with tqdm(total=total, desc="data.dedup: comparing documents", unit=" docs", disable=not settings.show_progress) as bar:
        for number, loaded in enumerate(splits):
            first_of_this = index.size  # documents of earlier source lists are numbered below this
            removed, counts = [], {"documents": loaded.documents, "exact": 0, "near": 0}
            earlier = 0
            for document in join_documents(document_batches(loaded.dataset)):
                copy = index.match(document)
                if copy is not None:
                    removed.append(document.key)
                    counts[copy.kind] += 1
                    earlier += copy.of < first_of_this
                bar.update(1)
            if number:  # training documents that copied a validation one
                counts["copies_of_validation"] = earlier
            record["removed"].append(removed)
            record["pools"].append(counts)
    return record


def _kept(*columns_and_indices, removed: np.ndarray) -> list[bool]:
    """`Dataset.filter` predicate: is each row's document (its `doc` column, or its index) kept?"""
    return list(~np.isin(np.asarray(columns_and_indices[0], dtype=np.int64), removed))


def _deduplicated(
    splits: list[_Loaded], paths: list[list[Path]], fmt: str, settings: DataSettings
) -> tuple[list[_Loaded], dict]:
    """`splits` without the documents data.dedup removes, and what it removed. The decisions are
    kept under data.cache_dir/dedup/ by the inputs' bytes: comparing every document is the costly
    part, and a run loads its corpus more than once (the tokenizer, then the blocks)."""
    cached = Path(settings.cache_dir) / "dedup" / f"{_dedup_key(paths, fmt, settings)}.json"
    if cached.is_file():
        record = json.loads(cached.read_text(encoding="utf-8"))
    else:
        record = _dedup_decisions(splits, settings)
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write_file(cached) as handle:
            json.dump(record, handle)
    kept = []
    for loaded, removed in zip(splits, record["removed"], strict=True):
        if removed:
            by_document = "doc" in (loaded.dataset.column_names or [])
            dataset = loaded.dataset.filter(
                _kept,
                batched=True,
                with_indices=True,
                input_columns=["doc"] if by_document else [],  # never the text
                fn_kwargs={"removed": np.asarray(removed, dtype=np.int64)},
                **({} if isinstance(loaded.dataset, datasets.IterableDataset) else {"desc": "data.dedup"}),
            )
            rows, size, documents = _count(dataset)
            loaded = _Loaded(dataset, rows, size, documents)
        kept.append(loaded)
    pools = record["pools"]
    removed_in_all = sum(p["exact"] + p["near"] for p in pools)
    _say_once(
        f"data.dedup: removed {plural(removed_in_all, 'document')} of {sum(p['documents'] for p in pools):,} "
        f"({sum(p['exact'] for p in pools):,} exact, {sum(p['near'] for p in pools):,} near copies)"
    )
    return kept, dict(zip(["validation", "train"] if len(pools) == 2 else ["corpus"], pools, strict=True))


def iter_texts(split: RawSplit) -> Iterator[str]:
    """The split's texts in order, one Arrow batch in memory at a time."""
    for table in arrow_batches(split.dataset, columns=["text"]):
        yield from (text for text in table.column("text").to_pylist() if text)


def iter_train_texts(settings: DataSettings) -> Iterable[str]:
    """The raw TRAIN-split texts named by `settings` (never the validation text), streamed."""
    return iter_texts(load_raw_corpus(settings).train)
