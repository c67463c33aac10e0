"""Tokenize rows of text and pack the token stream into fixed blocks of `block_size` tokens.

Tokenizing is a `Dataset.map(batched=True, num_proc=...)`. Packing is one sequential pass that
carries the unfinished block from one batch to the next, so the only tokens not used are the
last `< block_size` of each split (counted in the stats). A batched `map` cannot carry state
across batches (and run_clm-style packing drops a remainder per batch), hence the hand-written
loop; it writes with `datasets`' own `ArrowWriter`, so the blocks are an Arrow file on disk.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import datasets
import numpy as np
import pyarrow as pa
from datasets.arrow_writer import ArrowWriter
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from .text_rows import PIECE_CHARS

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

    from .text_rows import RawSplit

TOKEN_DTYPE = "int32"  # ids < 2**31; half the disk of int64. Python-list batches become int64 tensors
PACK_BATCH_ROWS = 10_000  # tokenized rows sliced per step of the packing loop (views: no copy)
PACK_STREAM_ROWS = 256  # rows per step of a streamed split, whose batches are built in memory
# Text per Dataset.map batch: datasets batches by rows, from 100-byte JSON lines to 64K-character
# pieces of text files, and a batch's encodings hold tens of bytes per token: batches stay this small.
BATCH_TEXT_BYTES = 4 << 20


def data_tokenizer(tokenizer: PreTrainedTokenizerFast) -> Tokenizer:
    """A copy of a transformers tokenizer's backend that reads special-token text as plain text.

    A document that contains the literal string "<|endoftext|>" must not inject an EOS id: only
    the pipeline places EOS, between documents.
    """
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.encode_special_tokens = True
    backend.no_truncation()
    backend.no_padding()
    return backend


def tokenize_batch(
    texts: list[str | None], ends: list[bool] | None = None, *, tokenizer: Tokenizer, eos_id: int
) -> pa.Table:
    """`Dataset.map` function over the `text` column (and `end`, for text files' rows): a table of
    token ids per row, with EOS appended to rows that end a document.

    `ends` says which rows end their document (rows of text files are pieces of one); None means
    every row is a whole document. Empty rows give no tokens and no EOS. The ids go into Arrow
    as one int32 array per batch (not lists of Python ints: 4 bytes a token, no conversion).
    """
    texts = [text or "" for text in texts]
    ends = [bool(text) for text in texts] if ends is None else ends
    rows = []
    for encoding, end in zip(tokenizer.encode_batch_fast(texts, add_special_tokens=False), ends, strict=True):
        ids = encoding.ids
        if end:
            ids.append(eos_id)
        rows.append(np.asarray(ids, dtype=np.int32))
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = np.concatenate(rows) if rows else np.empty(0, dtype=np.int32)
    return pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))})


def tokenize_rows_as_lists(*columns, tokenizer: Tokenizer, eos_id: int) -> dict[str, list[list[int]]]:
    """`tokenize_batch` for a streamed `IterableDataset.map`, which takes a dict of lists."""
    return tokenize_batch(*columns, tokenizer=tokenizer, eos_id=eos_id).to_pydict()


def map_batch_rows(split: RawSplit, most_rows: int) -> int:
    """Rows per `Dataset.map` batch: `most_rows`, fewer for long rows, so that a batch holds about
    BATCH_TEXT_BYTES of text on average (text files' rows: at most 4x that, all rows at their longest)."""
    rows = BATCH_TEXT_BYTES // max(split.bytes // max(split.rows, 1), 1)
    if split.by_document:  # a row of a text file holds at most 2 x PIECE_CHARS characters
        rows = min(rows, 4 * BATCH_TEXT_BYTES // (2 * PIECE_CHARS))
    return max(1, min(most_rows, rows))


def tokenized_features() -> datasets.Features:
    return datasets.Features({"input_ids": datasets.List(datasets.Value(TOKEN_DTYPE))})


def block_features(block_size: int) -> datasets.Features:
    """input_ids and labels as fixed-size lists (labels = input_ids; the model shifts them)."""
    column = datasets.List(datasets.Value(TOKEN_DTYPE), length=block_size)
    return datasets.Features({"input_ids": column, "labels": column})


@dataclass
class PackResult:
    """What packing one split produced."""

    tokens: int  # tokens in the split's stream, EOS included
    blocks: int  # full blocks written
    dropped_tokens: int  # final tokens that did not fill a block (< block_size)


def _token_batches(
    tokenized: datasets.Dataset | datasets.IterableDataset,
) -> Iterator[tuple[np.ndarray, int]]:
    """The flat token stream of a tokenized Dataset/IterableDataset, one Arrow chunk of rows at a
    time: (its tokens, its rows). A Dataset's are zero-copy views of its memory-mapped file."""
    if isinstance(tokenized, datasets.Dataset):
        arrow = tokenized.with_format("arrow")
        batches = (arrow[i : i + PACK_BATCH_ROWS] for i in range(0, tokenized.num_rows, PACK_BATCH_ROWS))
    else:
        batches = tokenized.with_format("arrow").iter(batch_size=PACK_STREAM_ROWS)
    for table in batches:
        for chunk in table.column("input_ids").chunks:  # never concatenated: a copy of the batch
            flat = chunk.flatten()  # respects slices, unlike .values
            yield flat.to_numpy(zero_copy_only=False).astype(np.int32, copy=False), len(chunk)


def write_blocks(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    path: Path,
    block_size: int,
    total_rows: int | None = None,
    show_progress: bool = True,
) -> PackResult:
    """Pack the token stream of `tokenized` into `block_size` blocks written to the Arrow file `path`.

    Blocks are written from views of the tokenized rows; only a block that spans two chunks is
    copied (the unfinished block carried over), so memory does not grow with the batch or the corpus."""
    writer = ArrowWriter(features=block_features(block_size), path=str(path))
    carry = np.empty(0, dtype=np.int32)  # tokens of the unfinished block, carried to the next chunk
    tokens = blocks = 0
    bar = tqdm(total=total_rows, desc=f"packing {path.stem}", unit=" rows", disable=not show_progress)

    def write(stream: np.ndarray) -> None:  # whole blocks only
        values = pa.array(stream, type=pa.int32())  # a view of `stream`, no copy
        column = pa.FixedSizeListArray.from_arrays(values, block_size)  # (blocks, block_size), no copy
        writer.write_table(pa.table({"input_ids": column, "labels": column}))

    try:
        for flat, rows in _token_batches(tokenized):
            tokens += len(flat)
            start = 0
            if len(carry):  # complete the carried block first
                start = min(block_size - len(carry), len(flat))
                carry = np.concatenate([carry, flat[:start]])
                if len(carry) == block_size:
                    write(carry)
                    blocks, carry = blocks + 1, np.empty(0, dtype=np.int32)
            full = (len(flat) - start) // block_size
            if full:
                write(flat[start : start + full * block_size])
                blocks += full
            if not len(carry):
                carry = flat[start + full * block_size :].copy()
            bar.update(rows)
    finally:
        bar.close()
        writer.finalize()  # closes the file; a failed split is inside a staging folder that is discarded
    return PackResult(tokens=tokens, blocks=blocks, dropped_tokens=len(carry))
