"""Llama and Qwen3: rotary positions, RMSNorm, a gated MLP, and for Qwen3 QK-norm.

MiniGPT with `norm_type: rmsnorm`, `mlp_type: gated` and rotary positions is a `LlamaForCausalLM`
(with `qk_norm: true` and no biases, a `Qwen3ForCausalLM`): the same RMSNorm formula, the same
rotate_half rotation over the whole head from the same `rope_parameters`, the gated MLP
down(act(gate(x)) * up(x)). Only the projections are stored apart (q/k/v, gate/up) in the stock
names. MiniGPT's hidden dropout has no Llama equivalent; it only acts in training.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import LlamaConfig, PretrainedConfig, Qwen3Config

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


class LlamaArchitecture(StockArchitecture):
    name = "llama"
    model_type = "llama"
    summary = "LlamaForCausalLM: rotary, RMSNorm, gated MLP (SwiGLU with silu); every runtime runs it"
    qk_norm = False

    def requirements(self, config: MiniGPTConfig) -> list[tuple[str, Any, str]]:
        return [
            ("position_embedding_type", "rope", f"{self.name} has rotary positions only"),
            ("norm_type", "rmsnorm", f"{self.name} normalises with RMSNorm"),
            ("mlp_type", "gated", f"{self.name}'s MLP is gated"),
            ("qk_norm", self.qk_norm, f"{self.name} {'has' if self.qk_norm else 'has no'} QK-norm"),
        ]

    def stock_config(self, config: MiniGPTConfig) -> PretrainedConfig:
        return LlamaConfig(
            **shared_stock_fields(config),
            rms_norm_eps=config.layer_norm_epsilon,
            rope_parameters=dict(config.rope_parameters),
            attention_bias=config.bias,
            mlp_bias=config.bias,
            attention_dropout=config.attention_dropout,
            head_dim=config.head_dim,
            num_key_value_heads=config.num_attention_heads,
        )

    def to_stock(self, config: MiniGPTConfig, weights: Weights) -> tuple[PretrainedConfig, Weights]:
        stock = {"model.embed_tokens.weight": weights["transformer.wte.weight"]}
        for i in range(config.num_hidden_layers):
            ours, theirs = minigpt_layer(i), f"model.layers.{i}"
            stock[f"{theirs}.input_layernorm.weight"] = weights[f"{ours}.ln_1.weight"]
            stock[f"{theirs}.post_attention_layernorm.weight"] = weights[f"{ours}.ln_2.weight"]
            projections = zip(
                ("q_proj", "k_proj", "v_proj"), split_qkv(weights[f"{ours}.attn.c_attn.weight"]), strict=True
            )
            for proj, weight in projections:
                stock[f"{theirs}.self_attn.{proj}.weight"] = weight
            stock[f"{theirs}.self_attn.o_proj.weight"] = weights[f"{ours}.attn.c_proj.weight"]
            gate, up = weights[f"{ours}.mlp.c_fc.weight"].chunk(2, dim=0)  # (I, C) each
            stock[f"{theirs}.mlp.gate_proj.weight"] = gate
            stock[f"{theirs}.mlp.up_proj.weight"] = up
            stock[f"{theirs}.mlp.down_proj.weight"] = weights[f"{ours}.mlp.c_proj.weight"]
            if config.bias:
                for proj, bias in zip(
                    ("q_proj", "k_proj", "v_proj"),
                    split_qkv(weights[f"{ours}.attn.c_attn.bias"]),
                    strict=True,
                ):
                    stock[f"{theirs}.self_attn.{proj}.bias"] = bias
                stock[f"{theirs}.self_attn.o_proj.bias"] = weights[f"{ours}.attn.c_proj.bias"]
                self.mlp_biases_to_stock(weights, stock, ours, theirs)
            if self.qk_norm:
                stock[f"{theirs}.self_attn.q_norm.weight"] = weights[f"{ours}.attn.q_norm.weight"]
                stock[f"{theirs}.self_attn.k_norm.weight"] = weights[f"{ours}.attn.k_norm.weight"]
        stock["model.norm.weight"] = weights["transformer.ln_f.weight"]
        stock["lm_head.weight"] = weights["lm_head.weight"]
        return self.stock_config(config), tie_head(
            stock, "model.embed_tokens.weight", config.tie_word_embeddings
        )

    def mlp_biases_to_stock(self, weights: Weights, stock: Weights, ours: str, theirs: str) -> None:
        gate, up = weights[f"{ours}.mlp.c_fc.bias"].chunk(2)
        stock[f"{theirs}.mlp.gate_proj.bias"] = gate
        stock[f"{theirs}.mlp.up_proj.bias"] = up
        stock[f"{theirs}.mlp.down_proj.bias"] = weights[f"{ours}.mlp.c_proj.bias"]

    def declared_biases(self, stock: PretrainedConfig) -> bool:
        return bool(stock.attention_bias or getattr(stock, "mlp_bias", False))

    def check_stock(self, stock: PretrainedConfig) -> None:
        require_full_attention_heads(stock)
        require_full_rotary(stock)

    def from_stock(self, stock: PretrainedConfig, weights: Weights) -> tuple[dict[str, Any], Weights]:
        self.check_stock(stock)
        bias = has_biases(weights, self.declared_biases(stock))
        kwargs = dict(
            shared_minigpt_fields(stock),
            position_embedding_type="rope",
            rope_parameters=rope_parameters_of(stock),
            norm_type="rmsnorm",
            mlp_type="gated",
            qk_norm=self.qk_norm,
            layer_norm_epsilon=stock.rms_norm_eps,
            attention_dropout=float(stock.attention_dropout or 0.0),
            bias=bias,
        )
        C, width = stock.hidden_size, stock.intermediate_size
        ours_weights = {"transformer.wte.weight": weights["model.embed_tokens.weight"]}
        for i in range(stock.num_hidden_layers):
            ours, theirs = minigpt_layer(i), f"model.layers.{i}"
            attn, mlp = f"{theirs}.self_attn", f"{theirs}.mlp"
            ours_weights[f"{ours}.ln_1.weight"] = weights[f"{theirs}.input_layernorm.weight"]
            ours_weights[f"{ours}.ln_2.weight"] = weights[f"{theirs}.post_attention_layernorm.weight"]
            ours_weights[f"{ours}.attn.c_attn.weight"] = torch.cat(
                [weights[f"{attn}.{p}.weight"] for p in ("q_proj", "k_proj", "v_proj")]
            )
            ours_weights[f"{ours}.attn.c_proj.weight"] = weights[f"{attn}.o_proj.weight"]
            ours_weights[f"{ours}.mlp.c_fc.weight"] = torch.cat(
                [weights[f"{mlp}.gate_proj.weight"], weights[f"{mlp}.up_proj.weight"]]
            )
            ours_weights[f"{ours}.mlp.c_proj.weight"] = weights[f"{mlp}.down_proj.weight"]
            if bias:
                ours_weights[f"{ours}.attn.c_attn.bias"] = torch.cat(
                    [bias_or_zeros(weights, f"{attn}.{p}.bias", C) for p in ("q_proj", "k_proj", "v_proj")]
                )
                ours_weights[f"{ours}.attn.c_proj.bias"] = bias_or_zeros(weights, f"{attn}.o_proj.bias", C)
                ours_weights[f"{ours}.mlp.c_fc.bias"] = torch.cat(
                    [bias_or_zeros(weights, f"{mlp}.{p}.bias", width) for p in ("gate_proj", "up_proj")]
                )
                ours_weights[f"{ours}.mlp.c_proj.bias"] = bias_or_zeros(weights, f"{mlp}.down_proj.bias", C)
            if self.qk_norm:
                ours_weights[f"{ours}.attn.q_norm.weight"] = weights[f"{attn}.q_norm.weight"]
                ours_weights[f"{ours}.attn.k_norm.weight"] = weights[f"{attn}.k_norm.weight"]
        ours_weights["transformer.ln_f.weight"] = weights["model.norm.weight"]
        ours_weights["lm_head.weight"] = minigpt_head(
            weights, "model.embed_tokens.weight", kwargs["tie_word_embeddings"]
        )
        return kwargs, ours_weights


class Qwen3Architecture(LlamaArchitecture):
    name = "qwen3"
    model_type = "qwen3"
    summary = "Qwen3ForCausalLM: Llama's block plus QK-norm; no MLP biases"
    qk_norm = True

    def requirements(self, config: MiniGPTConfig) -> list[tuple[str, Any, str]]:
        return [*super().requirements(config), ("bias", False, "Qwen3's MLP has no biases")]

    def stock_config(self, config: MiniGPTConfig) -> PretrainedConfig:
        return Qwen3Config(
            **shared_stock_fields(config),
            rms_norm_eps=config.layer_norm_epsilon,
            rope_parameters=dict(config.rope_parameters),
            attention_bias=config.bias,
            attention_dropout=config.attention_dropout,
            head_dim=config.head_dim,
            num_key_value_heads=config.num_attention_heads,
            use_sliding_window=False,
            sliding_window=None,
            max_window_layers=config.num_hidden_layers,
        )

    def mlp_biases_to_stock(self, weights: Weights, stock: Weights, ours: str, theirs: str) -> None:
        raise AssertionError("refusal() keeps biased MLPs away from Qwen3")

    def declared_biases(self, stock: PretrainedConfig) -> bool:
        return bool(stock.attention_bias)

    def check_stock(self, stock: PretrainedConfig) -> None:
        super().check_stock(stock)
        require_stock(
            not stock.use_sliding_window,
            "use_sliding_window=True",
            "MiniGPT attends to the whole context in every layer",
        )


__all__ = ["LlamaArchitecture", "Qwen3Architecture"]
