"""What the data stage hands to training, whatever the data's format: `prepare_run_data` -> `RunData`.
`data.shift_blocks` and the validation sample drawn for `training.eval_tokens`: docs/data.md.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import datasets
import numpy as np
import torch
from transformers import PreTrainedTokenizerFast, default_data_collator

from ..console import plural
from .chat_data import ChatCollator, prepare_chat_corpus
from .chat_template import add_chat_tokens, stop_token_ids
from .corpus import PreparedCorpus, prepare_corpus
from .corpus_report import CorpusReport
from .sources import Sources
from .token_bytes import IGNORE_INDEX, token_byte_lengths

ROWS_READ = 64  # validation rows a search for prompts looks at, at most


def epoch_offset(seed: int, epoch: int, block_size: int) -> int:
    """Where epoch `epoch`'s blocks start in the token stream: 0 for epoch 0, else drawn from (seed, epoch)."""
    return 0 if epoch == 0 else int(np.random.default_rng([seed, epoch]).integers(block_size))


class TrainingBlocks(torch.utils.data.Dataset):
    """A packed training split read from zero-copy views of its memory-mapped Arrow file; with `shift`,
    from `epoch_offset`. Items: {"input_ids": (block_size,) int64, "labels": the same tensor}. Not
    `set_epoch`: accelerate calls that in one process and not under several."""

    def __init__(self, blocks: datasets.Dataset, seed: int, shift: bool) -> None:
        if shift and len(blocks) < 2:
            raise ValueError(f"shifting blocks needs at least 2 packed blocks, got {len(blocks)}")
        if blocks._indices is not None:  # a select/shuffle view: rows in file order first
            blocks = blocks.flatten_indices()
        column = blocks.data.column("input_ids")  # ChunkedArray of fixed-size lists of int32
        self.block_size = column.type.list_size
        self._chunks = [  # one (rows, block_size) view per Arrow chunk
            chunk.flatten().to_numpy(zero_copy_only=True).reshape(-1, self.block_size) for chunk in column.chunks if len(chunk)
        ]
        self._chunk_starts = np.cumsum([0] + [len(c) for c in self._chunks[:-1]]).tolist()
        self.num_blocks, self.shift, self.seed = len(blocks), shift, seed
        self.epoch = self.offset = 0

    def start_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.offset = epoch_offset(self.seed, epoch, self.block_size) if self.shift else 0

    def __len__(self) -> int:
        return self.num_blocks - 1 if self.shift else self.num_blocks

    def _row(self, index: int) -> np.ndarray:
        chunk = bisect.bisect_right(self._chunk_starts, index) - 1
        return self._chunks[chunk][index - self._chunk_starts[chunk]]

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"block {index} out of range for {len(self)} blocks")
        row = self._row(index)
        if self.offset:
            row = np.concatenate([row[self.offset :], self._row(index + 1)[: self.offset]])
        ids = torch.from_numpy(row.astype(np.int64))  # (block_size,), a copy: the map stays read-only
        return {"input_ids": ids, "labels": ids}


@dataclass
class ValidationSample:
    """The validation rows evaluations read and the split they come from."""

    blocks: datasets.Dataset  # what the Trainer evaluates on: the split, or a `select` of it
    total: int  # rows in the validation split
    eval_tokens: int | None  # the budget it was drawn for (None: no budget)
    rows: str = "blocks"  # what a row is: packed "blocks" or "conversations"

    @property
    def sampled(self) -> bool:
        return len(self.blocks) < self.total

    def describe(self) -> str:
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
    """At most `eval_tokens` tokens' worth of validation rows (at least one), drawn with `seed`; the
    whole split when it is that small or `eval_tokens` is None."""
    total = len(validation)
    if eval_tokens is None or eval_tokens >= total * block_size:
        return ValidationSample(validation, total, eval_tokens, rows)
    indices = sample_indices(total, max(1, eval_tokens // block_size), seed)
    return ValidationSample(validation.select(indices), total, eval_tokens, rows)


def spread_rows(total: int, count: int) -> list[int]:
    """Up to `count` row indices spread evenly over range(total), first row first."""
    count = min(count, total)
    return sorted({i * total // count for i in range(count)}) if count else []


def line_opening(ids: list[int], tokenizer: PreTrainedTokenizerFast, max_tokens: int) -> tuple[str, bool]:
    """The first line with text that starts inside `ids` (a document's first line, after an EOS,
    before any other), from its first word to its newline, of at most `max_tokens` tokens, and True;
    else the first whole words of the first longer one and False; ("", False) when no line with text
    starts in `ids`."""
    eos, start, documents, lines = tokenizer.eos_token_id, 0, [], []
    for end in [i for i, t in enumerate(ids) if t == eos] + [len(ids)]:
        parts = tokenizer.decode(ids[start:end]).split("\n")
        for k, part in enumerate(parts):
            ended = k < len(parts) - 1 or end < len(ids)  # by a newline or the document's end
            if (k > 0 or start > 0) and part.strip():  # the row's first piece may start mid-line
                line = part.lstrip() + "\n" * (k < len(parts) - 1)  # from its first word: indentation is no prompt
                (documents if k == 0 else lines).append((line, ended))
        start = end + 1
    first_words = ""
    for line, ended in documents + lines:
        tokens = tokenizer(line, add_special_tokens=False)["input_ids"]
        if ended and len(tokens) <= max_tokens:
            return line, True
        if not first_words and len(tokens) > max_tokens:  # a long line: its first words, not half a word
            head = tokenizer.decode(tokens[:max_tokens]).strip()
            first_words = head[: head.rindex(" ")] if " " in head else ""
    return first_words, False


def corpus_prompts(
    validation: datasets.Dataset, tokenizer: PreTrainedTokenizerFast, *, chat: bool, count: int = 2, max_tokens: int = 8
) -> list[str]:
    """Up to `count` distinct prompts with text from validation rows spread over the split (never all
    of it): line openings (`line_opening`) of text blocks, or each conversation up to its first
    assistant header, so a sample is a reply. Falls back to the first words of the first row."""
    prompts: list[str] = []
    for index in spread_rows(len(validation), ROWS_READ if chat else min(count * 4, ROWS_READ)):
        row = validation[index]
        if chat:
            reply = next((i for i, label in enumerate(row["labels"]) if label != IGNORE_INDEX), None)
            text = tokenizer.decode(row["input_ids"][:reply], skip_special_tokens=False) if reply else ""
        else:
            text = line_opening(list(row["input_ids"]), tokenizer, max_tokens)[0]
        if text.strip():
            prompts.append(text)
        if len(set(prompts)) >= count:
            break
    if not prompts and len(validation):  # no line starts in the rows read: the split's own start
        words = tokenizer.decode(validation[0]["input_ids"][:max_tokens], skip_special_tokens=True).split()
        prompts = [" ".join(words[:-1] or words)] if words else []
    return list(dict.fromkeys(prompts))[:count]


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
    report: CorpusReport | None = None  # the corpus report (None for conversations); training adds its plan

    def start_epoch(self, epoch: int) -> None:
        """Shifted blocks move to `epoch`'s offset in the token stream; anything else stays."""
        if isinstance(self.train, TrainingBlocks):
            self.train.start_epoch(epoch)


def prepare_run_data(
    sources: Sources,
    tokenizer: PreTrainedTokenizerFast,
    *,
    seed: int,
    eval_tokens: int | None,
) -> RunData:
    """The training and validation rows of `sources` for `tokenizer`, prepared or read from the cache;
    conversations' role tokens are added to the tokenizer in place. `seed`: training.seed. (The run
    config has checked that data.block_size fits the model: `check_fits_model`.)"""
    settings, notes, added = sources.settings, [], []
    if settings.format == "chat":
        note, added = add_chat_tokens(tokenizer)
        notes += [note] if note else []
        stops = stop_token_ids(tokenizer)  # a reply ends at the end of its turn
        collator: Callable = ChatCollator(tokenizer.pad_token_id)  # padded to each batch's longest
        corpus = prepare_chat_corpus(sources, tokenizer)
        train: Any = corpus.train
        rows, what = "conversations", f"of up to {settings.block_size} tokens, padded per batch"
    else:
        corpus = prepare_corpus(sources, tokenizer)
        train = TrainingBlocks(corpus.train, seed=seed, shift=settings.shift_blocks)
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
