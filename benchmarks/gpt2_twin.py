"""GPT-2 of MiniGPT's shape, the model every benchmark compares against."""

from __future__ import annotations

from transformers import GPT2Config

from minigpt.model import MiniGPTConfig
from minigpt.training.settings import ModelSettings


def gpt2_twin_config(
    model: ModelSettings | MiniGPTConfig, vocab_size: int, eos_token_id: int
) -> GPT2Config:
    """A `GPT2Config` of MiniGPT's shape (`model`: the run's model section or a `MiniGPTConfig`):
    the same width, depth, heads, context and dropout; GPT-2's own positions, biases and GELU."""
    return GPT2Config(
        vocab_size=vocab_size,
        n_positions=model.max_position_embeddings,
        n_embd=model.hidden_size,
        n_layer=model.num_hidden_layers,
        n_head=model.num_attention_heads,
        resid_pdrop=model.hidden_dropout,
        embd_pdrop=model.hidden_dropout,
        attn_pdrop=model.attention_dropout,
        bos_token_id=eos_token_id,
        eos_token_id=eos_token_id,
    )


__all__ = ["gpt2_twin_config"]
