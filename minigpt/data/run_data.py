"""What the data stage hands to training, whatever the data's format: one call, one object.

`prepare_run_data` turns the `data:` section and a tokenizer into `RunData`: the training
set as training reads it (packed text blocks, maybe shifted each epoch; or encoded conversations),
the validation rows every evaluation reads (`validation_sample`), the batch collator, each token's
UTF-8 bytes (bits per byte), the ids generation stops at, and the lines a run prints about it.
Training never asks which format it got.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from transformers import PreTrainedTokenizerFast, default_data_collator

from ..console import plural
from .chat_corpus import prepare_chat_corpus
from .chat_encoding import ChatCollator
from .chat_template import add_chat_tokens, stop_token_ids
from .corpus import PreparedCorpus, prepare_corpus
from .corpus_report import CorpusReport
from .sample_prompts import corpus_prompts
from .settings import DataSettings
from .token_bytes import token_byte_lengths
from .training_blocks import TrainingBlocks
from .validation_sample import ValidationSample, validation_sample


@dataclass
class RunData:
    """Everything training needs of the data, for any `data.format`."""

    train: Any  # a torch Dataset of {"input_ids", "labels"} rows
    evaluation: ValidationSample  # the validation rows every evaluation reads, and of how many
    collator: Callable[[list[dict[str, Any]]], dict[str, Any]]
    token_bytes: np.ndarray  # (len(tokenizer),) UTF-8 bytes per token id: bits per byte counts text bytes
    stop_token_ids: list[int]  # generation ends at these (a chat reply at <|im_end|> too)
    corpus: PreparedCorpus  # sizes, vocabulary and tokenizer the rows were made with
    notes: list[str]  # what preparing changed that a run should say (chat tokens added, say)
    added_token_ids: list[int]  # tokens preparing added to the tokenizer: a trained model needs rows for them
    description: str  # the run's "data:" line
    sample_prompts: list[str]  # openings of validation lines or conversations: samples of a config naming none
    # sizes, duplicates and validation copies of the text before training (corpus_report.py); None
    # for conversations. Training adds its plan, prints it and writes it into the run's folder.
    report: CorpusReport | None = None

    def start_epoch(self, epoch: int) -> None:
        """Shifted blocks move to `epoch`'s offset in the token stream; anything else stays."""
        if isinstance(self.train, TrainingBlocks):
            self.train.start_epoch(epoch)


def prepare_run_data(
    settings: DataSettings,
    tokenizer: PreTrainedTokenizerFast,
    *,
    seed: int,
    eval_tokens: int | None,
    max_position_embeddings: int | None = None,
) -> RunData:
    """The training and validation rows of `settings` for `tokenizer`, prepared or read from the cache.

    Conversations (`data.format: chat`) need ChatML's role tokens: a tokenizer without them gets
    them here, in place (a note says so), before anything is encoded. `seed` (training.seed) draws
    each epoch's block offset; `settings.seed` (data.seed) the validation sample (at most
    `eval_tokens` tokens' worth, None: all), so runs that differ only in training.seed are scored on
    the same blocks.
    """
    notes, added = [], []
    if settings.format == "chat":
        note, added = add_chat_tokens(tokenizer)
        notes += [note] if note else []
        corpus = prepare_chat_corpus(settings, tokenizer, max_position_embeddings=max_position_embeddings)
        train: Any = corpus.train
        collator: Callable = ChatCollator(tokenizer.pad_token_id)  # padded to each batch's longest
        rows, what = "conversations", f"of up to {settings.block_size} tokens, padded per batch"
        stops = stop_token_ids(tokenizer)  # a reply ends at the end of its turn
    else:
        corpus = prepare_corpus(settings, tokenizer, max_position_embeddings=max_position_embeddings)
        train = TrainingBlocks(corpus.train, seed=seed, shift=settings.shift_blocks)  # zero-copy reads
        collator = default_data_collator  # equal-length blocks: stacked, no mask
        rows, what = "blocks", f"of {settings.block_size} tokens"
        stops = [tokenizer.eos_token_id]  # text ends at the end of a document
    evaluation = validation_sample(corpus.validation, eval_tokens, settings.block_size, settings.seed, rows=rows)
    description = (
        f"data: {plural(len(corpus.train), f'training {rows[:-1]}')}, "
        f"{plural(len(corpus.validation), f'validation {rows[:-1]}')} {what}; {evaluation.describe()}"
    )
    return RunData(
        train=train,
        evaluation=evaluation,
        collator=collator,
        token_bytes=token_byte_lengths(tokenizer),
        stop_token_ids=stops,
        corpus=corpus,
        notes=notes,
        added_token_ids=added,
        description=description,
        sample_prompts=corpus_prompts(corpus.validation, tokenizer, chat=settings.format == "chat"),
        report=corpus.report,
    )


__all__ = ["RunData", "prepare_run_data"]
