"""Conversations -> token ids and labels, the loss on the assistant's tokens only.

`tokenizer.apply_chat_template(..., return_assistant_tokens_mask=True)` marks the tokens inside the
template's `{% generation %}` markers: each reply and its `<|im_end|>` (the model learns to stop),
never a role header or anything a user or system wrote. Labels are the ids there and
`IGNORE_INDEX` elsewhere; the model shifts them, so position t is scored on predicting token t + 1.

A conversation longer than the context loses whole exchanges from the front (the system lines stay)
until it fits or one exchange is left; what still does not fit loses tokens from the front, so the
last reply and its `<|im_end|>` stay. One with no assistant token left in its last `block_size`
tokens (long turns after the last reply) is a `DataError`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..errors import ConfigError, DataError
from .conversations import Conversation

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

IGNORE_INDEX = -100  # a label that is not scored (transformers' convention)


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


def labelled(input_ids: list[int], assistant_mask: list[int]) -> list[int]:
    """Labels: `input_ids` where the mask is 1, `IGNORE_INDEX` elsewhere."""
    return [token if keep else IGNORE_INDEX for token, keep in zip(input_ids, assistant_mask, strict=True)]


def _template(tokenizer: PreTrainedTokenizerBase, conversations: list[list[dict]]) -> tuple[list, list]:
    out = tokenizer.apply_chat_template(
        conversations, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    return out["input_ids"], out["assistant_masks"]


def _shorter_forms(messages: list[dict]) -> list[list[dict]]:
    """The conversation with 1, 2, ... whole exchanges dropped from the front (the leading system
    lines kept), while an assistant reply is left. An exchange starts at a user message."""
    first = next((i for i, m in enumerate(messages) if m["role"] != "system"), len(messages))
    system = messages[:first]
    starts = [i for i in range(first + 1, len(messages)) if messages[i]["role"] == "user"]
    rests = [messages[start:] for start in starts]
    return [system + rest for rest in rests if any(m["role"] == "assistant" for m in rest)]


def _fit(tokenizer: PreTrainedTokenizerBase, conversation: Conversation, block_size: int, full: int) -> Encoded:
    """A conversation of `full` tokens > block_size, made to fit (see the module's docstring)."""
    shorter = _shorter_forms(conversation.messages)
    for messages in shorter:
        [ids], [mask] = _template(tokenizer, [messages])
        if len(ids) <= block_size:
            return Encoded(ids, labelled(ids, mask), full - len(ids))
    if not shorter:
        [ids], [mask] = _template(tokenizer, [conversation.messages])
    ids, mask = ids[-block_size:], mask[-block_size:]  # the last exchange alone is too long: cut its front
    if not any(mask[1:]):  # position 0 is never predicted
        raise DataError(
            f"{conversation.where}: {full} tokens, and its last data.block_size={block_size} hold none of the "
            "assistant's: nothing is left for the assistant (shorten it or raise data.block_size)"
        )
    return Encoded(ids, labelled(ids, mask), full - len(ids))


def encode_conversations(
    tokenizer: PreTrainedTokenizerBase, conversations: list[Conversation], block_size: int, batch: int = 256
) -> list[Encoded]:
    """Each conversation's ids and labels, at most `block_size` tokens (`DataError` when none of its
    assistant tokens fits)."""
    check_chat_tokenizer(tokenizer)
    encoded = []
    # Conversations are cut to the context here, whole turns first: the tokenizer's own length
    # check would only warn about the long ones before they are.
    saved_max_length, tokenizer.model_max_length = tokenizer.model_max_length, int(1e30)
    try:
        for first in range(0, len(conversations), batch):  # the template renders a batch in one call
            part = conversations[first : first + batch]
            all_ids, all_masks = _template(tokenizer, [c.messages for c in part])
            for conversation, ids, mask in zip(part, all_ids, all_masks, strict=True):
                if len(ids) > block_size:
                    encoded.append(_fit(tokenizer, conversation, block_size, len(ids)))
                else:
                    encoded.append(Encoded(ids, labelled(ids, mask), 0))
    finally:
        tokenizer.model_max_length = saved_max_length
    return encoded


class ChatCollator:
    """`data_collator` for encoded conversations, padded on the right to the batch's longest (no
    attention mask needed: attention is causal, and a pad's label is IGNORE_INDEX) (rows of `input_ids` and `labels` of any length)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        longest = max(len(row["input_ids"]) for row in rows)
        input_ids = torch.full((len(rows), longest), self.pad_token_id, dtype=torch.long)  # (B, T)
        labels = torch.full((len(rows), longest), IGNORE_INDEX, dtype=torch.long)  # (B, T)
        for i, row in enumerate(rows):
            n = len(row["input_ids"])
            input_ids[i, :n] = torch.as_tensor(row["input_ids"], dtype=torch.long)
            labels[i, :n] = torch.as_tensor(row["labels"], dtype=torch.long)
        return {"input_ids": input_ids, "labels": labels}



__all__ = ["IGNORE_INDEX", "ChatCollator", "Encoded", "check_chat_tokenizer", "encode_conversations", "labelled"]
