"""Tiny chat pieces for the chat tests: a tokenizer with the ChatML role tokens and template, a base
model folder that carries it, and conversations.

`with_chat_format` is a stand-in for the package's own (minigpt.data.chat_ready, added to every
tokenizer MiniGPT trains): the two role tokens and the template, nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import build_tiny_tokenizer, tiny_model

from minigpt.data.chat_template import CHAT_TEMPLATE, CHAT_TOKENS

CONVERSATION = [
    {"role": "system", "content": "You are Juliet."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello there"},
]


def with_chat_format(tokenizer):
    """`tokenizer` with `<|im_start|>`, `<|im_end|>` and the chat template (a stand-in)."""
    tokenizer.add_special_tokens({"additional_special_tokens": list(CHAT_TOKENS)})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def chat_tokenizer():
    return with_chat_format(build_tiny_tokenizer())


def save_chat_base(folder: Path, max_positions: int = 64) -> Path:
    """A tiny untrained MiniGPT and its chat tokenizer, saved as a model folder `init_from` takes."""
    tokenizer = chat_tokenizer()
    model = tiny_model(vocab_size=len(tokenizer), max_position_embeddings=max_positions)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def short_conversations(count: int, offset: int = 0) -> list[dict]:
    """`count` short, distinct conversations (a few dozen tokens each)."""
    names = ["Romeo", "Juliet", "Tybalt", "Mercutio", "Benvolio", "Nurse"]
    rows = []
    for i in range(offset, offset + count):
        who = names[i % len(names)]
        rows.append(
            {
                "messages": [
                    {"role": "system", "content": f"You are {who}."},
                    {"role": "user", "content": f"What says {who} to number {i}?"},
                    {"role": "assistant", "content": f"Good morrow, {i} times."},
                ]
            }
        )
    return rows
