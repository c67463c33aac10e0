"""Conversations in the ecosystem's format, loaded and checked: one bad one is a one-line `DataError`.

A conversation is a JSON object per line, `{"messages": [{"role": ..., "content": ...}, ...]}`, with
roles `system`, `user` and `assistant` (TRL's and the hub's chat data sets), or a row of a
`save_to_disk` folder with a `messages` column. Every conversation is checked before anything is
tokenized: an unknown role, a missing `messages`, empty content or no assistant turn names the file
and line. (A conversation too long for the context is found when it is tokenized: `encoding.py`.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from ..errors import DataError
from .chat_template import ROLES
from .settings import DataSettings, seeded_unit
from .sources import resolve_files


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


def load_conversations(settings: DataSettings) -> tuple[list[Conversation], list[Conversation]]:
    """(train, validation) conversations: `validation_files`, else whole conversations drawn for
    validation by `seed` (`validation_fraction` of them, the same on every machine)."""
    train = [c for path in resolve_files(settings.train_files, "train", settings.exclude) for c in read_conversations(path)]
    if settings.validation_files:
        paths = resolve_files(settings.validation_files, "validation", settings.exclude)
        return train, [c for path in paths for c in read_conversations(path)]
    held_out = seeded_unit(np.arange(len(train)), settings.seed) < settings.validation_fraction  # (N,) bool
    validation = [c for c, out in zip(train, held_out, strict=True) if out]
    train = [c for c, out in zip(train, held_out, strict=True) if not out]
    if not train or not validation:
        raise DataError(
            f"{len(train) + len(validation)} conversations cannot be split by data.validation_fraction="
            f"{settings.validation_fraction}: give data.validation_files or more conversations"
        )
    return train, validation


__all__ = ["Conversation", "check_conversation", "load_conversations", "read_conversations"]
