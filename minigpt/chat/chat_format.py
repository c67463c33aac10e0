"""Make a (model, tokenizer) pair chat-ready: ChatML's role tokens, the chat template, embedding rows
for the new tokens and generation that stops at the end of a turn.

Tokenizers MiniGPT trains carry all of it (`tokenizer.chat_tokens`), so for them this changes nothing.
A base trained before them (or a tokenizer made elsewhere) gets `<|im_start|>` and `<|im_end|>` added
as special tokens after its vocabulary, as TRL's `setup_chat_format` does; their embedding rows start
at the mean of the trained rows (the "average token": a new token's first logits are then the mean
of the others', not a random vector's, so fine-tuning starts from the base's loss; Hewitt 2021,
"Initializing New Word Embeddings for Pretrained Language Models").
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..data.chat_template import CHAT_TEMPLATE, CHAT_TOKENS, IM_END, stop_token_ids


def make_chat_ready(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> str | None:
    """Give `model` and `tokenizer` what a chat needs, in place; returns the one line saying what was
    done, or None when they had it all.

    - the tokens of `CHAT_TOKENS` the tokenizer lacks are added as special tokens (new ids after its
      vocabulary), and the model's embeddings grow to hold them when they do not already (tied head:
      the head grows with them); the new tokens' rows (input and an untied head's) are set to the
      mean of the rows of the tokenizer's existing tokens;
    - `CHAT_TEMPLATE` becomes the tokenizer's chat template when it has none;
    - the model's generation config stops at `<|im_end|>` as well as at the end of text.
    """
    done = []
    before = len(tokenizer)
    missing = [token for token in CHAT_TOKENS if token not in tokenizer.get_vocab()]
    if missing:
        tokenizer.add_special_tokens({"extra_special_tokens": missing}, replace_extra_special_tokens=False)
        rows = model.get_input_embeddings().weight.shape[0]
        resized = len(tokenizer) > rows
        if resized:
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)  # rows set just below
        _mean_rows(model, range(before, len(tokenizer)), trained=before)
        where = "embeddings resized" if resized else f"in the model's {rows} embedding rows"
        done.append(
            f"the base's tokenizer had no chat tokens: added {', '.join(missing)} "
            f"(vocab {before} -> {len(tokenizer)}), {where}"
        )
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
        if not missing:
            done.append("the base's tokenizer had no chat template: installed ChatML's")
    stops = stop_token_ids(tokenizer)
    current = model.generation_config.eos_token_id
    current = [current] if isinstance(current, int) else list(current or [])
    if not set(stops) <= set(current):
        model.generation_config.eos_token_id = list(dict.fromkeys([*current, *stops]))
        if not done:
            done.append(f"generation now stops at {IM_END} too")
    return "; ".join(done) or None


@torch.no_grad()
def _mean_rows(model: PreTrainedModel, new_ids: range, trained: int) -> None:
    """Set the rows `new_ids` of the input embedding (and of an untied head) to the mean of rows
    0..trained-1, the tokens the tokenizer had: (V, C) -> rows of (C,)."""
    matrices = [model.get_input_embeddings().weight]
    head = model.get_output_embeddings()
    if head is not None and head.weight.data_ptr() != matrices[0].data_ptr():  # untied
        matrices.append(head.weight)
    for weight in matrices:
        weight[new_ids.start : new_ids.stop] = weight[:trained].mean(dim=0)  # (C,) broadcast


__all__ = ["make_chat_ready"]
