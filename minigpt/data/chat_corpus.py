"""Conversations -> cached train and validation rows of ids and labels, as the data stage caches blocks.

`prepare_chat_corpus` loads and checks the conversations (`conversations.py`), encodes them
(`encoding.py`) and saves both splits under `<cache_dir>/chat/<key>/`, keyed by every setting that
changes the rows, the tokenizer and the input files' bytes; the folder appears whole or not at all
(a staging folder, then a rename), so a bad conversation found halfway leaves nothing behind. It
returns the data stage's `PreparedCorpus`, one row per conversation, so the rest of the run (the
compatibility checks, the evaluation sample) reads it as it reads blocks.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import datasets

from ..atomic import atomic_output_dir
from ..console import datasets_progress_bars
from ..distributed import is_main_process
from .chat_encoding import IGNORE_INDEX, Encoded, check_chat_tokenizer, encode_conversations
from .conversations import Conversation, load_conversations
from .corpus import PreparedCorpus, SplitStats, prepared_from_meta
from .provenance import content_fingerprint
from .settings import DataSettings, check_block_size
from .sources import source_files
from .tokenizer import tokenizer_fingerprint

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

CHAT_CACHE_VERSION = 1  # bump when the rows change for the same inputs
META_FILE = "meta.json"
FEATURES = datasets.Features(
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),  # (T,) T <= block_size
        "labels": datasets.Sequence(datasets.Value("int32")),  # (T,) IGNORE_INDEX off the assistant's tokens
    }
)


def chat_cache_key(settings: DataSettings, tokenizer_id: str, inputs_id: str, template: str) -> str:
    """Hash of what decides the rows (the chat template too: the tokenizer's fingerprint leaves it out)."""
    decisive = {
        "template": hashlib.sha256(template.encode()).hexdigest(),
        "block_size": settings.block_size,
        "validation_fraction": None if settings.validation_files else settings.validation_fraction,
        "seed": None if settings.validation_files else settings.seed,
        "tokenizer": tokenizer_id,
        "inputs": inputs_id,
        "version": CHAT_CACHE_VERSION,
    }
    return hashlib.sha256(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:20]


def _stats(conversations: list[Conversation], encoded: list[Encoded], tokenizer: PreTrainedTokenizerFast) -> SplitStats:
    """documents: conversations; bytes: UTF-8 bytes of the assistant's tokens (what bits per byte
    divides by); tokens: all tokens kept; blocks: rows (one per conversation)."""
    scored = [t for e in encoded for t in e.labels if t != IGNORE_INDEX]
    text = tokenizer.decode(scored, skip_special_tokens=True)
    return SplitStats(
        documents=len(conversations),
        bytes=len(text.encode("utf-8")),
        tokens=sum(len(e.input_ids) for e in encoded),
        blocks=len(encoded),
        dropped_tokens=sum(e.dropped_tokens for e in encoded),
    )


def prepare_chat_corpus(
    settings: DataSettings, tokenizer: PreTrainedTokenizerFast, max_position_embeddings: int | None = None
) -> PreparedCorpus:
    """Encoded, cached train and validation conversations for `tokenizer` (`data.format: chat`)."""
    settings.validate()
    if max_position_embeddings is not None:
        check_block_size(settings.block_size, max_position_embeddings)
    check_chat_tokenizer(tokenizer)
    train_paths, validation_paths = source_files(settings)
    known = settings.cache_dir
    inputs_id = content_fingerprint(train_paths, cache_dir=known) + content_fingerprint(validation_paths, cache_dir=known)
    tokenizer_id = tokenizer_fingerprint(tokenizer)
    target = Path(settings.cache_dir) / "chat" / chat_cache_key(settings, tokenizer_id, inputs_id, tokenizer.chat_template)
    if (target / META_FILE).is_file():
        if is_main_process():
            print(f"reusing encoded conversations in {target}")
        return load_chat_corpus(target)
    print(f"encoding conversations into {target}")
    train, validation = load_conversations(settings)  # every conversation checked before any is written
    with datasets_progress_bars(False), atomic_output_dir(target) as staging:  # saving takes no time to watch
        stats = {}
        for name, conversations in (("train", train), ("validation", validation)):
            encoded = encode_conversations(tokenizer, conversations, settings.block_size)
            rows = {"input_ids": [e.input_ids for e in encoded], "labels": [e.labels for e in encoded]}
            datasets.Dataset.from_dict(rows, features=FEATURES).save_to_disk(str(staging / name))
            stats[name] = _stats(conversations, encoded, tokenizer).__dict__
        meta = {
            "block_size": settings.block_size,
            "vocab_size": len(tokenizer),
            "eos_token_id": tokenizer.eos_token_id,
            "tokenizer_fingerprint": tokenizer_id,
            "stats": stats,
            "sources": [str(p) for p in train_paths + validation_paths],
        }
        (staging / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    corpus = load_chat_corpus(target)
    corpus.reused = False
    return corpus


def load_chat_corpus(folder: str | Path) -> PreparedCorpus:
    """Open a folder written by `prepare_chat_corpus` (memory-mapped)."""
    folder = Path(folder)
    meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    splits = {name: datasets.load_from_disk(str(folder / name)) for name in ("train", "validation")}
    return prepared_from_meta(folder, meta, splits)


__all__ = ["load_chat_corpus", "prepare_chat_corpus"]
