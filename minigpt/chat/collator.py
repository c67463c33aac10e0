"""Batches of conversations: padded on the right to the batch's longest, the padding never scored.

Right padding needs no attention mask: attention is causal, so a pad token after a conversation
changes nothing before it, and its label is `IGNORE_INDEX`. Rotary or learned positions start at 0
for every row, as they would for the conversation alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .encoding import IGNORE_INDEX


class ChatCollator:
    """`data_collator` for encoded conversations (rows of `input_ids` and `labels` of any length)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        longest = max(len(row["input_ids"]) for row in rows)
        input_ids = torch.full((len(rows), longest), self.pad_token_id, dtype=torch.long)  # (B, T)
        labels = torch.full((len(rows), longest), IGNORE_INDEX, dtype=torch.long)  # (B, T)
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            input_ids[i, :n] = torch.as_tensor(row["input_ids"], dtype=torch.long)
            labels[i, :n] = torch.as_tensor(row["labels"], dtype=torch.long)
        return {"input_ids": input_ids, "labels": labels}


__all__ = ["ChatCollator"]
