"""What every stock architecture mapping provides, and the weight helpers they share.

A `StockArchitecture` knows, for one transformers family:
- `refusal(config)`: why a MiniGPT config has no exact equivalent in it (None when it has one);
- `to_stock(config, weights)`: the stock config and state dict of the same function;
- `from_stock(stock_config, weights)`: the inverse, MiniGPTConfig keyword arguments and state dict,
  or an `ExportError` naming the stock setting MiniGPT cannot express.

Weights are plain `{name: tensor}` dicts in each side's own names; nothing here builds a model, so
the mappings are cheap to test one by one. MiniGPT's fused projections are split or regrouped here:
`c_attn.weight` is (3C, C) with the q, k and v rows in that order, a gated `c_fc.weight` is (2I, C)
with the gate rows, then the up rows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from transformers import PretrainedConfig

from ...model.configuration_minigpt import MiniGPTConfig
from ..errors import ExportError

Weights = dict[str, torch.Tensor]


class StockArchitecture(ABC):
    name: str  # what `--to` takes, e.g. "llama"
    model_type: str  # the stock config's model_type
    summary: str  # one line for README tables and --help

    def refusal(self, config: MiniGPTConfig) -> str | None:
        """Why `config` has no exact equivalent here ("option=value: reason"), or None."""
        unmet = self.unmet_requirements(config)
        if not unmet:
            return None
        option, _, reason = unmet[0]
        return f"{option}={getattr(config, option)!r}: {reason}"

    def unmet_requirements(self, config: MiniGPTConfig) -> list[tuple[str, Any, str]]:
        return [(o, value, why) for o, value, why in self.requirements(config) if getattr(config, o) != value]

    @abstractmethod
    def requirements(self, config: MiniGPTConfig) -> list[tuple[str, Any, str]]:
        """(MiniGPTConfig field, the value this family needs, why) for every option it fixes."""

    @abstractmethod
    def to_stock(self, config: MiniGPTConfig, weights: Weights) -> tuple[PretrainedConfig, Weights]:
        """The stock config and its state dict, equal in function to MiniGPT's."""

    @abstractmethod
    def from_stock(self, stock: PretrainedConfig, weights: Weights) -> tuple[dict[str, Any], Weights]:
        """MiniGPTConfig keyword arguments (vocabulary and special tokens included) and state dict."""


def shared_stock_fields(config: MiniGPTConfig) -> dict[str, Any]:
    """Config fields every family names as transformers does (Llama's names)."""
    return dict(
        vocab_size=config.vocab_size,
        hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers,
        num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size,
        max_position_embeddings=config.max_position_embeddings,
        hidden_act=config.hidden_act,
        initializer_range=config.initializer_range,
        tie_word_embeddings=config.tie_word_embeddings,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        use_cache=True,
    )


def shared_minigpt_fields(stock: PretrainedConfig) -> dict[str, Any]:
    """The inverse of `shared_stock_fields` for families that use Llama's names."""
    return dict(
        vocab_size=stock.vocab_size,
        hidden_size=stock.hidden_size,
        num_hidden_layers=stock.num_hidden_layers,
        num_attention_heads=stock.num_attention_heads,
        intermediate_size=stock.intermediate_size,
        max_position_embeddings=stock.max_position_embeddings,
        hidden_act=stock.hidden_act,
        initializer_range=stock.initializer_range,
        tie_word_embeddings=bool(stock.tie_word_embeddings),
        bos_token_id=stock.bos_token_id,
        eos_token_id=stock.eos_token_id,
        pad_token_id=stock.pad_token_id,
    )


def rope_parameters_of(stock: PretrainedConfig) -> dict[str, Any]:
    """The stock config's rope settings without partial_rotary_factor (checked by the caller)."""
    rope = dict(getattr(stock, "rope_parameters", None) or {"rope_type": "default", "rope_theta": 10000.0})
    rope.pop("partial_rotary_factor", None)
    return rope


def require_stock(ok: bool, setting: str, reason: str) -> None:
    """Refuse a stock setting MiniGPT cannot express: `setting` reads "name=value"."""
    if not ok:
        raise ExportError(f"{setting}: {reason}")


def require_full_attention_heads(stock: PretrainedConfig) -> None:
    """MiniGPT has one key/value head per query head and head size hidden / heads."""
    heads = stock.num_attention_heads
    kv_heads = getattr(stock, "num_key_value_heads", None) or heads
    require_stock(
        kv_heads == heads,
        f"num_key_value_heads={kv_heads}",
        f"MiniGPT has no grouped-query attention (it needs {heads}, one per query head)",
    )
    head_dim = getattr(stock, "head_dim", None)
    if head_dim is not None:
        require_stock(
            head_dim * heads == stock.hidden_size,
            f"head_dim={head_dim}",
            f"MiniGPT's head size is hidden_size / num_attention_heads = {stock.hidden_size // heads}",
        )


def require_full_rotary(stock: PretrainedConfig) -> None:
    """MiniGPT rotates the whole head (partial_rotary_factor 1.0, in transformers 5's rope_parameters)."""
    partial = (getattr(stock, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0)
    require_stock(partial == 1.0, f"partial_rotary_factor={partial}", "MiniGPT rotates the whole head")


def bias_or_zeros(weights: Weights, name: str, size: int) -> torch.Tensor:
    """MiniGPT's bias `name`, or zeros where the model has none (bias=False) and the stock needs one."""
    if name in weights:
        return weights[name]
    return torch.zeros(size, dtype=weights_dtype(weights))


def weights_dtype(weights: Weights) -> torch.dtype:
    return next(iter(weights.values())).dtype


def all_zero(tensors: list[torch.Tensor]) -> bool:
    return all(not bool(t.any()) for t in tensors)


def has_biases(weights: Weights, declared: bool) -> bool:
    """MiniGPT's `bias` for an imported model: the stock config declares linear biases, or any stored
    bias is nonzero. All-zero biases (what an export of bias=False writes) read back as bias=False."""
    return declared or not all_zero([t for name, t in weights.items() if name.endswith(".bias")])


def split_qkv(fused: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MiniGPT's c_attn weight (3C, C) or bias (3C,) -> q, k, v (C, C) or (C,): the row blocks in order."""
    return fused.chunk(3, dim=0)


def minigpt_layer(i: int) -> str:
    return f"transformer.h.{i}"


def tie_head(stock_weights: Weights, embedding_name: str, tied: bool) -> Weights:
    """Give the stock model its head: the embedding itself when tied, else MiniGPT's lm_head."""
    if tied:
        stock_weights["lm_head.weight"] = stock_weights[embedding_name]
    return stock_weights


def minigpt_head(weights: Weights, embedding_name: str, tied: bool) -> torch.Tensor:
    """MiniGPT's lm_head.weight from a stock state dict (the embedding when tied)."""
    return weights[embedding_name] if tied else weights["lm_head.weight"]


__all__ = [
    "StockArchitecture",
    "Weights",
    "all_zero",
    "bias_or_zeros",
    "has_biases",
    "minigpt_head",
    "require_full_attention_heads",
    "require_full_rotary",
    "require_stock",
    "rope_parameters_of",
    "shared_minigpt_fields",
    "shared_stock_fields",
    "split_qkv",
    "minigpt_layer",
    "tie_head",
    "weights_dtype",
]
