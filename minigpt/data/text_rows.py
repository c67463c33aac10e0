"""Raw text as rows of `datasets`, and reading them back in Arrow batches. A text file is read into
rows of up to PIECE_CHARS characters cut after a line end, each counted as it is read (docs/data.md,
"Formats"); rows of JSON lines, parquet and `save_to_disk` are documents with a `text` column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..console import plural

PIECE_CHARS = 1 << 16  # characters per row at most (twice that where a line runs on): bounded batches
INVALID_CHARS = ("\ufffd", "\x00")  # what undecodable bytes become (errors="replace") and binary's NULs
LOADER_VERSION = 1  # bump when the rows made from the same files change (part of the cache fingerprint)
WRITER_BATCH_ROWS = 64  # rows a loading process holds before writing (datasets' 1000 x 128K characters is too many)


def text_features() -> datasets.Features:
    """The columns of a text file's rows."""
    return datasets.Features(
        {
            "text": datasets.Value("string"),
            "doc": datasets.Value("int64"),  # index of the file among the source's files
            "end": datasets.Value("bool"),  # the last row of its file: an EOS follows it
            "bytes": datasets.Value("int64"),  # UTF-8 bytes of `text`
            "chars": datasets.Value("int64"),
            "invalid": datasets.Value("int64"),  # U+FFFD and NUL characters in `text`
        }
    )


def read_text_rows(files: list[tuple[int, str]], piece_chars: int = PIECE_CHARS) -> Iterator[dict]:
    """`Dataset.from_generator`'s generator: the rows of `files`, (document index, path) pairs, in order."""
    for doc, path in files:
        previous = None
        # text mode: universal newlines (a CRLF split across two reads is still one LF)
        with open(path, encoding="utf-8", errors="replace") as handle:
            while piece := handle.read(piece_chars):
                if not piece.endswith("\n"):
                    piece += handle.readline(piece_chars)  # finish the line (a long one only partly)
                if previous is not None:
                    yield text_row(previous, doc, end=False)
                previous = piece
        if previous is not None:  # an empty file gives no row
            yield text_row(previous, doc, end=True)


def text_row(text: str, doc: int, end: bool) -> dict:
    invalid = sum(text.count(bad) for bad in INVALID_CHARS)
    return {"text": text, "doc": doc, "end": end, "bytes": len(text.encode()), "chars": len(text), "invalid": invalid}


def load_text_files(
    paths: list[str], cache_dir: str, key: str, num_proc: int, streaming: bool = False
) -> datasets.Dataset | datasets.IterableDataset:
    """The rows of the text files `paths` (document i = paths[i]): an Arrow copy under `cache_dir`,
    made by `num_proc` processes and reused by `key` (the files' content), or a stream."""
    files = [(doc, str(path)) for doc, path in enumerate(paths)]
    kwargs = dict(features=text_features(), gen_kwargs={"files": files, "piece_chars": PIECE_CHARS})
    if streaming:
        return datasets.IterableDataset.from_generator(read_text_rows, **kwargs)
    processes = min(num_proc, len(files))
    return datasets.Dataset.from_generator(
        read_text_rows,
        cache_dir=cache_dir,
        num_proc=processes if processes > 1 else None,
        fingerprint=f"minigpt-text-{LOADER_VERSION}-{PIECE_CHARS}-{key}",
        writer_batch_size=WRITER_BATCH_ROWS,
        **kwargs,
    )


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
    for table in arrow_batches(dataset, columns=size_columns(dataset)):
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


def arrow_batches(
    dataset: datasets.Dataset | datasets.IterableDataset, columns: list[str] | None = None, batch_rows: int = 10_000
) -> Iterator[pa.Table]:
    """The rows as Arrow tables of `batch_rows` rows (memory: one batch), only `columns`."""
    if columns is not None:
        dataset = dataset.select_columns(columns)
    return dataset.with_format("arrow").iter(batch_size=batch_rows)


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
    for table in arrow_batches(split.dataset, columns=size_columns(split.dataset)):
        keys.append(numbers(table, "doc") if "doc" in table.column_names else np.arange(start, start + table.num_rows))
        sizes.append(row_bytes(table))
        start += table.num_rows
    if not keys:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    unique, inverse = np.unique(np.concatenate(keys), return_inverse=True)  # a text file's rows summed
    return unique, np.bincount(inverse, weights=np.concatenate(sizes)).astype(np.int64)


def iter_texts(split: RawSplit) -> Iterator[str]:
    """The split's texts in order, one Arrow batch in memory at a time."""
    for table in arrow_batches(split.dataset, columns=["text"]):
        yield from (text for text in table.column("text").to_pylist() if text)
