"""From found `Sources` to packed, cached blocks of `block_size` tokens (`datasets` all the way).

`prepare_corpus` loads the raw text (`raw_corpus`), tokenizes it with `Dataset.map`, packs the token
stream into blocks (`packing`) and caches them under `<cache_dir>/blocks/<key>/`, the key a hash of
every setting that changes the blocks, the tokenizer and the sources' key. A second run with the
same key reuses the blocks (memory-mapped Arrow, nothing re-read); the folder appears whole or not
at all (built in a staging folder, then renamed).
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
from typing import TYPE_CHECKING

import datasets

from ..atomic import atomic_output_dir, atomic_write_file
from ..console import datasets_progress_bars, plural
from ..distributed import is_main_process
from ..errors import ConfigError, DataError
from .corpus_report import REPORT_FILE, CorpusReport, build_report, read_report
from .packing import (
    data_tokenizer,
    map_batch_rows,
    tokenize_batch,
    tokenize_rows_as_lists,
    tokenized_features,
    write_blocks,
)
from .raw_corpus import load_raw_corpus
from .settings import check_block_size
from .sources import Sources
from .tokenizer import tokenizer_fingerprint

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

CACHE_FORMAT_VERSION = 2  # bump when the pipeline's output changes for the same inputs
META_FILE = "meta.json"
PARALLELISM_VARIABLE = "TOKENIZERS_PARALLELISM"  # read by tokenizers at each call


@dataclass
class SplitStats:
    """Sizes of one prepared split. (Bits per byte sums the bytes of the scored tokens instead:
    `minigpt.data.token_bytes`.)"""

    documents: int  # documents (a text file, or a json/parquet row) in the split
    bytes: int  # UTF-8 bytes of the split's text
    tokens: int  # tokens of the split, one EOS per document end included
    blocks: int  # packed rows of block_size tokens
    dropped_tokens: int  # last tokens of the split that did not fill a block (< block_size)


@dataclass
class PreparedCorpus:
    """Packed train and validation blocks: columns `input_ids` and `labels` (equal), int32."""

    train: datasets.Dataset  # memory-mapped from cache_dir/train.arrow; rows of block_size tokens
    validation: datasets.Dataset  # memory-mapped from cache_dir/validation.arrow
    train_stats: SplitStats
    validation_stats: SplitStats
    block_size: int  # tokens per row
    vocab_size: int  # len(tokenizer) the blocks were made with
    eos_token_id: int  # id placed between documents
    tokenizer_fingerprint: str  # tokenization.tokenizer_fingerprint of that tokenizer
    cache_dir: Path  # the folder holding this corpus's blocks
    reused: bool  # True when the blocks came from the cache
    report: CorpusReport | None = None  # the corpus report (prepare_corpus; None for conversations)

    @property
    def validation_bytes_per_token(self) -> float:
        """Bytes of validation text per token of the split (its end-of-text separators included)."""
        return self.validation_stats.bytes / self.validation_stats.tokens

    def describe(self) -> str:
        """Lines for a CLI: sizes per split and where the blocks live."""
        lines = [
            f"blocks of {self.block_size} tokens in {self.cache_dir}" + (" (reused)" if self.reused else "")
        ]
        for name, s in (("train", self.train_stats), ("validation", self.validation_stats)):
            lines.append(
                f"  {name}: {plural(s.documents, 'document')}, {s.bytes:,} bytes, {s.tokens:,} tokens "
                f"({s.bytes / s.tokens:.2f} bytes/token), {plural(s.blocks, 'block')}, {plural(s.dropped_tokens, 'token')} left over"
            )
        return "\n".join(lines)


def cache_key(sources: Sources, tokenizer_id: str) -> str:
    """Hash of what decides the blocks; not num_proc, batch_size, streaming, progress bars, how
    training reads them (shift_blocks) or the report's sample (the report is redone alone)."""
    decisive = asdict(sources.settings)
    left_out = ("cache_dir", "num_proc", "batch_size", "streaming", "show_progress", "format", "shift_blocks")
    for key in (*left_out, "report_max_documents"):
        decisive.pop(key)
    if not decisive["dedup"]:  # off: the keys of blocks prepared before data.dedup existed
        decisive.pop("dedup")
    decisive.update(format=sources.train.format, tokenizer=tokenizer_id, inputs=sources.key, version=CACHE_FORMAT_VERSION)
    return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:20]


@contextlib.contextmanager
def _frozen_gc(active: bool) -> Iterator[None]:
    """Keep forked map workers from copying the parent's heap.

    A worker's garbage collector walks the objects it inherited, which writes to their pages and
    makes copy-on-write duplicate them (hundreds of MB per worker with torch imported, growing
    with the work done); frozen objects are never walked.
    """
    if active:
        gc.collect()
        gc.freeze()
    try:
        yield
    finally:
        if active:
            gc.unfreeze()


@contextlib.contextmanager
def _single_threaded_tokenizers(active: bool) -> Iterator[None]:
    """Map workers that tokenize with one thread each (one process per core already uses the
    cores; threads on top would only contend), and without tokenizers' warning about a fork after
    its threads ran (the tokenizer may have just been trained in this process). Forked workers
    inherit the variable; it is put back for this process, which tokenizes with threads alone."""
    if not active:
        yield
        return
    saved = os.environ.get(PARALLELISM_VARIABLE)
    os.environ[PARALLELISM_VARIABLE] = "false"
    try:
        yield
    finally:
        if saved is None:
            del os.environ[PARALLELISM_VARIABLE]
        else:
            os.environ[PARALLELISM_VARIABLE] = saved


def prepare_corpus(
    sources: Sources, tokenizer: PreTrainedTokenizerFast, max_position_embeddings: int | None = None
) -> PreparedCorpus:
    """Packed, cached train/validation blocks of `data.block_size` tokens of `sources` for `tokenizer`.

    Raises `DataError`/`ConfigError` (one line) for unusable data or settings; leaves no partial
    cache behind. Pass the model's `max_position_embeddings` to check block_size against it early.
    """
    settings = sources.settings
    if max_position_embeddings is not None:
        check_block_size(settings.block_size, max_position_embeddings)
    if tokenizer.eos_token_id is None:
        raise ConfigError("the tokenizer has no eos_token; documents cannot be separated")
    tokenizer_id = tokenizer_fingerprint(tokenizer)
    target = Path(settings.cache_dir) / "blocks" / cache_key(sources, tokenizer_id)
    if (target / META_FILE).is_file():
        if is_main_process():  # under `accelerate launch` the other processes load silently
            print(f"reusing prepared blocks in {target}")
        corpus = load_prepared(target)
        corpus.report = read_report(target, settings) or _report_again(target, sources, corpus)
        return corpus
    print(f"preparing blocks in {target}")
    with datasets_progress_bars(settings.show_progress), atomic_output_dir(target) as staging:
        meta = _prepare_into(staging, sources, tokenizer)
        # the sources by count and first name: a list of every file would grow with the corpus
        files = sources.train.paths + (sources.validation.paths if sources.validation else [])
        meta.update(tokenizer_fingerprint=tokenizer_id, format=sources.train.format, source_files=len(files))
        meta.update(first_source=str(files[0]))
        (staging / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    corpus = load_prepared(target)
    corpus.reused = False
    corpus.report = read_report(target, settings)
    return corpus


def _report_again(target: Path, sources: Sources, corpus: PreparedCorpus) -> CorpusReport:
    """The report for cached blocks that have none, or one of another sample: the raw text compared
    again (datasets' Arrow copy of it) and the report saved beside the blocks."""
    with datasets_progress_bars(sources.settings.show_progress):
        raw = load_raw_corpus(sources)
    report = build_report(raw, sources.settings, corpus.train_stats.tokens, corpus.validation_stats.tokens)
    with atomic_write_file(target / REPORT_FILE) as handle:
        json.dump(report.to_dict(), handle, indent=2)
    return report


def _prepare_into(staging: Path, sources: Sources, tokenizer: PreTrainedTokenizerFast) -> dict:
    """Tokenize and pack both splits into `staging`; return the meta record (stats per split)."""
    settings = sources.settings
    raw = load_raw_corpus(sources)
    backend = data_tokenizer(tokenizer)
    work = staging / "work"  # intermediate tokenized Arrow files, deleted before the rename
    work.mkdir()
    stats = {}
    for split in (raw.train, raw.validation):
        kwargs = dict(tokenizer=backend, eos_id=tokenizer.eos_token_id)
        columns = ["text", "end"] if split.by_document else ["text"]  # text files' rows: end of a document
        batch = map_batch_rows(split, settings.batch_size)
        common = dict(batched=True, batch_size=batch, input_columns=columns, fn_kwargs=kwargs)
        if settings.streaming:  # lazily mapped as the packer reads; one process
            tokenized = split.dataset.map(
                tokenize_rows_as_lists, remove_columns=split.dataset.column_names, **common
            )
        else:
            processes = min(settings.processes(), max(1, -(-split.rows // batch)))
            with _frozen_gc(processes > 1), _single_threaded_tokenizers(processes > 1):
                tokenized = split.dataset.map(
                    tokenize_batch,
                    remove_columns=split.dataset.column_names,
                    features=tokenized_features(),
                    num_proc=processes if processes > 1 else None,
                    cache_file_name=str(work / f"tokenized-{split.name}.arrow"),
                    desc=f"tokenizing {split.name}",
                    **common,
                )
        packed = write_blocks(
            tokenized,
            staging / f"{split.name}.arrow",
            settings.block_size,
            split.rows,
            settings.show_progress,
        )
        del tokenized
        stats[split.name] = SplitStats(
            split.documents, split.bytes, packed.tokens, packed.blocks, packed.dropped_tokens
        )
    shutil.rmtree(work)
    short = {name: s.tokens for name, s in stats.items() if s.blocks == 0}
    if short:
        sizes = ", ".join(f"{name} has {tokens:,}" for name, tokens in short.items())
        raise DataError(
            f"corpus too small for data.block_size={settings.block_size}: the {sizes} tokens, and each split needs "
            "at least one full block; add text, lower data.block_size or change data.validation_fraction"
        )
    report = build_report(raw, settings, stats["train"].tokens, stats["validation"].tokens)
    (staging / REPORT_FILE).write_text(json.dumps(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    return {
        "block_size": settings.block_size,
        "vocab_size": len(tokenizer),
        "eos_token_id": tokenizer.eos_token_id,
        "stats": {name: asdict(s) for name, s in stats.items()},
        "settings": asdict(settings),
    }


def load_prepared(folder: str | Path) -> PreparedCorpus:
    """Open a prepared-blocks folder written by `prepare_corpus` (memory-mapped, nothing copied)."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{folder} holds no prepared blocks ({META_FILE} missing)") from None
    splits = {
        name: datasets.Dataset.from_file(str(folder / f"{name}.arrow")) for name in ("train", "validation")
    }
    stats = {name: SplitStats(**meta["stats"][name]) for name in splits}
    for name, dataset in splits.items():
        if dataset.num_rows != stats[name].blocks:
            raise DataError(
                f"{folder}/{name}.arrow has {dataset.num_rows} blocks, {META_FILE} says {stats[name].blocks}"
            )
    return prepared_from_meta(folder, meta, splits)


def prepared_from_meta(folder: Path, meta: dict, splits: dict[str, datasets.Dataset]) -> PreparedCorpus:
    """A reused `PreparedCorpus` from a cache folder's meta record and its opened train/validation
    splits (text blocks here, encoded conversations in `minigpt.data.chat_corpus`)."""
    return PreparedCorpus(
        train=splits["train"],
        validation=splits["validation"],
        train_stats=SplitStats(**meta["stats"]["train"]),
        validation_stats=SplitStats(**meta["stats"]["validation"]),
        block_size=meta["block_size"],
        vocab_size=meta["vocab_size"],
        eos_token_id=meta["eos_token_id"],
        tokenizer_fingerprint=meta["tokenizer_fingerprint"],
        cache_dir=folder,
        reused=True,
    )
