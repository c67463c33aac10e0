"""The validation blocks a periodic evaluation reads: all of them, or a fixed sample within a budget.

`training.eval_tokens` caps the tokens an evaluation reads (nanochat's `eval_tokens`), so its cost
follows the budget and not the corpus: a split larger than the cap is evaluated on
`eval_tokens // block_size` blocks drawn without replacement from a generator seeded with
`data.seed` (the seed of the split itself), in file order. The draw depends only on the seed and
the split's size, so every evaluation of a run (and of its resumed continuation) reads the same
blocks, and so does every process: Accelerate shards the sampled blocks, after sampling. Runs that
differ only in `training.seed` read the same blocks too, so their spread is the training's, not
the sample's.
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets
import numpy as np

from ..console import plural


@dataclass
class ValidationSample:
    """The blocks evaluations read and the split they come from."""

    blocks: datasets.Dataset  # what the Trainer evaluates on: the split, or a `select` of it
    total: int  # blocks in the validation split
    eval_tokens: int | None  # the budget it was drawn for (None: no budget)
    rows: str = "blocks"  # what a row is: packed "blocks" or "conversations"

    @property
    def sampled(self) -> bool:
        return len(self.blocks) < self.total

    def describe(self) -> str:
        """What the run's first lines say about its evaluations."""
        if not self.sampled:
            return f"evaluation reads all {plural(self.total, 'validation ' + self.rows[:-1])}"
        return (
            f"evaluation reads a fixed sample of {len(self.blocks):,} of {self.total:,} validation {self.rows} "
            f"(training.eval_tokens={self.eval_tokens:,})"
        )


def sample_indices(total: int, count: int, seed: int) -> np.ndarray:
    """`count` distinct indices of range(total) drawn with `seed`, ascending (all when count >= total)."""
    if count >= total:
        return np.arange(total)
    return np.sort(np.random.default_rng(seed).choice(total, size=count, replace=False))


def validation_sample(
    validation: datasets.Dataset, eval_tokens: int | None, block_size: int, seed: int, rows: str = "blocks"
) -> ValidationSample:
    """The validation blocks an evaluation reads: at most `eval_tokens` tokens' worth (at least one
    block), drawn with `seed`; the whole split when it is that small or `eval_tokens` is None."""
    total = len(validation)
    if eval_tokens is None or eval_tokens >= total * block_size:
        return ValidationSample(validation, total, eval_tokens, rows)
    indices = sample_indices(total, max(1, eval_tokens // block_size), seed)
    return ValidationSample(validation.select(indices), total, eval_tokens, rows)


__all__ = ["ValidationSample", "sample_indices", "validation_sample"]
