"""The text a tokenizer trains on: the whole train split, or a seeded sample when it is larger than
`tokenizer.train_max_bytes`.

BPE training reads all of its text and keeps a count of every distinct word: at 10 GB that is
hours and tens of GB of memory, while the merges it learns settle long before (nanochat trains its
tokenizer on 2 B characters of a far larger corpus). So a split over the budget is sampled: each
row (a document, or a piece of up to 64K characters of a long text file) is kept when its seeded
draw is under p = budget / (the split's bytes, each row counted up to `doc_max_chars`), so the
sample spreads over every file and document, not the first ones; each kept row gives its first
`doc_max_chars` characters (one huge document cannot fill the sample), and the sample stops at the
budget. A split within the budget is read whole, as it always was.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import datasets
import numpy as np

from ..console import plural
from .settings import TokenizerSettings, seeded_unit
from .sources import RawSplit, arrow_batches, row_bytes, size_columns

SAMPLE_SEED_SALT = 0x70C5A3E1  # the sample's draw is another than the validation split's (same data.seed)
DRAW_CHUNK = 1 << 20  # rows drawn at a time


@dataclass
class SamplePlan:
    """How a train split over the budget is sampled (what a tokenizer's record keeps)."""

    max_bytes: int  # tokenizer.train_max_bytes
    doc_max_chars: int  # tokenizer.doc_max_chars (0: whole rows)
    seed: int  # data.seed, which draws the rows

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def sample_plan(settings: TokenizerSettings, split_bytes: int, seed: int) -> SamplePlan | None:
    """The plan for a train split of `split_bytes`, or None when it is read whole."""
    if not settings.train_max_bytes or split_bytes <= settings.train_max_bytes:
        return None
    return SamplePlan(settings.train_max_bytes, settings.doc_max_chars, seed)


@dataclass
class TrainingText:
    """The texts a tokenizer trains on, and (once they have been read) how much was taken."""

    texts: Iterator[str]
    rows: int  # rows to be read (the trainer's progress bar)
    plan: SamplePlan | None  # None: the whole split
    split: RawSplit
    bytes_read: int = 0  # UTF-8 bytes given to the trainer so far
    rows_read: int = 0
    expected_bytes: int = 0  # what a sample will read: the budget, or less where the rows' heads hold less

    def describe(self) -> str:
        """The split, or the sample of it, in words (before training: the sample's budget)."""
        if self.plan is None:
            return self.split.describe()
        cap = f", at most {self.plan.doc_max_chars:,} characters of each" if self.plan.doc_max_chars else ""
        return (
            f"a sample of {self.split.describe()}: up to {self.expected_bytes:,} bytes "
            f"({self.expected_bytes / self.split.bytes:.1%}) from {plural(self.rows, 'row')} drawn across all of it"
            f"{cap} (tokenizer.train_max_bytes={self.plan.max_bytes:,}, data.seed={self.plan.seed})"
        )

    def record(self) -> dict[str, Any] | None:
        """What the tokenizer's record keeps of the sample: the plan, and the bytes and rows read."""
        if self.plan is None:
            return None
        return {**self.plan.to_dict(), "bytes": self.bytes_read, "rows": self.rows_read}


def training_text(split: RawSplit, settings: TokenizerSettings, seed: int) -> TrainingText:
    """The texts of `split` a tokenizer with `settings` trains on: all of them, or a sample."""
    plan = sample_plan(settings, split.bytes, seed)
    if plan is None:
        text = TrainingText(iter(()), split.rows, None, split)
        text.texts = _counted(text, _all_texts(split))
        return text
    kept = _drawn(split, plan)
    text = TrainingText(iter(()), kept.rows, plan, split, expected_bytes=kept.expected_bytes)
    text.texts = _counted(text, _sample_texts(kept.dataset, plan))
    return text


def _all_texts(split: RawSplit) -> Iterator[str]:
    for table in arrow_batches(split.dataset, columns=["text"]):
        yield from (text for text in table.column("text").to_pylist() if text)


def _counted(text: TrainingText, texts: Iterator[str]) -> Iterator[str]:
    """`texts`, counting what is read into `text`; a sample stops at its budget."""
    budget = text.plan.max_bytes if text.plan is not None else None
    for piece in texts:
        size = len(piece.encode("utf-8"))
        if budget is not None and text.bytes_read + size > budget:
            piece = piece.encode("utf-8")[: budget - text.bytes_read].decode("utf-8", errors="ignore")
            size = len(piece.encode("utf-8"))
        if size:
            text.bytes_read, text.rows_read = text.bytes_read + size, text.rows_read + 1
            yield piece
        if budget is not None and text.bytes_read >= budget:
            return


@dataclass
class _Kept:
    dataset: datasets.Dataset | datasets.IterableDataset
    rows: int
    expected_bytes: int


def _capped_bytes(split: RawSplit, plan: SamplePlan) -> int:
    """The split's bytes with each row counted up to doc_max_chars (bytes for characters: the rows'
    sizes are in bytes), in one pass over the rows' sizes (not the text of text files' rows)."""
    capped = 0
    for table in arrow_batches(split.dataset, columns=size_columns(split.dataset)):
        sizes = row_bytes(table)
        capped += int(np.minimum(sizes, plan.doc_max_chars).sum()) if plan.doc_max_chars else int(sizes.sum())
    return capped


def _drawn(split: RawSplit, plan: SamplePlan) -> _Kept:
    """The rows of `split` the sample keeps: each with p = budget / capped bytes, by a seeded draw
    of its index."""
    capped = _capped_bytes(split, plan)
    p = min(1.0, plan.max_bytes / max(capped, 1))
    expected = min(plan.max_bytes, capped)
    seed = plan.seed ^ SAMPLE_SEED_SALT
    if isinstance(split.dataset, datasets.IterableDataset):  # a stream: filtered as it is read
        kept = split.dataset.filter(
            lambda indices: list(seeded_unit(np.asarray(indices), seed) < p),
            batched=True,
            with_indices=True,
            input_columns=[],
        )
        return _Kept(kept, int(round(p * split.rows)), expected)
    picked = np.concatenate(  # in chunks: memory for the rows kept, not for every row
        [
            start + np.flatnonzero(seeded_unit(np.arange(start, min(start + DRAW_CHUNK, split.rows)), seed) < p)
            for start in range(0, split.rows, DRAW_CHUNK)
        ]
    )
    return _Kept(split.dataset.select(picked), len(picked), expected)  # rows in order: read front to back


def _sample_texts(dataset, plan: SamplePlan) -> Iterator[str]:
    for table in arrow_batches(dataset, columns=["text"]):
        for text in table.column("text").to_pylist():
            if text:
                yield text[: plan.doc_max_chars] if plan.doc_max_chars else text


__all__ = ["SamplePlan", "TrainingText", "sample_plan", "training_text"]
