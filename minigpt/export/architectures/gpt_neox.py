"""GPT-NeoX (Pythia's family) and Starcoder2: rotary positions with LayerNorm and the standard MLP.

Both compute MiniGPT's rotary block exactly: `GPTNeoXForCausalLM` with sequential residuals
(`use_parallel_residual=False`) and rotation over the whole head (`partial_rotary_factor=1.0`),
`Starcoder2ForCausalLM` with one key/value head per query head and no sliding window. Their norms
always have biases, GPT-NeoX's MLP too: zeros where MiniGPT has none. GPT-NeoX fuses q, k, v per
head (head by head: q, k, v), so MiniGPT's (q rows, k rows, v rows) are regrouped.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import GPTNeoXConfig, PretrainedConfig, Starcoder2Config

from ...model.configuration_minigpt import MiniGPTConfig
from .base import (
    StockArchitecture,
    Weights,
    bias_or_zeros,
    has_biases,
    minigpt_head,
    minigpt_layer,
    require_full_attention_heads,
    require_full_rotary,
    require_stock,
    rope_parameters_of,
    shared_minigpt_fields,
    shared_stock_fields,
    split_qkv,
    tie_head,
)


class RotaryLayerNormArchitecture(StockArchitecture):
    """What GPT-NeoX and Starcoder2 ask of MiniGPT: the default block with rotary positions."""

    def requirements(self, config: MiniGPTConfig) -> list[tuple[str, Any, str]]:
        return [
            ("position_embedding_type", "rope", f"{self.name} has rotary positions only"),
            ("norm_type", "layernorm", f"{self.name} normalises with LayerNorm"),
            ("mlp_type", "standard", f"{self.name}'s MLP is not gated"),
            ("qk_norm", False, f"{self.name} has no QK-norm"),
        ]


def per_head_qkv(fused: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(3C, ...) rows q|k|v -> GPT-NeoX's per-head grouping (head 0: q, k, v; head 1: ...)."""
    rest = fused.shape[1:]
    return fused.view(3, num_heads, -1, *rest).transpose(0, 1).reshape(fused.shape)


def blockwise_qkv(fused: torch.Tensor, num_heads: int) -> torch.Tensor:
    """The inverse of `per_head_qkv`."""
    rest = fused.shape[1:]
    return fused.view(num_heads, 3, -1, *rest).transpose(0, 1).reshape(fused.shape)


class GPTNeoXArchitecture(RotaryLayerNormArchitecture):
    name = "gpt_neox"
    model_type = "gpt_neox"
    summary = "GPTNeoXForCausalLM: rotary, LayerNorm, standard MLP; runs in transformers 4.x, vLLM, llama.cpp"

    def to_stock(self, config: MiniGPTConfig, weights: Weights) -> tuple[PretrainedConfig, Weights]:
        rope = dict(config.rope_parameters, partial_rotary_factor=1.0)
        stock_config = GPTNeoXConfig(
            **shared_stock_fields(config),
            layer_norm_eps=config.layer_norm_epsilon,
            use_parallel_residual=False,
            rope_parameters=rope,
            attention_bias=config.bias,
            hidden_dropout=config.hidden_dropout,
            attention_dropout=config.attention_dropout,
        )
        # transformers 4.x reads the rotary fraction (default 0.25) and base from these keys, which 5.x
        # folds into rope_parameters at construction: set afterwards, config.json carries both forms.
        stock_config.rotary_pct = 1.0
        stock_config.rotary_emb_base = rope["rope_theta"]
        C, width, nh = config.hidden_size, config.intermediate_size, config.num_attention_heads
        stock = {"gpt_neox.embed_in.weight": weights["transformer.wte.weight"]}
        for i in range(config.num_hidden_layers):
            ours, theirs = minigpt_layer(i), f"gpt_neox.layers.{i}"
            for our_norm, their_norm in (("ln_1", "input_layernorm"), ("ln_2", "post_attention_layernorm")):
                stock[f"{theirs}.{their_norm}.weight"] = weights[f"{ours}.{our_norm}.weight"]
                stock[f"{theirs}.{their_norm}.bias"] = bias_or_zeros(weights, f"{ours}.{our_norm}.bias", C)
            stock[f"{theirs}.attention.query_key_value.weight"] = per_head_qkv(
                weights[f"{ours}.attn.c_attn.weight"], nh
            )
            stock[f"{theirs}.attention.dense.weight"] = weights[f"{ours}.attn.c_proj.weight"]
            if config.bias:
                stock[f"{theirs}.attention.query_key_value.bias"] = per_head_qkv(
                    weights[f"{ours}.attn.c_attn.bias"], nh
                )
                stock[f"{theirs}.attention.dense.bias"] = weights[f"{ours}.attn.c_proj.bias"]
            stock[f"{theirs}.mlp.dense_h_to_4h.weight"] = weights[f"{ours}.mlp.c_fc.weight"]
            stock[f"{theirs}.mlp.dense_h_to_4h.bias"] = bias_or_zeros(weights, f"{ours}.mlp.c_fc.bias", width)
            stock[f"{theirs}.mlp.dense_4h_to_h.weight"] = weights[f"{ours}.mlp.c_proj.weight"]
            stock[f"{theirs}.mlp.dense_4h_to_h.bias"] = bias_or_zeros(weights, f"{ours}.mlp.c_proj.bias", C)
        stock["gpt_neox.final_layer_norm.weight"] = weights["transformer.ln_f.weight"]
        stock["gpt_neox.final_layer_norm.bias"] = bias_or_zeros(weights, "transformer.ln_f.bias", C)
        stock["lm_head.weight"] = weights["lm_head.weight"]
        return stock_config, tie_head(stock, "gpt_neox.embed_in.weight", config.tie_word_embeddings)

    def from_stock(self, stock: PretrainedConfig, weights: Weights) -> tuple[dict[str, Any], Weights]:
        require_stock(
            not stock.use_parallel_residual,
            "use_parallel_residual=True",
            "MiniGPT's blocks add attention, then the MLP, in sequence",
        )
        require_full_rotary(stock)
        bias = has_biases(weights, declared=False)
        kwargs = dict(
            shared_minigpt_fields(stock),
            position_embedding_type="rope",
            rope_parameters=rope_parameters_of(stock),
            layer_norm_epsilon=stock.layer_norm_eps,
            hidden_dropout=float(stock.hidden_dropout),
            attention_dropout=float(stock.attention_dropout),
            bias=bias,
        )
        nh = stock.num_attention_heads
        ours_weights = {"transformer.wte.weight": weights["gpt_neox.embed_in.weight"]}
        for i in range(stock.num_hidden_layers):
            ours, theirs = minigpt_layer(i), f"gpt_neox.layers.{i}"
            names = {
                "ln_1": f"{theirs}.input_layernorm",
                "ln_2": f"{theirs}.post_attention_layernorm",
                "attn.c_proj": f"{theirs}.attention.dense",
                "mlp.c_fc": f"{theirs}.mlp.dense_h_to_4h",
                "mlp.c_proj": f"{theirs}.mlp.dense_4h_to_h",
            }
            for our_name, their_name in names.items():
                ours_weights[f"{ours}.{our_name}.weight"] = weights[f"{their_name}.weight"]
                if bias:
                    size = weights[f"{their_name}.weight"].shape[0]
                    ours_weights[f"{ours}.{our_name}.bias"] = bias_or_zeros(
                        weights, f"{their_name}.bias", size
                    )
            qkv = f"{theirs}.attention.query_key_value"
            ours_weights[f"{ours}.attn.c_attn.weight"] = blockwise_qkv(weights[f"{qkv}.weight"], nh)
            if bias:
                fused = bias_or_zeros(weights, f"{qkv}.bias", 3 * stock.hidden_size)
                ours_weights[f"{ours}.attn.c_attn.bias"] = blockwise_qkv(fused, nh)
        ours_weights["transformer.ln_f.weight"] = weights["gpt_neox.final_layer_norm.weight"]
        if bias:
            ours_weights["transformer.ln_f.bias"] = weights["gpt_neox.final_layer_norm.bias"]
        ours_weights["lm_head.weight"] = minigpt_head(
            weights, "gpt_neox.embed_in.weight", kwargs["tie_word_embeddings"]
        )
        return kwargs, ours_weights


class Starcoder2Architecture(RotaryLayerNormArchitecture):
    name = "starcoder2"
    model_type = "starcoder2"
    summary = "Starcoder2ForCausalLM: rotary, LayerNorm, standard MLP, separate q/k/v projections"

    def to_stock(self, config: MiniGPTConfig, weights: Weights) -> tuple[PretrainedConfig, Weights]:
        stock_config = Starcoder2Config(
            **shared_stock_fields(config),
            num_key_value_heads=config.num_attention_heads,
            norm_epsilon=config.layer_norm_epsilon,
            rope_parameters=dict(config.rope_parameters),
            sliding_window=None,
            use_bias=config.bias,
            residual_dropout=config.hidden_dropout,
            embedding_dropout=config.hidden_dropout,
            attention_dropout=config.attention_dropout,
        )
        C = config.hidden_size
        stock = {"model.embed_tokens.weight": weights["transformer.wte.weight"]}
        for i in range(config.num_hidden_layers):
            ours, theirs = minigpt_layer(i), f"model.layers.{i}"
            for our_norm, their_norm in (("ln_1", "input_layernorm"), ("ln_2", "post_attention_layernorm")):
                stock[f"{theirs}.{their_norm}.weight"] = weights[f"{ours}.{our_norm}.weight"]
                stock[f"{theirs}.{their_norm}.bias"] = bias_or_zeros(weights, f"{ours}.{our_norm}.bias", C)
            for kind in ("weight", "bias") if config.bias else ("weight",):
                q, k, v = split_qkv(weights[f"{ours}.attn.c_attn.{kind}"])
                stock[f"{theirs}.self_attn.q_proj.{kind}"] = q
                stock[f"{theirs}.self_attn.k_proj.{kind}"] = k
                stock[f"{theirs}.self_attn.v_proj.{kind}"] = v
                stock[f"{theirs}.self_attn.o_proj.{kind}"] = weights[f"{ours}.attn.c_proj.{kind}"]
                stock[f"{theirs}.mlp.c_fc.{kind}"] = weights[f"{ours}.mlp.c_fc.{kind}"]
                stock[f"{theirs}.mlp.c_proj.{kind}"] = weights[f"{ours}.mlp.c_proj.{kind}"]
        stock["model.norm.weight"] = weights["transformer.ln_f.weight"]
        stock["model.norm.bias"] = bias_or_zeros(weights, "transformer.ln_f.bias", C)
        stock["lm_head.weight"] = weights["lm_head.weight"]
        return stock_config, tie_head(stock, "model.embed_tokens.weight", config.tie_word_embeddings)

    def from_stock(self, stock: PretrainedConfig, weights: Weights) -> tuple[dict[str, Any], Weights]:
        require_full_attention_heads(stock)
        window = stock.sliding_window
        require_stock(
            window is None or window >= stock.max_position_embeddings,
            f"sliding_window={window}",
            "MiniGPT attends to the whole context",
        )
        require_full_rotary(stock)
        bias = has_biases(weights, declared=bool(stock.use_bias))
        kwargs = dict(
            shared_minigpt_fields(stock),
            position_embedding_type="rope",
            rope_parameters=rope_parameters_of(stock),
            layer_norm_epsilon=stock.norm_epsilon,
            hidden_dropout=float(stock.residual_dropout),
            attention_dropout=float(stock.attention_dropout),
            bias=bias,
        )
        C, width = stock.hidden_size, stock.intermediate_size
        ours_weights = {"transformer.wte.weight": weights["model.embed_tokens.weight"]}
        for i in range(stock.num_hidden_layers):
            ours, theirs = minigpt_layer(i), f"model.layers.{i}"
            attn = f"{theirs}.self_attn"
            for our_norm, their_norm in (("ln_1", "input_layernorm"), ("ln_2", "post_attention_layernorm")):
                ours_weights[f"{ours}.{our_norm}.weight"] = weights[f"{theirs}.{their_norm}.weight"]
                if bias:
                    ours_weights[f"{ours}.{our_norm}.bias"] = weights[f"{theirs}.{their_norm}.bias"]
            ours_weights[f"{ours}.attn.c_attn.weight"] = torch.cat(
                [weights[f"{attn}.{p}.weight"] for p in ("q_proj", "k_proj", "v_proj")]
            )
            ours_weights[f"{ours}.attn.c_proj.weight"] = weights[f"{attn}.o_proj.weight"]
            ours_weights[f"{ours}.mlp.c_fc.weight"] = weights[f"{theirs}.mlp.c_fc.weight"]
            ours_weights[f"{ours}.mlp.c_proj.weight"] = weights[f"{theirs}.mlp.c_proj.weight"]
            if bias:
                ours_weights[f"{ours}.attn.c_attn.bias"] = torch.cat(
                    [bias_or_zeros(weights, f"{attn}.{p}.bias", C) for p in ("q_proj", "k_proj", "v_proj")]
                )
                ours_weights[f"{ours}.attn.c_proj.bias"] = bias_or_zeros(weights, f"{attn}.o_proj.bias", C)
                ours_weights[f"{ours}.mlp.c_fc.bias"] = bias_or_zeros(
                    weights, f"{theirs}.mlp.c_fc.bias", width
                )
                ours_weights[f"{ours}.mlp.c_proj.bias"] = bias_or_zeros(
                    weights, f"{theirs}.mlp.c_proj.bias", C
                )
        ours_weights["transformer.ln_f.weight"] = weights["model.norm.weight"]
        if bias:
            ours_weights["transformer.ln_f.bias"] = weights["model.norm.bias"]
        ours_weights["lm_head.weight"] = minigpt_head(
            weights, "model.embed_tokens.weight", kwargs["tie_word_embeddings"]
        )
        return kwargs, ours_weights


__all__ = ["GPTNeoXArchitecture", "Starcoder2Architecture", "blockwise_qkv", "per_head_qkv"]
