"""Make a (model, tokenizer) pair chat-ready: ChatML's role tokens and template (MiniGPT's tokenizers
carry both), embedding rows for tokens added and generation that stops at the end of a turn. New
rows start at the mean of the trained rows, so fine-tuning starts from the base's loss (Hewitt 2021,
"Initializing New Word Embeddings for Pretrained Language Models")."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .chat_template import IM_END, add_chat_tokens, stop_token_ids


def make_chat_ready(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> str | None:
    """Give `model` and `tokenizer` what a chat needs, in place (`add_chat_tokens`, `fit_embeddings`, a
    generation config that stops at `<|im_end|>` too); the one line saying what was done, or None."""
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
    """Rows for the tokens `added_ids` a trained model has never seen, at the mean of the trained rows
    (an untied head's too); the line saying so, or None."""
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

