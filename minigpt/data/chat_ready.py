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

from .chat_template import IM_END, add_chat_tokens, stop_token_ids


def make_chat_ready(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> str | None:
    """Give `model` and `tokenizer` what a chat needs, in place; returns the one line saying what was
    done, or None when they had it all.

    - the tokens of `CHAT_TOKENS` the tokenizer lacks are added as special tokens (new ids after its
      vocabulary) with `CHAT_TEMPLATE` where it has no template (`add_chat_tokens`), and the model
      gets embedding rows for them (`fit_embeddings`);
    - the model's generation config stops at `<|im_end|>` as well as at the end of text.
    """
    note, added = add_chat_tokens(tokenizer)
    rows = fit_embeddings(model, tokenizer, added)
    done = [", ".join(part for part in (note, rows) if part)] if note else []
    stops = stop_token_ids(tokenizer)
    current = model.generation_config.eos_token_id
    current = [current] if isinstance(current, int) else list(current or [])
    if not set(stops) <= set(current):
        model.generation_config.eos_token_id = list(dict.fromkeys([*current, *stops]))
        if not done:
            done.append(f"generation now stops at {IM_END} too")
    return "; ".join(done) or None


@torch.no_grad()
def fit_embeddings(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, added_ids: list[int]) -> str | None:
    """Rows for the tokens `added_ids` a trained model has never seen: its embeddings grow to
    `len(tokenizer)` when they are smaller (a tied head grows with them), and the new tokens' rows
    (input and an untied head's) start at the mean of the trained rows. The line saying so, or None."""
    if not added_ids:
        return None
    rows = model.get_input_embeddings().weight.shape[0]
    resized = len(tokenizer) > rows
    if resized:
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)  # rows set just below
    trained = min(added_ids)  # the ids before the first added one were trained
    matrices = [model.get_input_embeddings().weight]
    head = model.get_output_embeddings()
    if head is not None and head.weight.data_ptr() != matrices[0].data_ptr():  # untied
        matrices.append(head.weight)
    for weight in matrices:
        weight[added_ids] = weight[:trained].mean(dim=0)  # (C,) broadcast over the new rows
    return "embeddings resized" if resized else f"in the model's {rows} embedding rows"


__all__ = ["fit_embeddings", "make_chat_ready"]
