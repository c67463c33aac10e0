"""How many UTF-8 bytes of text each token id stands for: what bits per byte divides by.

Bits per byte is the summed loss (nats) of the tokens that encode a text, over the bytes they
encode, / ln 2. A byte-level BPE token (MiniGPT's tokenizers, GPT-2's, Llama 3's, Qwen's) is a
fixed byte string written one vocabulary character per byte, so the bytes of any run of tokens are
the sum of their lengths: exact, whatever the run (a training block, a window, a sample of them).
Special tokens (the end-of-text separator between documents, padding) encode no byte of the text:
0, which is also how bits per byte tells them apart from text. nanochat counts the same way.

Other tokenizers (SentencePiece-style "▁" spaces, byte fallback) get each token's decoded length
after a plain token, so that a leading space counts; a byte-fallback piece of a multi-byte
character counts 1. That is an estimate: a normalizer may have changed the text before encoding.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerBase

BYTE_FALLBACK = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")  # SentencePiece's byte tokens, e.g. <0x0A>


def is_byte_level(backend: Tokenizer) -> bool:
    """True when every non-special token is a byte string (ByteLevel decoder, no normalizer)."""
    spec = json.loads(backend.to_str())
    decoder = spec.get("decoder") or {}
    kinds = [part.get("type") for part in decoder.get("decoders", [decoder])]
    return "ByteLevel" in kinds and spec.get("normalizer") is None


def token_byte_lengths(tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """(len(tokenizer),) int64: the UTF-8 bytes each token id encodes; 0 for special tokens."""
    backend = tokenizer.backend_tokenizer
    vocab = backend.get_vocab(with_added_tokens=True)  # {token string: id}
    added = backend.get_added_tokens_decoder()  # {id: AddedToken}: literal strings, not byte-mapped
    lengths = np.zeros(max(len(tokenizer), max(vocab.values()) + 1), dtype=np.int64)
    byte_level = is_byte_level(backend)
    anchor = _plain_token(vocab, added)
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


def _plain_token(vocab: dict[str, int], added: dict) -> str:
    """A vocabulary token of ASCII letters only, to decode other tokens after."""
    return next((t for t, i in vocab.items() if i not in added and t.isascii() and t.isalpha()), "a")


__all__ = ["is_byte_level", "token_byte_lengths"]
