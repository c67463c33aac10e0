"""The raw train and validation text of `Sources`: loaded with `datasets`, checked, deduplicated and
split. A text file is one document (`text_rows`); JSON lines, parquet and `save_to_disk` rows are one
each. The tail split cuts off the last bytes at a line end; the random split draws whole documents."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..console import datasets_progress_bars
from ..errors import DataError, MiniGPTUserError
from .duplicates import deduplicated
from .settings import DataSettings, seeded_unit
from .sources import SourceList, Sources, detect_format, invalid_text
from .text_rows import (
    INVALID_CHARS,
    RawSplit,
    arrow_batches,
    counted,
    keep_documents,
    load_text_files,
    numbers,
    row_bytes,
    size_columns,
    text_features,
    text_row,
)

LOCAL_FILES_BAR_THRESHOLD = 16  # datasets' DownloadManager draws a "download" bar from this many local files


@dataclass
class RawCorpus:
    """The train and validation text a run trains and evaluates on."""

    train: RawSplit
    validation: RawSplit
    format: str  # "text", "json", "parquet" or "arrow"
    # data.dedup: what it removed, {pool: {"documents": before, "exact": n, "near": n}} with pool "corpus"
    # (before the split), or "validation" and "train" (separate files; train's "copies_of_validation")
    dedup: dict | None = None


def load_raw_corpus(sources: Sources) -> RawCorpus:
    """Load, check, deduplicate and split the raw text of `sources` (Arrow on disk, or streamed)."""
    settings = sources.settings
    detect_format(sources.train.paths, settings.format)  # conversations are no text
    loaded = _load(sources.train, settings, "train")
    removed = None
    if sources.validation is not None:
        other = _load(sources.validation, settings, "validation")
        if settings.dedup:  # the validation files stay whole but for their own copies; training loses its copies of them
            (other, loaded), removed = deduplicated([other, loaded], [sources.validation, sources.train], settings)
        train, validation = loaded, other
        method = "validation_files"
    else:
        if settings.dedup:  # before the split: a document and its copies end up on one side, as one
            (loaded,), removed = deduplicated([loaded], [sources.train], settings)
        method = settings.split_method(len(sources.train.paths))
        train, validation = _split_tail(loaded, settings.validation_fraction) if method == "tail" else _split_random(loaded, settings)
    for split in (train, validation):
        if split.bytes == 0:
            raise DataError(
                f"the {split.name} split is empty ({sources.train.format} data too small for data.validation_fraction="
                f"{settings.validation_fraction}, split {method!r}); add text, give data.validation_files or set "
                "data.validation_split"
            )
    return RawCorpus(train, validation, sources.train.format, removed)


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """datasets offline while it reads local files (no Hub probe): HF_HUB_OFFLINE is read at its import."""
    saved = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE = saved


def _load(source: SourceList, settings: DataSettings, role: str) -> RawSplit:
    """`source` as rows of a `text` column, checked to be text."""
    paths, fmt = source.paths, source.format
    names = ", ".join(str(p) for p in paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    # from 16 files on, datasets draws a "Downloading data" bar for local paths: no work to watch
    show = settings.show_progress and (fmt == "text" or len(paths) < LOCAL_FILES_BAR_THRESHOLD)
    try:
        with _offline(), datasets_progress_bars(show):
            if fmt == "text":
                dataset = load_text_files(
                    [str(p) for p in paths], str(Path(settings.cache_dir) / "datasets"), source.key,
                    settings.processes(), settings.streaming,
                )
                return _checked_text_rows(dataset, paths, settings, role)  # a stream is read (and can fail) here
            if fmt == "arrow":
                if len(paths) != 1:
                    raise DataError(f"{role}: give one save_to_disk folder, got {len(paths)} paths")
                dataset = _load_saved(paths[0], role)
                dataset = dataset.to_iterable_dataset() if settings.streaming else dataset
            else:
                dataset = datasets.load_dataset(
                    fmt,
                    data_files=[str(p) for p in paths],
                    split="train",
                    # a folder per content key: an edit that keeps the mtime (datasets' own key) is seen too
                    cache_dir=str(Path(settings.cache_dir) / "datasets" / source.key),
                    streaming=settings.streaming,
                )
            dataset = _text_field(dataset, settings.text_field, role, names)
            return _checked_documents(dataset, paths, settings, role)  # a stream is read (and can fail) here
    except MiniGPTUserError:
        raise
    except (datasets.exceptions.DatasetGenerationError, pa.ArrowException, UnicodeDecodeError, ValueError) as err:
        cause = err.__cause__ or err
        raise DataError(f"cannot read {role} data {names} as {fmt}: {type(cause).__name__}: {cause}") from err


def _load_saved(path: Path, role: str) -> datasets.Dataset:
    loaded = datasets.load_from_disk(str(path))
    if not isinstance(loaded, datasets.DatasetDict):
        return loaded
    if len(loaded) > 1 and role not in loaded:
        raise DataError(f"{role} folder {path} has splits {', '.join(loaded)} but no {role!r} split")
    return loaded[role] if role in loaded else next(iter(loaded.values()))


def _text_field(dataset, field: str, role: str, names: str):
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


def _checked_text_rows(dataset, paths: list[Path], settings: DataSettings, role: str) -> RawSplit:
    """Text files' rows counted and each file checked, from the counts taken as they were read."""
    chars = np.zeros(len(paths), dtype=np.int64)
    invalid = np.zeros(len(paths), dtype=np.int64)
    rows = total = 0
    for table in arrow_batches(dataset, columns=["doc", "bytes", "chars", "invalid"]):
        doc = numbers(table, "doc")
        chars += np.bincount(doc, weights=numbers(table, "chars"), minlength=len(paths)).astype(np.int64)
        invalid += np.bincount(doc, weights=numbers(table, "invalid"), minlength=len(paths)).astype(np.int64)
        rows, total = rows + table.num_rows, total + int(numbers(table, "bytes").sum())
    for doc in np.flatnonzero(invalid):
        if (error := invalid_text(paths[doc], int(chars[doc]), int(invalid[doc]), settings)) is not None:
            raise error
    return RawSplit(role, dataset, rows, total, int((chars > 0).sum()))


def _checked_documents(dataset, paths: list[Path], settings: DataSettings, role: str) -> RawSplit:
    """A source of documents counted; mostly undecodable text refused."""
    rows = size = chars = invalid = 0
    for table in arrow_batches(dataset):
        column = table.column("text")
        rows += table.num_rows
        size += pc.sum(pc.binary_length(column)).as_py() or 0
        chars += pc.sum(pc.utf8_length(column)).as_py() or 0
        invalid += sum(pc.sum(pc.count_substring(column, pattern=bad)).as_py() or 0 for bad in INVALID_CHARS)
    if (error := invalid_text(paths[0] if len(paths) == 1 else f"{role} data", chars, invalid, settings)) is not None:
        raise error
    if size == 0:
        raise DataError(f"{role} data {', '.join(map(str, paths[:3]))} holds no text")
    return RawSplit(role, dataset, rows, size, rows)


def _row_range(dataset, start: int, stop: int):
    if isinstance(dataset, datasets.Dataset):  # contiguous: no indices mapping (datasets refuses an empty one at the end)
        return dataset.select(range(start, stop)) if stop > start else dataset.select([])
    return (dataset.skip(start) if start else dataset).take(stop - start)


def _tail_cut(loaded: RawSplit, fraction: float) -> tuple[int, dict | None, dict | None]:
    """Where the tail split cuts: (row, head, tail). Rows before `row` go to train, after it to
    validation; `row` is cut at the first line end at or after (1 - fraction) of the bytes into `head`
    and `tail`, or goes whole to train (None, None)."""
    target = loaded.bytes * (1.0 - fraction)
    seen = row = 0
    for table in arrow_batches(loaded.dataset, columns=size_columns(loaded.dataset)):
        sizes = row_bytes(table)
        if seen + int(sizes.sum()) >= target:
            ends = seen + np.cumsum(sizes)  # bytes up to the end of each row
            k = int(np.searchsorted(ends, target, side="left"))
            row, start = row + k, int(ends[k] - sizes[k])
            break
        seen, row = seen + int(sizes.sum()), row + table.num_rows
    else:
        return loaded.rows, None, None
    if not loaded.by_document:  # a document per row: cut after it
        return row + 1, None, None
    [record] = next(arrow_batches(_row_range(loaded.dataset, row, row + 1))).to_pylist()
    data = record["text"].encode()
    newline = data.find(b"\n", max(int(np.ceil(target - start)) - 1, 0))  # the line end at or after the target
    cut = len(data) if newline < 0 else newline + 1
    if cut >= len(data):
        return row + 1, None, None
    head, tail = data[:cut].decode(), data[cut:].decode()  # cut after "\n": whole characters
    return row, text_row(head, record["doc"], False), text_row(tail, record["doc"], record["end"])


def _split_tail(loaded: RawSplit, fraction: float) -> tuple[RawSplit, RawSplit]:
    """Train = the first (1 - fraction) of the bytes, validation = the rest, cut at a line (or row) end."""
    row, head, tail = _tail_cut(loaded, fraction)
    train = _row_range(loaded.dataset, 0, row)
    validation = _row_range(loaded.dataset, row + (head is not None), loaded.rows)
    if head is not None:  # the row cut in two: its head ends train, its tail starts validation
        pieces = [datasets.Dataset.from_list([r], features=text_features()) for r in (head, tail)]
        if isinstance(loaded.dataset, datasets.IterableDataset):
            pieces = [piece.to_iterable_dataset() for piece in pieces]
        train = datasets.concatenate_datasets([train, pieces[0]])
        validation = datasets.concatenate_datasets([pieces[1], validation])
    return counted("train", train), counted("validation", validation)


def _in_validation(*columns_and_indices, seed: int, fraction: float, keep: bool) -> list[bool]:
    """`Dataset.filter` predicate over (doc column, indices) of text files' rows, else (indices)."""
    return list((seeded_unit(np.asarray(columns_and_indices[0], dtype=np.int64), seed) < fraction) == keep)


def _split_random(loaded: RawSplit, settings: DataSettings) -> tuple[RawSplit, RawSplit]:
    """Whole documents drawn for validation by a seeded hash of their index (the same streamed)."""
    draw = dict(seed=settings.seed, fraction=settings.validation_fraction)
    train = keep_documents(loaded, "train", "train documents", _in_validation, keep=False, **draw)
    return train, keep_documents(loaded, "validation", "validation documents", _in_validation, keep=True, **draw)

