"""Conversations as training data (`data.format: chat`, docs/chat.md): checked, encoded with the
loss on the assistant's tokens only (the template's `{% generation %}` markers), and cached as blocks are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import datasets
import numpy as np
import torch
from datasets.arrow_writer import ArrowWriter
from torch.nn.utils.rnn import pad_sequence

from ..atomic import atomic_output_dir
from ..distributed import is_main_process
from ..errors import ConfigError, DataError
from .chat_template import ROLES
from .corpus import META_FILE, PreparedCorpus, SplitStats, load_prepared, tokenizer_fingerprint, write_meta
from .settings import seeded_unit
from .sources import Sources
from .token_bytes import IGNORE_INDEX

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

CHAT_CACHE_VERSION = 2  # bump when the rows change for the same inputs (2: Arrow files, as blocks)
FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),  # (T,) T <= block_size
        "labels": datasets.Sequence(datasets.Value("int32")),  # (T,) IGNORE_INDEX off the assistant's tokens
    }
)


@dataclass
class Conversation:
    messages: list[dict[str, str]]  # [{"role": ..., "content": ...}], checked
    where: str  # "FILE:LINE" (or "FOLDER row N"): what an error names


def check_conversation(record: Any, where: str) -> Conversation:
    """`record` as a checked `Conversation`, or `DataError` saying what is wrong at `where`."""
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        raise DataError(f'{where}: no "messages" list (each line must be {{"messages": [{{"role": ..., "content": ...}}]}})')
    messages = record["messages"]
    for number, message in enumerate(messages, start=1):
        if not isinstance(message, dict):
            raise DataError(f"{where}: message {number} is not an object with role and content")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise DataError(f"{where}: message {number} has unknown role {role!r} (use {', '.join(ROLES)})")
        if not isinstance(content, str) or not content.strip():
            raise DataError(f"{where}: message {number} ({role}) has empty content")
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(f"{where}: no assistant turn, nothing to learn from")
    return Conversation([{"role": m["role"], "content": m["content"]} for m in messages], where)


def read_conversations(path: Path) -> list[Conversation]:
    """Every conversation of a JSON-lines file (blank lines skipped) or of a `save_to_disk` folder."""
    if path.is_dir():
        dataset = datasets.load_from_disk(str(path))
        if not isinstance(dataset, datasets.Dataset) or "messages" not in dataset.column_names:
            raise DataError(f'{path}: a saved data set with a "messages" column is needed')
        return [check_conversation(row, f"{path} row {i}") for i, row in enumerate(dataset)]
    found = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{where}: not JSON ({err.msg})") from None
            found.append(check_conversation(record, where))
    if not found:
        raise DataError(f"{path} holds no conversation")
    return found


def load_conversations(sources: Sources) -> tuple[list[Conversation], list[Conversation]]:
    """(train, validation) conversations: `validation_files`, else whole conversations drawn for
    validation by `seed` (`validation_fraction` of them, the same on every machine)."""
    settings = sources.settings
    train = [c for path in sources.train.paths for c in read_conversations(path)]
    if sources.validation is not None:
        return train, [c for path in sources.validation.paths for c in read_conversations(path)]
    held_out = seeded_unit(np.arange(len(train)), settings.seed) < settings.validation_fraction  # (N,) bool
    validation = [c for c, out in zip(train, held_out, strict=True) if out]
    train = [c for c, out in zip(train, held_out, strict=True) if not out]
    if not train or not validation:
        raise DataError(
            f"{len(train) + len(validation)} conversations cannot be split by data.validation_fraction="
            f"{settings.validation_fraction}: give data.validation_files or more conversations"
        )
    return train, validation


@dataclass
class Encoded:
    input_ids: list[int]  # (T,) T <= block_size
    labels: list[int]  # (T,) the id where the assistant wrote it, else IGNORE_INDEX
    dropped_tokens: int  # tokens of the conversation left out to fit the context


def check_chat_tokenizer(tokenizer: PreTrainedTokenizerBase) -> None:
    """A tokenizer that can mark assistant tokens: a chat template with generation markers, fast."""
    template = tokenizer.chat_template
    if not isinstance(template, str) or "generation" not in template:
        raise ConfigError(
            "the tokenizer has no chat template with {% generation %} markers: chat fine-tuning needs "
            "the role tokens and template of minigpt.data.chat_template"
        )
    if not tokenizer.is_fast:
        raise ConfigError("chat fine-tuning needs a fast tokenizer (assistant masks map characters to tokens)")


def _encoded(tokenizer: PreTrainedTokenizerBase, conversations: list[list[dict]]) -> list[tuple[list, list]]:
    """Each conversation's ids and labels (the id in the assistant's tokens, else IGNORE_INDEX)."""
    out = tokenizer.apply_chat_template(conversations, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    return [
        (ids, [t if keep else IGNORE_INDEX for t, keep in zip(ids, mask, strict=True)])
        for ids, mask in zip(out["input_ids"], out["assistant_masks"], strict=True)
    ]


def _fit(tokenizer: PreTrainedTokenizerBase, conversation: Conversation, block_size: int, full: int) -> Encoded:
    """A conversation of `full` tokens > block_size, made to fit: whole exchanges (from a user message)
    dropped from the front, the leading system lines kept, while an assistant reply is left; then the
    last form's front cut."""
    messages = conversation.messages
    first = next((i for i, m in enumerate(messages) if m["role"] != "system"), len(messages))
    rests = [messages[i:] for i in range(first + 1, len(messages)) if messages[i]["role"] == "user"]
    shorter = [messages[:first] + rest for rest in rests if any(m["role"] == "assistant" for m in rest)]
    for form in shorter or [messages]:
        [(ids, labels)] = _encoded(tokenizer, [form])
        if len(ids) <= block_size:
            return Encoded(ids, labels, full - len(ids))
    ids, labels = ids[-block_size:], labels[-block_size:]  # the last exchange alone is too long: cut its front
    if all(label == IGNORE_INDEX for label in labels[1:]):  # position 0 is never predicted
        raise DataError(
            f"{conversation.where}: {full} tokens, and its last data.block_size={block_size} hold none of the "
            "assistant's: nothing is left for the assistant (shorten it or raise data.block_size)"
        )
    return Encoded(ids, labels, full - len(ids))


def encode_conversations(
    tokenizer: PreTrainedTokenizerBase, conversations: list[Conversation], block_size: int, batch: int = 256
) -> list[Encoded]:
    """Each conversation's ids and labels, at most `block_size` tokens (`DataError` when none of its
    assistant tokens fits)."""
    check_chat_tokenizer(tokenizer)
    encoded = []
    # cut to the context here, whole turns first: the tokenizer's own check would only warn
    saved_max_length, tokenizer.model_max_length = tokenizer.model_max_length, int(1e30)
    try:
        for first in range(0, len(conversations), batch):  # the template renders a batch in one call
            part = conversations[first : first + batch]
            for conversation, (ids, labels) in zip(part, _encoded(tokenizer, [c.messages for c in part]), strict=True):
                fits = len(ids) <= block_size
                encoded.append(Encoded(ids, labels, 0) if fits else _fit(tokenizer, conversation, block_size, len(ids)))
    finally:
        tokenizer.model_max_length = saved_max_length
    return encoded


class ChatCollator:
    """`data_collator` for encoded conversations: padded on the right to the batch's longest (no mask
    needed: attention is causal, and a pad's label is IGNORE_INDEX)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        def padded(key: str, value: int) -> torch.Tensor:  # (B, T)
            return pad_sequence([torch.as_tensor(row[key], dtype=torch.long) for row in rows], batch_first=True, padding_value=value)

        return {"input_ids": padded("input_ids", self.pad_token_id), "labels": padded("labels", IGNORE_INDEX)}


def prepare_chat_corpus(sources: Sources, tokenizer: PreTrainedTokenizerFast) -> PreparedCorpus:
    """Encoded, cached train and validation conversations of `sources` for `tokenizer`."""
    settings = sources.settings
    check_chat_tokenizer(tokenizer)
    tokenizer_id = tokenizer_fingerprint(tokenizer)
    split = sources.validation is None
    decisive = {  # the chat template too: the tokenizer's fingerprint leaves it out
        "template": hashlib.sha256(tokenizer.chat_template.encode()).hexdigest(),
        "block_size": settings.block_size,
        "validation_fraction": settings.validation_fraction if split else None,
        "seed": settings.seed if split else None,
        "tokenizer": tokenizer_id,
        "inputs": sources.key,
        "version": CHAT_CACHE_VERSION,
    }
    target = Path(settings.cache_dir) / "chat" / hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:20]
    if (target / META_FILE).is_file():
        if is_main_process():
            print(f"reusing encoded conversations in {target}")
        return load_prepared(target)
    print(f"encoding conversations into {target}")
    train, validation = load_conversations(sources)  # every conversation checked before any is written
    with atomic_output_dir(target) as staging:
        stats = {}
        for name, conversations in (("train", train), ("validation", validation)):
            encoded = encode_conversations(tokenizer, conversations, settings.block_size)
            writer = ArrowWriter(features=FEATURES, path=str(staging / f"{name}.arrow"))
            writer.write_batch({"input_ids": [e.input_ids for e in encoded], "labels": [e.labels for e in encoded]})
            writer.finalize()
            # bytes: those of the assistant's tokens (what bits per byte divides by)
            scored = [t for e in encoded for t in e.labels if t != IGNORE_INDEX]
            text_bytes = len(tokenizer.decode(scored, skip_special_tokens=True).encode("utf-8"))
            tokens, dropped = sum(len(e.input_ids) for e in encoded), sum(e.dropped_tokens for e in encoded)
            stats[name] = SplitStats(len(conversations), text_bytes, tokens, len(encoded), dropped)
        write_meta(staging, tokenizer, tokenizer_id, settings.block_size, stats)
    corpus = load_prepared(target)
    corpus.reused = False
    return corpus
