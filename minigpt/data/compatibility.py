"""Checks that the tokenizer, the prepared blocks and the model agree, before any training starts.

A model whose embedding has fewer rows than the tokenizer has ids crashes mid-run (index error
on the first rare token); one with other special-token ids generates and pads with the wrong
tokens; blocks made by another tokenizer train on ids that mean something else. Each is a
one-line `ConfigError` here instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError
from .corpus import PreparedCorpus
from .settings import check_block_size
from .tokenizer import tokenizer_fingerprint

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast


def check_compatible(
    tokenizer: PreTrainedTokenizerFast,
    vocab_size: int,
    *,
    max_position_embeddings: int | None = None,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    corpus: PreparedCorpus | None = None,
    allow_larger_vocab: bool = False,
) -> None:
    """Raise `ConfigError` unless tokenizer, model config values and prepared corpus agree.

    `vocab_size` and the `*_token_id`s are the model config's (ids left None are not checked).
    The model's vocabulary must equal `len(tokenizer)`, or exceed it when `allow_larger_vocab`
    (an embedding padded to a multiple of 64 for speed, say).
    """
    size = len(tokenizer)  # includes added special tokens, unlike tokenizer.vocab_size
    if vocab_size < size or (vocab_size > size and not allow_larger_vocab):
        raise ConfigError(f"the model's vocab_size is {vocab_size} but the tokenizer has {size} tokens")
    for name, model_id in (("bos", bos_token_id), ("eos", eos_token_id), ("pad", pad_token_id)):
        token_id = getattr(tokenizer, f"{name}_token_id")
        if model_id is not None and model_id != token_id:
            raise ConfigError(f"the model's {name}_token_id is {model_id} but the tokenizer's is {token_id}")
    if corpus is None:
        return
    if corpus.tokenizer_fingerprint != tokenizer_fingerprint(tokenizer):
        raise ConfigError(
            f"the prepared blocks in {corpus.cache_dir} were tokenized by another tokenizer; prepare the data again"
        )
    if corpus.vocab_size != size or corpus.eos_token_id != tokenizer.eos_token_id:
        raise ConfigError(
            f"the prepared blocks in {corpus.cache_dir} use vocab {corpus.vocab_size} and eos id "
            f"{corpus.eos_token_id}, the tokenizer {size} and {tokenizer.eos_token_id}"
        )
    if max_position_embeddings is not None:
        check_block_size(corpus.block_size, max_position_embeddings)
