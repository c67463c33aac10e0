"""Tiny chat-capable models for the chat tests: a tokenizer with the ChatML tokens and template, and
random MiniGPT models made to end their turn at once or never."""

from __future__ import annotations

from pathlib import Path

import torch
from conftest import SHAKESPEARE, tiny_model

CHAT_SPECIALS = ("<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>")  # ids 0..3 of MiniGPT's tokenizers


def build_chat_tokenizer(vocab_size: int = 300):
    """The project's own byte-level BPE (role tokens and chat template included) on 20 KB of Tiny
    Shakespeare."""
    from minigpt.data.settings import TokenizerSettings
    from minigpt.data.tokenizer import train_tokenizer

    settings = TokenizerSettings(vocab_size=vocab_size, show_progress=False)
    tokenizer = train_tokenizer(SHAKESPEARE.read_text()[:20_000].split("\n\n"), settings)
    assert tokenizer.convert_ids_to_tokens(list(range(len(CHAT_SPECIALS)))) == list(CHAT_SPECIALS)
    return tokenizer


def never_ending_model(tokenizer, seed: int = 0, **overrides):
    """A random tiny MiniGPT that writes words and never ends its turn: the output rows of every
    token but the printable ASCII ones that start with a space are zero, so its greedy choice (the
    largest logit, positive among dozens of random ones) is a word, and each word streams at once
    (a streamer holds text back until a space), up to the reply limit."""
    model = tiny_model(seed=seed, **overrides)
    texts = [tokenizer.decode([i]) for i in range(len(tokenizer))]
    silent = [
        i
        for i, text in enumerate(texts)
        if i < len(CHAT_SPECIALS) or not (text.startswith(" ") and text.isascii() and text.isprintable())
    ]
    with torch.no_grad():
        model.lm_head.weight[silent] = 0.0  # (V, C) rows; tied: their embeddings too
    return model


def at_once_ending_model(tokenizer, seed: int = 0):
    """A tiny MiniGPT that always writes `<|im_end|>`: the final norm outputs a constant (weight 0,
    bias 1) which only the end-of-turn token's output row matches."""
    model = tiny_model(seed=seed)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    with torch.no_grad():
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.fill_(1.0)
        model.lm_head.weight.zero_()
        model.lm_head.weight[im_end] = 1.0  # logit C for <|im_end|>, 0 for every other token
    return model


def save_model(folder: Path, model, tokenizer) -> Path:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
