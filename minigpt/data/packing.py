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
import pyarrow.compute as pc
from datasets.arrow_writer import ArrowWriter
from tokenizers import Tokenizer
from tqdm.auto import tqdm

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

TOKEN_DTYPE = "int32"  # ids < 2**31; half the disk of int64. Python-list batches become int64 tensors
PACK_BATCH_ROWS = 10_000  # tokenized rows read per step of the packing loop


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
    batch: dict[str, list],
    indices: list[int],
    *,
    tokenizer: Tokenizer,
    eos_id: int,
    doc_ends: np.ndarray | None,
) -> dict[str, list[list[int]]]:
    """`Dataset.map` function: token ids per row, with EOS appended to rows that end a document.

    `doc_ends` holds the row indices (of the dataset being mapped) ending a document; None means
    every row is a whole document. Empty rows give no tokens and no EOS.
    """
    texts = [text or "" for text in batch["text"]]
    ids = [encoding.ids for encoding in tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
    if doc_ends is None:
        ends = [i for i, text in enumerate(texts) if text]
    else:
        ends = np.flatnonzero(np.isin(np.asarray(indices, dtype=np.int64), doc_ends)).tolist()
    for i in ends:
        ids[i].append(eos_id)
    return {"input_ids": ids}


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
    """The flat token stream of a tokenized Dataset/IterableDataset, one batch of rows at a time."""
    if isinstance(tokenized, datasets.Dataset):
        arrow = tokenized.with_format("arrow")
        batches = (arrow[i : i + PACK_BATCH_ROWS] for i in range(0, tokenized.num_rows, PACK_BATCH_ROWS))
    else:
        batches = tokenized.with_format("arrow").iter(batch_size=PACK_BATCH_ROWS)
    for table in batches:
        flat = pc.list_flatten(table.column("input_ids"))  # respects slices, unlike .values
        yield flat.to_numpy().astype(np.int32, copy=False), table.num_rows


def write_blocks(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    path: Path,
    block_size: int,
    total_rows: int | None = None,
    show_progress: bool = True,
) -> PackResult:
    """Pack the token stream of `tokenized` into `block_size` blocks written to the Arrow file `path`."""
    writer = ArrowWriter(features=block_features(block_size), path=str(path))
    carry = np.empty(0, dtype=np.int32)  # tokens of the unfinished block, carried to the next batch
    tokens = blocks = 0
    bar = tqdm(total=total_rows, desc=f"packing {path.stem}", unit=" rows", disable=not show_progress)
    try:
        for flat, rows in _token_batches(tokenized):
            tokens += len(flat)
            stream = np.concatenate([carry, flat]) if len(carry) else flat
            full = len(stream) // block_size
            if full:
                values = pa.array(stream[: full * block_size], type=pa.int32())
                column = pa.FixedSizeListArray.from_arrays(values, block_size)  # (full, block_size), no copy
                writer.write_table(pa.table({"input_ids": column, "labels": column}))
                blocks += full
            carry = stream[full * block_size :].copy()
            bar.update(rows)
    finally:
        bar.close()
        writer.finalize()  # closes the file; a failed split is inside a staging folder that is discarded
    return PackResult(tokens=tokens, blocks=blocks, dropped_tokens=len(carry))
