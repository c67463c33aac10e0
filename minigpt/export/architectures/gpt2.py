"""GPT-2: learned positions, LayerNorm, the standard MLP; MiniGPT's own parameter names.

`GPT2LMHeadModel` computes MiniGPT's default block exactly (`scale_attn_weights=True`, the same
activation by name). Its projections are `Conv1D` layers, whose weights are the transpose of
`nn.Linear`'s, and it always has biases: zeros where MiniGPT has none.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import GPT2Config, PretrainedConfig

from ...model.configuration_minigpt import MiniGPTConfig
from .base import StockArchitecture, Weights, has_biases, minigpt_head, require_stock, tie_head

PROJECTIONS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # Conv1D in GPT-2
NORMS = ("ln_1", "ln_2")


class GPT2Architecture(StockArchitecture):
    name = "gpt2"
    model_type = "gpt2"
    summary = "GPT2LMHeadModel: learned positions, LayerNorm, standard MLP; the oldest and widest support"

    def requirements(self, config: MiniGPTConfig) -> list[tuple[str, Any, str]]:
        return [
            ("position_embedding_type", "learned", "GPT-2 has learned positions"),
            ("norm_type", "layernorm", "GPT-2 normalises with LayerNorm"),
            ("mlp_type", "standard", "GPT-2's MLP is not gated"),
            ("qk_norm", False, "GPT-2 has no QK-norm"),
        ]

    def to_stock(self, config: MiniGPTConfig, weights: Weights) -> tuple[PretrainedConfig, Weights]:
        stock_config = GPT2Config(
            vocab_size=config.vocab_size,
            n_positions=config.max_position_embeddings,
            n_embd=config.hidden_size,
            n_layer=config.num_hidden_layers,
            n_head=config.num_attention_heads,
            n_inner=config.intermediate_size,
            activation_function=config.hidden_act,
            resid_pdrop=config.hidden_dropout,
            embd_pdrop=config.hidden_dropout,
            attn_pdrop=config.attention_dropout,
            layer_norm_epsilon=config.layer_norm_epsilon,
            initializer_range=config.initializer_range,
            scale_attn_weights=True,
            tie_word_embeddings=config.tie_word_embeddings,
            bos_token_id=config.bos_token_id,
            eos_token_id=config.eos_token_id,
            pad_token_id=config.pad_token_id,
            use_cache=True,
        )
        stock: Weights = {}
        for name, tensor in weights.items():
            module = name.rsplit(".", 1)[0]
            transpose = name.endswith(".weight") and module.endswith(PROJECTIONS)
            stock[name] = tensor.t().contiguous() if transpose else tensor
            if (
                not config.bias
                and name.endswith(".weight")
                and not name.startswith(("lm_head", "transformer.w"))
            ):
                rows = tensor.shape[0]  # nn.Linear (out, in) or a norm's (C,)
                stock[f"{module}.bias"] = torch.zeros(rows, dtype=tensor.dtype)
        return stock_config, tie_head(stock, "transformer.wte.weight", config.tie_word_embeddings)

    def from_stock(self, stock: PretrainedConfig, weights: Weights) -> tuple[dict[str, Any], Weights]:
        require_stock(
            stock.scale_attn_weights, "scale_attn_weights=False", "MiniGPT scales attention by 1/sqrt(hs)"
        )
        require_stock(
            not stock.scale_attn_by_inverse_layer_idx,
            "scale_attn_by_inverse_layer_idx=True",
            "MiniGPT scales every layer's attention alike",
        )
        require_stock(not stock.add_cross_attention, "add_cross_attention=True", "MiniGPT is decoder-only")
        # Checkpoints from older transformers carry the causal mask as buffers named like biases.
        weights = {n: t for n, t in weights.items() if not n.endswith((".attn.bias", ".attn.masked_bias"))}
        bias = has_biases(weights, declared=False)
        kwargs = dict(
            vocab_size=stock.vocab_size,
            hidden_size=stock.n_embd,
            num_hidden_layers=stock.n_layer,
            num_attention_heads=stock.n_head,
            intermediate_size=stock.n_inner or 4 * stock.n_embd,
            max_position_embeddings=stock.n_positions,
            position_embedding_type="learned",
            hidden_act=stock.activation_function,
            hidden_dropout=float(stock.resid_pdrop),
            attention_dropout=float(stock.attn_pdrop),
            layer_norm_epsilon=stock.layer_norm_epsilon,
            initializer_range=stock.initializer_range,
            tie_word_embeddings=bool(stock.tie_word_embeddings),
            bias=bias,
            bos_token_id=stock.bos_token_id,
            eos_token_id=stock.eos_token_id,
            pad_token_id=stock.pad_token_id,
        )
        ours: Weights = {}
        for name, tensor in weights.items():
            if not name.startswith("transformer."):
                continue  # the head is set below
            module = name.rsplit(".", 1)[0]
            if name.endswith(".bias") and not bias:
                continue  # all zero, checked by has_biases
            transpose = name.endswith(".weight") and module.endswith(PROJECTIONS)
            ours[name] = tensor.t().contiguous() if transpose else tensor
        ours["lm_head.weight"] = minigpt_head(
            weights, "transformer.wte.weight", kwargs["tie_word_embeddings"]
        )
        return kwargs, ours


__all__ = ["GPT2Architecture"]
