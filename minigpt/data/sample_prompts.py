"""Prompts for a run's samples taken from its own validation split, when the config names none.

A run on the user's text should not continue another corpus's opening (`ROMEO:` on Python
sources). `corpus_prompts` reads a bounded number of validation rows (never the whole split):
- text blocks: the first line of a document (after `<|endoftext|>`) or, when a block holds no
  document start, of a line (after a token that ends in a newline), cut to `max_tokens` tokens;
- conversations: a conversation up to its first assistant header, so the sample is a reply.
Rows are taken evenly spread over the split, so two prompts do not come from one place.
"""

from __future__ import annotations

import datasets
from transformers import PreTrainedTokenizerFast

from .chat_encoding import IGNORE_INDEX

ROWS_READ = 64  # most validation rows looked at, whatever the split's size


def spread_rows(total: int, count: int) -> list[int]:
    """Up to `count` row indices spread evenly over range(total), first row first."""
    count = min(count, total)
    return sorted({i * total // count for i in range(count)}) if count else []


def line_opening(ids: list[int], ends_line: list[bool], eos_id: int, max_tokens: int) -> tuple[list[int], bool]:
    """The first line that starts inside `ids` (a document's after EOS first, then any line's) and
    ends within `max_tokens` ids, newline included, and True; else the first line's first
    `max_tokens` ids and False; ([], False) when no line with text starts in `ids`."""
    document_starts = [i + 1 for i, t in enumerate(ids[:-1]) if t == eos_id]
    line_starts = [i + 1 for i, t in enumerate(ids[:-1]) if ends_line[t] and ids[i + 1] != eos_id]
    first_cut: list[int] = []
    for start in document_starts + line_starts:
        line = []
        for token in ids[start : start + max_tokens]:
            if token == eos_id:
                break
            line.append(token)
            if ends_line[token]:
                break
        if all(ends_line[t] for t in line):  # a blank line
            continue
        if len(line) < max_tokens and start + len(line) == len(ids) and not ends_line[line[-1]]:
            continue  # cut by the row's end: where it ends is not known
        if ends_line[line[-1]] or start + len(line) < len(ids) and ids[start + len(line)] == eos_id:
            return line, True
        first_cut = first_cut or line
    return first_cut, False


def corpus_prompts(
    validation: datasets.Dataset, tokenizer: PreTrainedTokenizerFast, *, chat: bool, count: int = 2, max_tokens: int = 8
) -> list[str]:
    """Up to `count` distinct prompts from the validation rows (see the module's docstring); for
    conversations one per conversation read. Falls back to a new line (a new document's start)."""
    prompts: list[str] = []
    if chat:
        for index in spread_rows(len(validation), ROWS_READ):
            row = validation[index]
            reply = next((i for i, label in enumerate(row["labels"]) if label != IGNORE_INDEX), None)
            if reply:  # the conversation through "<|im_start|>assistant\n", special tokens as written
                prompts.append(tokenizer.decode(row["input_ids"][:reply], skip_special_tokens=False))
            if len(set(prompts)) >= count:
                break
    else:
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        ends_line = [tokenizer.convert_tokens_to_string([p]).endswith("\n") for p in pieces]  # per id
        for index in spread_rows(len(validation), min(count * 4, ROWS_READ)):
            ids = list(validation[index]["input_ids"])
            line, whole = line_opening(ids, ends_line, tokenizer.eos_token_id, max_tokens)
            text = tokenizer.decode(line)
            if line and not whole:  # a long line: its first words, not half a word
                text = text[: text.rstrip().rindex(" ")] if " " in text.strip() else ""
            if text.strip():
                prompts.append(text)
            if len(set(prompts)) >= count:
                break
    return list(dict.fromkeys(prompts))[:count] or ["\n"]


__all__ = ["corpus_prompts", "line_opening", "spread_rows"]
