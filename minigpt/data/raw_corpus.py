"""The raw train and validation text of `Sources`: loaded with `datasets`, checked, deduplicated and
split into `RawSplit`s, read back in Arrow batches. A text file is one document (its rows: `text_rows`);
JSON lines, parquet and `save_to_disk` rows are one each. The tail split cuts off the last bytes at a
line end; the random split draws whole documents; `data.dedup` drops what `duplicates` finds."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator
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
from .duplicates import DEDUP_VERSION, DuplicateIndex, comparison, document_batches, join_documents
from .settings import DataSettings, seeded_unit
from .sources import INVALID_CHARS, SourceList, Sources, invalid_text
from .text_rows import BATCH_ROWS, load_text_files, text_features, text_row

LOCAL_FILES_BAR_THRESHOLD = 16  # datasets' DownloadManager draws a "download" bar from this many local files
_said: set[str] = set()  # lines said once per process (a run loads its corpus for the tokenizer, then the blocks)


@dataclass
class RawSplit:
    """One split of raw text: rows of a `text` column (text files' rows: `text_features`), with sizes."""

    name: str  # "train" or "validation"
    dataset: datasets.Dataset | datasets.IterableDataset
    rows: int
    bytes: int  # UTF-8 bytes of all its text
    documents: int  # documents with text (a text file cut by the split counts in both)

    @property
    def by_document(self) -> bool:
        """Rows are pieces of documents, with an `end` column (text files), not whole documents."""
        return "end" in (self.dataset.column_names or [])

    def describe(self) -> str:
        return f"the {self.name} split ({self.bytes:,} bytes, {self.rows:,} rows, {plural(self.documents, 'document')})"


def counted(name: str, dataset: datasets.Dataset | datasets.IterableDataset) -> RawSplit:
    """`dataset` as a split, its rows, bytes and documents counted from the rows' sizes."""
    rows = size = documents = 0
    last_doc = -1
    for table in dataset.select_columns(size_columns(dataset)).with_format("arrow").iter(batch_size=BATCH_ROWS):
        sizes = row_bytes(table)
        rows, size = rows + table.num_rows, size + int(sizes.sum())
        if "doc" not in table.column_names:
            documents += int((sizes > 0).sum())
        elif table.num_rows:
            doc = numbers(table, "doc")
            documents += int((np.diff(doc) != 0).sum()) + int(doc[0] != last_doc)
            last_doc = int(doc[-1])
    return RawSplit(name, dataset, rows, size, documents)


def keep_documents(
    split: RawSplit, name: str, desc: str, predicate: Callable[..., list[bool]], **fn_kwargs: object
) -> RawSplit:
    """The rows of `split` whose document `predicate` keeps, as the split `name`. `predicate` gets the
    documents' keys (a text file's `doc` column, else the row indices) and `fn_kwargs`, never the text."""
    dataset = split.dataset.filter(
        predicate,
        batched=True,
        with_indices=True,
        input_columns=["doc"] if split.by_document else [],
        fn_kwargs=fn_kwargs,
        **({} if isinstance(split.dataset, datasets.IterableDataset) else {"desc": desc}),
    )
    return counted(name, dataset)


def numbers(table: pa.Table, column: str) -> np.ndarray:
    return table.column(column).to_numpy().astype(np.int64, copy=False)


def row_bytes(table: pa.Table) -> np.ndarray:
    """UTF-8 bytes of each row of a batch: text files' `bytes` column, else measured."""
    if "bytes" in table.column_names:
        return numbers(table, "bytes")
    return pc.binary_length(table.column("text")).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)


def size_columns(dataset: datasets.Dataset | datasets.IterableDataset) -> list[str]:
    """The columns `row_bytes` and a document's key need: never the text of text files' rows."""
    return ["doc", "bytes"] if "doc" in (dataset.column_names or []) else ["text"]


def document_sizes(split: RawSplit) -> tuple[np.ndarray, np.ndarray]:
    """Each document's key (its row, or a text file's index), sorted, and its bytes."""
    keys, sizes, start = [], [], 0
    for table in split.dataset.select_columns(size_columns(split.dataset)).with_format("arrow").iter(batch_size=BATCH_ROWS):
        keys.append(numbers(table, "doc") if "doc" in table.column_names else np.arange(start, start + table.num_rows))
        sizes.append(row_bytes(table))
        start += table.num_rows
    if not keys:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    unique, inverse = np.unique(np.concatenate(keys), return_inverse=True)  # a text file's rows summed
    return unique, np.bincount(inverse, weights=np.concatenate(sizes)).astype(np.int64)


def iter_texts(split: RawSplit) -> Iterator[str]:
    """The split's texts in order, one Arrow batch in memory at a time."""
    for table in split.dataset.select_columns(["text"]).with_format("arrow").iter(batch_size=BATCH_ROWS):
        yield from (text for text in table.column("text").to_pylist() if text)


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
    if sources.train.format == "chat":  # conversations are encoded by chat_data.py
        raise ConfigError("data.format=chat is read by a chat run (scripts/train.py with model.init_from), not as text")
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
    """`source` as rows of a `text` column, counted and checked to be text."""
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
                split, texts = _counted_text_rows(dataset, paths, role)  # a stream is read (and can fail) here
            else:
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
                split, texts = _counted_documents(_text_field(dataset, settings.text_field, role, names), paths, role)
    except MiniGPTUserError:
        raise
    except (datasets.exceptions.DatasetGenerationError, pa.ArrowException, UnicodeDecodeError, ValueError) as err:
        cause = err.__cause__ or err
        raise DataError(f"cannot read {role} data {names} as {fmt}: {type(cause).__name__}: {cause}") from err
    for where, chars, invalid in texts:  # mostly undecodable text refused
        if (error := invalid_text(where, chars, invalid, settings.max_invalid_utf8_fraction)) is not None:
            raise error
    return split


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


def _counted_text_rows(dataset, paths: list[Path], role: str) -> tuple[RawSplit, list[tuple[Path, int, int]]]:
    """Text files' rows counted, from the counts taken as they were read, and (file, characters,
    undecodable or NUL characters) of each file with any."""
    chars = np.zeros(len(paths), dtype=np.int64)
    invalid = np.zeros(len(paths), dtype=np.int64)
    rows = total = 0
    for table in dataset.select_columns(["doc", "bytes", "chars", "invalid"]).with_format("arrow").iter(batch_size=BATCH_ROWS):
        doc = numbers(table, "doc")
        chars += np.bincount(doc, weights=numbers(table, "chars"), minlength=len(paths)).astype(np.int64)
        invalid += np.bincount(doc, weights=numbers(table, "invalid"), minlength=len(paths)).astype(np.int64)
        rows, total = rows + table.num_rows, total + int(numbers(table, "bytes").sum())
    texts = [(paths[doc], int(chars[doc]), int(invalid[doc])) for doc in np.flatnonzero(invalid)]
    return RawSplit(role, dataset, rows, total, int((chars > 0).sum())), texts


def _counted_documents(dataset, paths: list[Path], role: str) -> tuple[RawSplit, list[tuple[object, int, int]]]:
    """A source of documents counted, and (the source, characters, undecodable or NUL characters); one
    with no text refused."""
    rows = size = chars = invalid = 0
    for table in dataset.with_format("arrow").iter(batch_size=BATCH_ROWS):
        column = table.column("text")
        rows += table.num_rows
        size += pc.sum(pc.binary_length(column)).as_py() or 0
        chars += pc.sum(pc.utf8_length(column)).as_py() or 0
        invalid += sum(pc.sum(pc.count_substring(column, pattern=bad)).as_py() or 0 for bad in INVALID_CHARS)
    if size == 0:
        raise DataError(f"{role} data {', '.join(map(str, paths[:3]))} holds no text")
    return RawSplit(role, dataset, rows, size, rows), [(paths[0] if len(paths) == 1 else f"{role} data", chars, invalid)]


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
    for table in loaded.dataset.select_columns(size_columns(loaded.dataset)).with_format("arrow").iter(batch_size=BATCH_ROWS):
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
    [record] = next(_row_range(loaded.dataset, row, row + 1).with_format("arrow").iter(batch_size=1)).to_pylist()
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


def deduplicated(
    splits: list[RawSplit], sources: list[SourceList], settings: DataSettings
) -> tuple[list[RawSplit], dict]:
    """`splits` without the documents data.dedup removes, and what it removed per pool ("corpus", or
    "validation" and "train"); the decisions are cached under data.cache_dir/dedup/ by the sources' keys."""
    decisive = {
        "inputs": [source.key for source in sources],
        "format": sources[0].format,
        "text_field": None if sources[0].format == "text" else settings.text_field,
        "comparison": comparison(),
        "version": DEDUP_VERSION,
    }
    key = hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:20]
    cached = Path(settings.cache_dir) / "dedup" / f"{key}.json"
    if cached.is_file():
        record = json.loads(cached.read_text(encoding="utf-8"))
    else:
        record = _decide(splits, settings.show_progress)
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write_file(cached) as handle:
            json.dump(record, handle)
    kept = []
    for split, removed in zip(splits, record["removed"], strict=True):
        removed = np.asarray(removed, dtype=np.int64)
        kept.append(keep_documents(split, split.name, "data.dedup", _kept, removed=removed) if len(removed) else split)
    pools = record["pools"]
    line = (
        f"data.dedup: removed {plural(sum(p['exact'] + p['near'] for p in pools), 'document')} of "
        f"{sum(p['documents'] for p in pools):,} ({sum(p['exact'] for p in pools):,} exact, "
        f"{sum(p['near'] for p in pools):,} near copies)"
    )
    if line not in _said and is_main_process():
        _said.add(line)
        print(line, flush=True)
    return kept, dict(zip(["validation", "train"] if len(pools) == 2 else ["corpus"], pools, strict=True))


def _decide(splits: list[RawSplit], show_progress: bool) -> dict:
    index = DuplicateIndex()
    record: dict = {"removed": [], "pools": []}
    total = sum(split.documents for split in splits)
    with tqdm(total=total, desc="data.dedup: comparing documents", unit=" docs", disable=not show_progress) as bar:
        for number, split in enumerate(splits):
            first_of_this = index.size  # documents of earlier sources are numbered below this
            removed, counts = [], {"documents": split.documents, "exact": 0, "near": 0}
            earlier = 0
            for document in join_documents(document_batches(split.dataset)):
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
