"""From found `Sources` to packed, cached blocks of `block_size` tokens: `prepare_corpus`.

Packing is one sequential pass that carries the unfinished block from batch to batch, so only the last
`< block_size` tokens of each split are dropped (run_clm's batched map drops a remainder per batch).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import datasets
import numpy as np
import pyarrow as pa
from datasets.arrow_writer import ArrowWriter
from tokenizers import Tokenizer
from tqdm.auto import tqdm

from ..atomic import atomic_output_dir
from ..console import datasets_progress_bars, plural
from ..distributed import is_main_process
from ..errors import ConfigError, DataError
from .corpus_report import CorpusReport, corpus_report
from .raw_corpus import RawCorpus, RawSplit, load_raw_corpus
from .sources import Sources
from .text_rows import PIECE_CHARS

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

CACHE_FORMAT_VERSION = 2  # bump when the pipeline's output changes for the same inputs
META_FILE = "meta.json"
TOKEN_DTYPE = "int32"  # ids < 2**31; half the disk of int64
PACK_BATCH_ROWS = 10_000  # tokenized rows sliced per step of the packing loop (views: no copy)
# Text per map batch: rows run from 100-byte JSON lines to 64K-character pieces of text files, and a
# batch's encodings hold tens of bytes per token: batches stay about this small.
BATCH_TEXT_BYTES = 4 << 20


@dataclass
class SplitStats:
    """Sizes of one prepared split (bits per byte sums the bytes of the scored tokens instead)."""

    documents: int  # documents (a text file, a json/parquet row, a conversation)
    bytes: int  # UTF-8 bytes of the split's text
    tokens: int  # tokens of the split, one EOS per document end included
    blocks: int  # rows: packed blocks of block_size tokens, or conversations
    dropped_tokens: int  # tokens left out: the split's last (< block_size), or of conversations too long


@dataclass
class PreparedCorpus:
    """Train and validation rows of `input_ids` and `labels` (equal in blocks; the model shifts them)."""

    train: datasets.Dataset  # memory-mapped from cache_dir/train.arrow
    validation: datasets.Dataset  # memory-mapped from cache_dir/validation.arrow
    train_stats: SplitStats
    validation_stats: SplitStats
    block_size: int  # tokens per row (at most, for conversations)
    vocab_size: int  # len(tokenizer) the rows were made with
    eos_token_id: int  # id placed between documents
    tokenizer_fingerprint: str  # `tokenizer_fingerprint` of that tokenizer
    cache_dir: Path  # the folder holding the rows
    reused: bool = True  # the rows came from the cache
    report: CorpusReport | None = None  # the corpus report (None for conversations)

    def describe(self) -> str:
        """Lines for a CLI: sizes per split and where the blocks live."""
        lines = [f"blocks of {self.block_size} tokens in {self.cache_dir}" + (" (reused)" if self.reused else "")]
        for name, s in (("train", self.train_stats), ("validation", self.validation_stats)):
            lines.append(
                f"  {name}: {plural(s.documents, 'document')}, {s.bytes:,} bytes, {s.tokens:,} tokens "
                f"({s.bytes / s.tokens:.2f} bytes/token), {plural(s.blocks, 'block')}, {plural(s.dropped_tokens, 'token')} left over"
            )
        return "\n".join(lines)


def prepare_corpus(sources: Sources, tokenizer: PreTrainedTokenizerFast) -> PreparedCorpus:
    """Packed, cached train/validation blocks of `sources` for `tokenizer`; no partial cache left on
    error. (The run config has checked the blocks fit the model: `check_fits_model`.)"""
    settings = sources.settings
    if tokenizer.eos_token_id is None:
        raise ConfigError("the tokenizer has no eos_token; documents cannot be separated")
    tokenizer_id = tokenizer_fingerprint(tokenizer)
    target = Path(settings.cache_dir) / "blocks" / cache_key(sources, tokenizer_id)
    reused, raw = (target / META_FILE).is_file(), None  # raw: the text the blocks are made of now
    if not reused:
        print(f"preparing blocks in {target}")
    elif is_main_process():  # under `accelerate launch` the other processes load silently
        print(f"reusing prepared blocks in {target}")
    with datasets_progress_bars(settings.show_progress):
        if not reused:
            with atomic_output_dir(target) as staging:
                raw = _prepare_into(staging, sources, tokenizer, tokenizer_id)
        corpus = load_prepared(target)
        corpus.reused = reused
        # beside the blocks: made with them, or now for blocks without one (or with another sample's)
        corpus.report = corpus_report(target, sources, corpus.train_stats.tokens, corpus.validation_stats.tokens, raw)
    return corpus


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerFast) -> str:
    """A hash of everything that decides token ids: vocabulary, merges, special tokens."""
    digest = hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode("utf-8"))
    digest.update(json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str).encode("utf-8"))
    return digest.hexdigest()[:16]


def cache_key(sources: Sources, tokenizer_id: str) -> str:
    """Hash of what decides the blocks; not how they are made or read, nor the report's sample."""
    decisive = asdict(sources.settings)
    left_out = ("cache_dir", "num_proc", "batch_size", "streaming", "show_progress", "format", "shift_blocks")
    for key in (*left_out, "report_max_documents"):
        decisive.pop(key)
    if not decisive["dedup"]:  # off: the keys of blocks prepared before data.dedup existed
        decisive.pop("dedup")
    decisive.update(format=sources.train.format, tokenizer=tokenizer_id, inputs=sources.key, version=CACHE_FORMAT_VERSION)
    return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:20]


@contextlib.contextmanager
def _forking() -> Iterator[None]:
    """For forked map workers: the parent's heap frozen (a worker's garbage collector would copy its
    pages) and one tokenizer thread each (a process per core already uses the cores)."""
    gc.collect()
    gc.freeze()
    saved = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        yield
    finally:
        gc.unfreeze()
        os.environ.pop("TOKENIZERS_PARALLELISM")
        if saved is not None:
            os.environ["TOKENIZERS_PARALLELISM"] = saved


def write_meta(
    folder: Path, tokenizer: PreTrainedTokenizerFast, tokenizer_id: str, block_size: int, stats: dict, **more: object
) -> None:
    """`META_FILE` of prepared rows: what `load_prepared` reads, and `more`;
    `tokenizer_id` is the `tokenizer_fingerprint` the caller keyed the rows by."""
    meta = {
        "block_size": block_size,
        "vocab_size": len(tokenizer),
        "eos_token_id": tokenizer.eos_token_id,
        "tokenizer_fingerprint": tokenizer_id,
        "stats": {name: asdict(s) for name, s in stats.items()},
        **more,
    }
    (folder / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _prepare_into(staging: Path, sources: Sources, tokenizer: PreTrainedTokenizerFast, tokenizer_id: str) -> RawCorpus:
    """Tokenize and pack both splits into `staging`, with their `META_FILE`; the raw corpus they were made of."""
    settings = sources.settings
    raw = load_raw_corpus(sources)
    backend = data_tokenizer(tokenizer)
    work = staging / "work"  # intermediate tokenized Arrow files, deleted before the rename
    work.mkdir()
    stats = {}
    for split in (raw.train, raw.validation):
        columns = ["text", "end"] if split.by_document else ["text"]  # text files' rows: end of a document
        batch = map_batch_rows(split, settings.batch_size)
        common = dict(batched=True, batch_size=batch, input_columns=columns, remove_columns=split.dataset.column_names)
        common["fn_kwargs"] = dict(tokenizer=backend, eos_id=tokenizer.eos_token_id)
        if settings.streaming:  # mapped lazily as the packer reads; one process
            tokenized = split.dataset.map(lambda *c, **k: tokenize_batch(*c, **k).to_pydict(), **common)
        else:
            processes = min(settings.processes(), max(1, -(-split.rows // batch)))
            with _forking() if processes > 1 else contextlib.nullcontext():
                tokenized = split.dataset.map(
                    tokenize_batch,
                    features=datasets.Features({"input_ids": datasets.List(datasets.Value(TOKEN_DTYPE))}),
                    num_proc=processes if processes > 1 else None,
                    cache_file_name=str(work / f"tokenized-{split.name}.arrow"),
                    desc=f"tokenizing {split.name}",
                    **common,
                )
        packed = write_blocks(tokenized, staging / f"{split.name}.arrow", settings.block_size, split.rows, settings.show_progress)
        del tokenized
        stats[split.name] = SplitStats(split.documents, split.bytes, *packed)
    shutil.rmtree(work)
    short = {name: s.tokens for name, s in stats.items() if s.blocks == 0}
    if short:
        sizes = ", ".join(f"{name} has {tokens:,}" for name, tokens in short.items())
        raise DataError(
            f"corpus too small for data.block_size={settings.block_size}: the {sizes} tokens, and each split needs "
            "at least one full block; add text, lower data.block_size or change data.validation_fraction"
        )
    files = sources.train.paths + (sources.validation.paths if sources.validation else [])
    # the sources by count and first name: a list of every file would grow with the corpus
    more = dict(format=sources.train.format, source_files=len(files), first_source=str(files[0]))
    write_meta(staging, tokenizer, tokenizer_id, settings.block_size, stats, settings=asdict(settings), **more)
    return raw


def load_prepared(folder: str | Path) -> PreparedCorpus:
    """Open a folder written by `prepare_corpus` or `prepare_chat_corpus` (memory-mapped, nothing copied)."""
    folder = Path(folder)
    meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    splits = {name: datasets.Dataset.from_file(str(folder / f"{name}.arrow")) for name in ("train", "validation")}
    stats = {name: SplitStats(**meta["stats"][name]) for name in splits}
    for name, dataset in splits.items():
        if dataset.num_rows != stats[name].blocks:
            raise DataError(f"{folder}/{name}.arrow has {dataset.num_rows} blocks, {META_FILE} says {stats[name].blocks}")
    keys = ("block_size", "vocab_size", "eos_token_id", "tokenizer_fingerprint")
    return PreparedCorpus(*splits.values(), *stats.values(), *(meta[k] for k in keys), cache_dir=folder)


# ---- tokenizing and packing ----------------------------------------------------------------------


def data_tokenizer(tokenizer: PreTrainedTokenizerFast) -> Tokenizer:
    """A copy of the tokenizer's backend that reads special-token text as plain text: a document holding
    the string "<|endoftext|>" must not inject an EOS id (only the pipeline places EOS)."""
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.encode_special_tokens = True
    backend.no_truncation()
    backend.no_padding()
    return backend


def tokenize_batch(
    texts: list[str | None], ends: list[bool] | None = None, *, tokenizer: Tokenizer, eos_id: int
) -> pa.Table:
    """`Dataset.map` function: each row's ids, EOS after a row that ends a document (`ends` None: every
    row with text), as one int32 Arrow array per batch (no Python ints)."""
    texts = [text or "" for text in texts]
    ends = [bool(text) for text in texts] if ends is None else ends
    rows = []
    for encoding, end in zip(tokenizer.encode_batch_fast(texts, add_special_tokens=False), ends, strict=True):
        rows.append(np.asarray(encoding.ids + [eos_id] * end, dtype=np.int32))
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows], dtype=np.int64)]).astype(np.int32)
    values = np.concatenate(rows) if rows else np.empty(0, dtype=np.int32)
    return pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))})


def map_batch_rows(split: RawSplit, most_rows: int) -> int:
    """Rows per map batch: `most_rows`, fewer for long rows, so a batch holds about BATCH_TEXT_BYTES
    (text files' rows: at most 4x that, all rows at their longest of 2 x PIECE_CHARS)."""
    rows = BATCH_TEXT_BYTES // max(split.bytes // max(split.rows, 1), 1)
    if split.by_document:
        rows = min(rows, 4 * BATCH_TEXT_BYTES // (2 * PIECE_CHARS))
    return max(1, min(most_rows, rows))


def block_features(block_size: int) -> datasets.Features:
    """input_ids and labels as fixed-size lists (labels = input_ids; the model shifts them)."""
    column = datasets.List(datasets.Value(TOKEN_DTYPE), length=block_size)
    return datasets.Features({"input_ids": column, "labels": column})


class PackResult(NamedTuple):
    tokens: int  # tokens in the split's stream, EOS included
    blocks: int  # full blocks written
    dropped_tokens: int  # final tokens that did not fill a block (< block_size)


def write_blocks(
    tokenized: datasets.Dataset | datasets.IterableDataset,
    path: Path,
    block_size: int,
    total_rows: int | None = None,
    show_progress: bool = True,
) -> PackResult:
    """Pack the token stream of `tokenized` into blocks in the Arrow file `path`, from zero-copy views:
    only a block that spans two chunks is copied."""
    writer = ArrowWriter(features=block_features(block_size), path=str(path))
    carry = np.empty(0, dtype=np.int32)  # tokens of the unfinished block, carried to the next chunk
    tokens = blocks = 0
    bar = tqdm(total=total_rows, desc=f"packing {path.stem}", unit=" rows", disable=not show_progress)

    def write(stream: np.ndarray) -> None:  # whole blocks only
        column = pa.FixedSizeListArray.from_arrays(pa.array(stream, type=pa.int32()), block_size)  # (blocks, block_size), no copy
        writer.write_table(pa.table({"input_ids": column, "labels": column}))

    # views of the file's rows; a stream's batches are built in memory: smaller ones
    batches = tokenized.with_format("arrow").iter(batch_size=PACK_BATCH_ROWS if isinstance(tokenized, datasets.Dataset) else 256)
    try:
        for table in batches:
            for chunk in table.column("input_ids").chunks:  # never concatenated: a copy of the batch
                flat = chunk.flatten().to_numpy(zero_copy_only=False).astype(np.int32, copy=False)  # respects slices
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
                bar.update(len(chunk))
    finally:
        bar.close()
        writer.finalize()  # closes the file; a failed split is inside a staging folder that is discarded
    return PackResult(tokens, blocks, len(carry))
