"""Per-row sums of next-token losses, with the text apart from the separators: what bits per byte adds up.

Bits per byte is the summed loss (nats) of the predicted tokens that encode the text, over the
bytes they encode, / ln 2 (lm-evaluation-harness's `bits_per_byte`). A packed block also predicts
the end-of-text separators between documents, which encode no byte: their loss stays in the token
loss (what training minimises) but not in bits per byte. Training's evaluation (`MiniGPTTrainer`)
and `scripts/evaluate.py` both sum through `next_token_scores`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

IGNORE_INDEX = -100  # a target that is not scored (transformers' convention)
SCORE_COLUMNS = ("nll_sum", "num_tokens", "text_nll_sum", "num_text_tokens", "num_bytes")


def next_token_scores(logits: torch.Tensor, targets: torch.Tensor, token_bytes: torch.Tensor) -> torch.Tensor:
    """(B, 5) float32, one row per sequence, columns `SCORE_COLUMNS`: nats of the scored predictions,
    their count, the nats of those whose target encodes text (bytes > 0), their count, their bytes.

    logits: (B, T, V), position t predicting `targets[:, t]`; targets: (B, T), IGNORE_INDEX where
    nothing is scored; token_bytes: (>= V,) bytes per token id (`minigpt.data.token_bytes`).
    """
    scored = targets != IGNORE_INDEX  # (B, T)
    nll = F.cross_entropy(
        logits.float().transpose(1, 2), targets, ignore_index=IGNORE_INDEX, reduction="none"
    )  # (B, T), 0 where not scored; float32 as the model's own loss
    nbytes = token_bytes.to(targets.device)[targets.clamp(min=0)] * scored  # (B, T)
    text = nbytes > 0  # (B, T): separators and other special tokens encode no byte
    columns = (nll.sum(1), scored.sum(1), (nll * text).sum(1), text.sum(1), nbytes.sum(1))
    return torch.stack([c.float() for c in columns], dim=1)


def block_targets(labels: torch.Tensor) -> torch.Tensor:
    """(B, T) targets of packed blocks: position t predicts token t + 1; the last position nothing
    (a block's first token is never predicted, as in the model's own shifted loss)."""
    return F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)


def bits_per_byte(scores: np.ndarray) -> float:
    """Bits per byte of summed `next_token_scores` rows ((N, 5) or (5,)): text nats / bytes / ln 2."""
    totals = np.asarray(scores, dtype=np.float64).reshape(-1, len(SCORE_COLUMNS)).sum(axis=0)
    text_nats, num_bytes = totals[2], totals[4]
    return float(text_nats / num_bytes / math.log(2)) if num_bytes > 0 else math.nan


__all__ = ["IGNORE_INDEX", "SCORE_COLUMNS", "bits_per_byte", "block_targets", "next_token_scores"]
