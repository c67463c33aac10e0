"""Find, load, check and split the raw text: user paths -> `datasets` with one `text` column.

Text files are loaded one line per row, line breaks kept, so joining the rows in order gives
back the file (with universal newlines: CRLF and CR become LF, as `datasets`' text loader
reads in text mode). A text FILE is one document. JSON lines, parquet and `save_to_disk`
sources hold one document per row, read from `text_field`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..distributed import is_main_process
from ..errors import ConfigError, DataError, MiniGPTUserError
from ..progress import datasets_progress_bars
from .provenance import content_fingerprint
from .settings import FORMATS, DataSettings, seeded_unit

SUFFIX_FORMATS = {".jsonl": "json", ".json": "json", ".ndjson": "json", ".parquet": "parquet"}
LOCAL_FILES_BAR_THRESHOLD = 16  # datasets' DownloadManager draws a per-file bar from this many files
SCAN_BATCH_ROWS = 10_000  # rows per Arrow batch when scanning sizes and bad characters
INVALID_CHARS = ("\ufffd", "\x00")  # what undecodable bytes become (errors="replace") and binary's NULs


@dataclass
class RawSplit:
    """One split of raw text: rows of a `text` column, with their sizes and document ends."""

    name: str  # "train" or "validation"
    dataset: datasets.Dataset | datasets.IterableDataset  # column "text"; lines of text files, or documents
    rows: int  # number of rows
    bytes: int  # UTF-8 bytes of all its text (for bits per byte)
    doc_ends: np.ndarray | None  # sorted row indices that end a document; None = every row is one

    @property
    def documents(self) -> int:
        """Documents with text in this split (a text file cut by the split counts in both)."""
        if self.doc_ends is None:
            return self.rows
        open_tail = self.rows > 0 and (len(self.doc_ends) == 0 or self.doc_ends[-1] != self.rows - 1)
        return len(self.doc_ends) + int(open_tail)

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


@dataclass
class _Loaded:
    """A loaded source list before splitting."""

    dataset: datasets.Dataset | datasets.IterableDataset
    rows: int
    bytes: int
    # rows per text file (a file is one document); None where every row is a document
    file_rows: list[int] | None


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


def resolve_files(entries: str | list[str], role: str, exclude: Sequence[str] = ()) -> list[Path]:
    """Expand files, folders and globs into a sorted list of files (a `save_to_disk` folder stays whole).

    A folder gives its text files only: hidden files and folders, compiled files (`__pycache__/`,
    `.pyc`, `.so`, ...), empty files and binaries (by their first bytes: a NUL or invalid UTF-8)
    are skipped, and so is whatever matches an `exclude` pattern (also in globs); one line says
    how many were skipped and why.
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
            files, skipped = [], Counter()
            for candidate in sorted(path.rglob("*")):
                if candidate.is_file():
                    reason = _skip_reason(candidate, path, exclude)
                    if reason is None:
                        files.append(candidate)
                    else:
                        skipped[reason] += 1
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


def plural(count: int, noun: str) -> str:
    """`1 document`, `2 documents`, `1,234 documents`."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _skip_reason(path: Path, root: Path, exclude: Sequence[str]) -> str | None:
    """Why a file inside a folder corpus is not read as text, or None to read it."""
    relative = path.relative_to(root)
    if any(part.startswith(".") for part in relative.parts):
        return "hidden"
    if _excluded(relative, exclude):
        return "excluded"
    if path.suffix.lower() in COMPILED_SUFFIXES or COMPILED_FOLDERS & set(relative.parts[:-1]):
        return "compiled"
    if path.stat().st_size == 0:
        return "empty"
    if _looks_binary(path):
        return "binary"
    return None


def _excluded(path: Path, patterns: Sequence[str]) -> bool:
    """`path` matches a pattern (`*.log`, `tests/*`), or one of its folders does (`tests`, `docs*`)."""
    return any(
        path.match(pattern) or any(fnmatch.fnmatch(part, pattern) for part in path.parts[:-1])
        for pattern in patterns
    )


def _looks_binary(path: Path) -> bool:
    """A NUL byte, or mostly undecodable bytes, in the first SNIFF_BYTES. Text in another encoding
    with a few bad bytes is read, and checked against data.max_invalid_utf8_fraction like any text."""
    with path.open("rb") as handle:
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
    kinds = {"arrow" if p.is_dir() else SUFFIX_FORMATS.get(p.suffix.lower(), "text") for p in paths}
    if requested != "auto":
        if "arrow" in kinds and requested != "arrow":
            raise DataError(f"a save_to_disk folder cannot be read as data.format={requested!r}")
        return requested
    if len(kinds) > 1:
        raise DataError(f"the data mixes formats ({', '.join(sorted(kinds))}); give one kind per split")
    return kinds.pop()


def _load(paths: list[Path], fmt: str, settings: DataSettings, role: str) -> _Loaded:
    """Load `paths` with `datasets` into one `text` column; check that it is text."""
    # datasets keys its own cache on file paths and mtimes; a folder per content hash also
    # catches an edit that keeps the mtime (the stale Arrow copy is then never read).
    cache_dir = str(Path(settings.cache_dir) / "datasets" / content_fingerprint(paths))
    names = ", ".join(str(p) for p in paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    with _offline():
        return _load_offline(paths, fmt, settings, role, cache_dir, names)


def _load_offline(
    paths: list[Path], fmt: str, settings: DataSettings, role: str, cache_dir: str, names: str
) -> _Loaded:
    # From 16 files on, datasets draws a "Downloading data: N files" bar for what are local paths
    # (no download happens); its bars for real work ("Generating train split") stay for fewer.
    with datasets_progress_bars(settings.show_progress and len(paths) < LOCAL_FILES_BAR_THRESHOLD):
        return _load_local(paths, fmt, settings, role, cache_dir, names)


def _load_local(
    paths: list[Path], fmt: str, settings: DataSettings, role: str, cache_dir: str, names: str
) -> _Loaded:
    try:
        if fmt == "arrow":
            if len(paths) != 1:
                raise DataError(f"{role}: give one save_to_disk folder, got {len(paths)} paths")
            dataset = _load_saved(paths[0], role)
            if settings.streaming:
                dataset = dataset.to_iterable_dataset()
        elif fmt == "text":
            dataset = _load_text(paths, settings, cache_dir)
        else:
            dataset = datasets.load_dataset(
                fmt,
                data_files=[str(p) for p in paths],
                split="train",
                cache_dir=cache_dir,
                streaming=settings.streaming,
            )
        if fmt != "text":
            dataset = _select_text_field(dataset, settings.text_field, role, names)
        return _scan(dataset, paths, fmt, settings, role)  # a stream is read (and can fail) here
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


def _load_text(
    paths: list[Path], settings: DataSettings, cache_dir: str
) -> datasets.Dataset | datasets.IterableDataset:
    # Record rows per input file (a file is a document) in the split info. A datasets flag, read
    # at generation time; a cached generation made without it lacks the counts, so regenerate then.
    datasets.config.SAVE_ORIGINAL_SHARD_LENGTHS = True
    kwargs = dict(
        data_files=[str(p) for p in paths],
        split="train",
        keep_linebreaks=True,  # rows joined in order give back the text
        encoding_errors="replace",  # undecodable bytes become U+FFFD, counted against the tolerance
        cache_dir=cache_dir,
        streaming=settings.streaming,
    )
    dataset = datasets.load_dataset("text", **kwargs)
    if not settings.streaming and len(paths) > 1 and _file_rows(dataset, len(paths)) is None:
        dataset = datasets.load_dataset("text", download_mode="force_redownload", **kwargs)
    return dataset


def _file_rows(dataset: datasets.Dataset, num_files: int) -> list[int] | None:
    """Rows per input file of a loaded text split (None if `datasets` did not record them)."""
    if num_files == 1:
        return [dataset.num_rows]
    lengths = dataset.info.splits["train"].original_shard_lengths if dataset.info.splits else None
    if lengths is None:
        return None
    lengths = list(lengths) + [0] * (num_files - len(lengths))  # trailing files without rows
    return lengths if sum(lengths) == dataset.num_rows else None


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
) -> Iterator[pa.Table]:
    """Rows [start, stop) of a Dataset or IterableDataset as Arrow tables (memory: one batch)."""
    if isinstance(dataset, datasets.Dataset):
        stop = dataset.num_rows if stop is None else int(stop)
        arrow = dataset.with_format("arrow")
        for begin in range(int(start), stop, batch_rows):
            yield arrow[begin : min(begin + batch_rows, stop)]
        return
    stream = dataset.skip(start) if start else dataset
    if stop is not None:
        stream = stream.take(stop - start)
    yield from stream.with_format("arrow").iter(batch_size=batch_rows)


def _text_sizes(table: pa.Table) -> tuple[int, int, int]:
    """(UTF-8 bytes, characters, invalid characters) of a table's `text` column."""
    column = table.column("text")
    size = pc.sum(pc.binary_length(column)).as_py() or 0
    chars = pc.sum(pc.utf8_length(column)).as_py() or 0
    invalid = sum(pc.sum(pc.count_substring(column, pattern=bad)).as_py() or 0 for bad in INVALID_CHARS)
    return size, chars, invalid


def _scan(dataset, paths: list[Path], fmt: str, settings: DataSettings, role: str) -> _Loaded:
    """Count rows and bytes, and refuse text that is mostly undecodable (binary or not UTF-8)."""
    if fmt == "text":
        if isinstance(dataset, datasets.Dataset):
            file_rows = _file_rows(dataset, len(paths))
            if file_rows is None:
                raise DataError(f"{role}: datasets did not record rows per file; clear {settings.cache_dir}")
            offsets = np.concatenate([[0], np.cumsum(file_rows)])
            parts = [
                (paths[i], lambda i=i: arrow_batches(dataset, offsets[i], offsets[i + 1]))
                for i in range(len(paths))
            ]
        else:  # a stream has one shard per file, in order
            if dataset.num_shards != len(paths):
                raise DataError(f"{role}: expected one stream shard per file, got {dataset.num_shards}")
            parts = [
                (paths[i], lambda i=i: arrow_batches(dataset.shard(len(paths), i))) for i in range(len(paths))
            ]
    else:
        parts = [(paths[0] if len(paths) == 1 else f"{role} data", lambda: arrow_batches(dataset))]
    rows, total_bytes, part_rows = 0, 0, []
    for where, batches in parts:
        n, size, chars, invalid = 0, 0, 0, 0
        for table in batches():
            b, c, i = _text_sizes(table)
            n, size, chars, invalid = n + table.num_rows, size + b, chars + c, invalid + i
        if chars and invalid / chars > settings.max_invalid_utf8_fraction:
            raise DataError(
                f"{where} does not look like UTF-8 text: {invalid / chars:.1%} of its characters are "
                f"undecodable or NUL (data.max_invalid_utf8_fraction={settings.max_invalid_utf8_fraction})"
            )
        rows, total_bytes = rows + n, total_bytes + size
        part_rows.append(n)
    if total_bytes == 0:
        raise DataError(f"{role} data {', '.join(map(str, paths[:3]))} holds no text")
    return _Loaded(dataset, rows, total_bytes, part_rows if fmt == "text" else None)


def _row_bytes(table: pa.Table) -> np.ndarray:
    return pc.binary_length(table.column("text")).fill_null(0).to_numpy(zero_copy_only=False)


def _tail_boundary(loaded: _Loaded, fraction: float) -> tuple[int, int]:
    """(row, bytes before it) of the first row boundary at or after (1 - fraction) of the bytes."""
    target = loaded.bytes * (1.0 - fraction)
    seen, row = 0, 0
    for table in arrow_batches(loaded.dataset):
        sizes = _row_bytes(table)
        batch_total = int(sizes.sum())
        if seen + batch_total >= target:
            ends = seen + np.cumsum(sizes)  # bytes up to the end of each row
            k = int(np.searchsorted(ends, target, side="left"))
            return row + k + 1, int(ends[k])
        seen, row = seen + batch_total, row + table.num_rows
    return loaded.rows, loaded.bytes


def _doc_ends_within(file_rows: list[int] | None, start: int, stop: int) -> np.ndarray | None:
    """Row indices (relative to `start`) in [start, stop) that end a text file."""
    if file_rows is None:
        return None
    ends = np.cumsum(np.asarray(file_rows, dtype=np.int64)) - 1
    ends = ends[(ends >= start) & (ends < stop) & (np.asarray(file_rows) > 0)]
    return ends - start


def _row_range(dataset, start: int, stop: int):
    if isinstance(dataset, datasets.Dataset):
        if stop <= start:
            return dataset.select([])  # datasets refuses an empty contiguous range at the end
        return dataset.select(range(start, stop))  # contiguous: no indices mapping
    stream = dataset.skip(start) if start else dataset
    return stream.take(stop - start)


def _split_tail(loaded: _Loaded, fraction: float) -> tuple[RawSplit, RawSplit]:
    """Train = the first (1 - fraction) of the bytes, validation = the rest, cut at a row boundary."""
    cut, cut_bytes = _tail_boundary(loaded, fraction)
    train = RawSplit(
        "train",
        _row_range(loaded.dataset, 0, cut),
        cut,
        cut_bytes,
        _doc_ends_within(loaded.file_rows, 0, cut),
    )
    validation = RawSplit(
        "validation",
        _row_range(loaded.dataset, cut, loaded.rows),
        loaded.rows - cut,
        loaded.bytes - cut_bytes,
        _doc_ends_within(loaded.file_rows, cut, loaded.rows),
    )
    return train, validation


def _in_validation(
    batch: dict, indices: list[int], *, row_doc: np.ndarray | None, seed: int, fraction: float, keep: bool
) -> list[bool]:
    """`Dataset.filter` predicate: is each row's document in the validation set (== `keep`)?"""
    idx = np.asarray(indices, dtype=np.int64)
    docs = idx if row_doc is None else row_doc[idx]
    return list((seeded_unit(docs, seed) < fraction) == keep)


def _split_random(loaded: _Loaded, settings: DataSettings) -> tuple[RawSplit, RawSplit]:
    """Whole documents drawn for validation by a seeded hash of their index (same in streaming)."""
    if loaded.file_rows is not None:
        file_rows = np.asarray(loaded.file_rows, dtype=np.int64)
        row_doc = np.repeat(np.arange(len(file_rows)), file_rows)  # document (= file) of each row
        picked = seeded_unit(np.arange(len(file_rows)), settings.seed) < settings.validation_fraction
    else:
        row_doc, picked = None, None
    splits = []
    for name, keep in (("train", False), ("validation", True)):
        kwargs = dict(row_doc=row_doc, seed=settings.seed, fraction=settings.validation_fraction, keep=keep)
        part = loaded.dataset.filter(_in_validation, batched=True, with_indices=True, fn_kwargs=kwargs)
        rows, size = 0, 0
        for table in arrow_batches(part):
            rows, size = rows + table.num_rows, size + int(_row_bytes(table).sum())
        doc_ends = None
        if picked is not None:
            kept = file_rows[picked == keep]
            doc_ends = (np.cumsum(kept) - 1)[kept > 0]
        splits.append(RawSplit(name, part, rows, size, doc_ends))
    return splits[0], splits[1]


def _whole_split(name: str, loaded: _Loaded) -> RawSplit:
    """All of `loaded` as one split (separate train and validation files)."""
    doc_ends = _doc_ends_within(loaded.file_rows, 0, loaded.rows)
    return RawSplit(name, loaded.dataset, loaded.rows, loaded.bytes, doc_ends)


def source_files(settings: DataSettings) -> tuple[list[Path], list[Path]]:
    """(train files, validation files) named by the settings, resolved and checked to exist."""
    train = resolve_files(settings.train_files, "train", settings.exclude)
    validation = (
        resolve_files(settings.validation_files, "validation", settings.exclude) if settings.validation_files else []
    )
    return train, validation


def load_raw_corpus(settings: DataSettings) -> RawCorpus:
    """Load, check and split the raw text named by `settings` (Arrow on disk, or streamed)."""
    settings.validate()
    train_paths, validation_paths = source_files(settings)
    fmt = detect_format(train_paths, settings.format)
    loaded = _load(train_paths, fmt, settings, "train")
    if validation_paths:
        val_fmt = detect_format(validation_paths, settings.format)
        other = _load(validation_paths, val_fmt, settings, "validation")
        train, validation = _whole_split("train", loaded), _whole_split("validation", other)
    elif settings.split_method(len(train_paths)) == "tail":
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
    return RawCorpus(train, validation, fmt)


def iter_texts(split: RawSplit) -> Iterator[str]:
    """The split's texts in order, one Arrow batch in memory at a time."""
    for table in arrow_batches(split.dataset):
        yield from (text for text in table.column("text").to_pylist() if text)


def iter_train_texts(settings: DataSettings) -> Iterable[str]:
    """The raw TRAIN-split texts named by `settings` (never the validation text), streamed."""
    return iter_texts(load_raw_corpus(settings).train)
