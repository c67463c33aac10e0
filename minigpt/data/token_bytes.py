"""How many UTF-8 bytes of text each token id stands for, and the per-row sums bits per byte is made of.

Bits per byte is the summed loss (nats) of the tokens that encode a text over the bytes they encode,
/ ln 2. A byte-level BPE token (MiniGPT's, GPT-2's, Llama 3's) is a fixed byte string written one
character per byte, so the bytes of any run of tokens are the sum of their lengths: exact. Special
tokens (end of text, padding) encode none: 0, which is also how their loss is left out of bits per
byte (lm-evaluation-harness's `bits_per_byte`; it stays in the token loss). Other tokenizers get each
token's decoded length after a plain token, so a leading space counts: an estimate.
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

BYTE_FALLBACK = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")  # SentencePiece's byte tokens, e.g. <0x0A>


def token_byte_lengths(tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """(len(tokenizer),) int64: the UTF-8 bytes each token id encodes; 0 for special tokens."""
    backend = tokenizer.backend_tokenizer
    vocab = backend.get_vocab(with_added_tokens=True)  # {token string: id}
    added = backend.get_added_tokens_decoder()  # {id: AddedToken}: literal strings, not byte-mapped
    lengths = np.zeros(max(len(tokenizer), max(vocab.values()) + 1), dtype=np.int64)
    spec = json.loads(backend.to_str())
    decoder = spec.get("decoder") or {}
    byte_level = "ByteLevel" in [d.get("type") for d in decoder.get("decoders", [decoder])] and not spec.get("normalizer")
    anchor = next((t for t, i in vocab.items() if i not in added and t.isascii() and t.isalpha()), "a")  # a plain token
    for token, index in vocab.items():
        if index in added:
            lengths[index] = 0 if added[index].special else len(added[index].content.encode("utf-8"))
        elif byte_level:
            lengths[index] = len(token)  # one character per byte (GPT-2's bytes_to_unicode)
        elif BYTE_FALLBACK.match(token):
            lengths[index] = 1
        else:  # after a plain token, so a decoder that strips a leading space keeps this one's
            pair = backend.decoder.decode([anchor, token]) if backend.decoder else anchor + token
            alone = backend.decoder.decode([anchor]) if backend.decoder else anchor
            lengths[index] = max(0, len(pair.encode("utf-8")) - len(alone.encode("utf-8")))
    return lengths


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
