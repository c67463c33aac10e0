"""Stock transformers families that compute a MiniGPT model exactly, in the order `auto` prefers.

The order is how widely each runs (transformers 4.x and 5.x, vLLM, TGI, llama.cpp). Each family is
data: the MiniGPT options it fixes, its config fields, and where each module's weights go. Fused
projections split into equal row blocks: `c_attn` (3C, C) into q, k, v; a gated `c_fc` (2I, C) into
gate, up. A bias one side has and the other lacks is zero (MiniGPT's `bias=False`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from transformers import AutoConfig, PretrainedConfig

from ..model.configuration_minigpt import MiniGPTConfig
from .errors import ExportError
from .targets import STOCK_TARGETS, TARGETS

Weights = dict[str, torch.Tensor]
# Config fields every family but GPT-2 names as MiniGPT does (GPT-2's attribute_map covers four of them).
SHARED_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "max_position_embeddings", "hidden_act", "initializer_range", "tie_word_embeddings", "bos_token_id",
    "eos_token_id", "pad_token_id",
)  # fmt: skip
ROTARY_NEEDS = dict(position_embedding_type="rope", norm_type="layernorm", mlp_type="standard", qk_norm=False)
LLAMA_NEEDS = dict(ROTARY_NEEDS, norm_type="rmsnorm", mlp_type="gated")
LLAMA_LAYER = {
    "ln_1": ("input_layernorm",), "ln_2": ("post_attention_layernorm",),
    "attn.c_attn": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "attn.c_proj": ("self_attn.o_proj",),
    "mlp.c_fc": ("mlp.gate_proj", "mlp.up_proj"), "mlp.c_proj": ("mlp.down_proj",),
}  # fmt: skip
LLAMA_GLOBALS = {"transformer.wte": "model.embed_tokens", "transformer.ln_f": "model.norm"}
TANH_GELU = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast")  # ggml's GELU; "gelu" (erf) is another function


@dataclass(frozen=True, eq=False)  # compared (and hashed) by identity
class StockArchitecture:
    name: str  # what `--to` takes, the stock model_type
    needs: dict[str, Any]  # MiniGPTConfig fields this family fixes, in the order refusals name them
    fields: dict[str, str]  # MiniGPTConfig field -> stock config field, copied both ways
    extra: Callable[[MiniGPTConfig], dict[str, Any]]  # further stock config values
    blocks: str  # the stock name of the block list
    layer: dict[str, tuple[str, ...]]  # MiniGPT module in a block -> the stock module(s) holding it
    globals: dict[str, str]  # MiniGPT module outside the blocks -> stock module (lm_head is lm_head)
    bias_flags: tuple[str, ...] = ()  # stock fields that declare linear biases
    stock_checks: tuple[tuple[str, Any, str], ...] = ()  # (stock field, the value MiniGPT needs, why)
    gguf_acts: tuple[str, ...] = ()  # hidden_act values llama.cpp's graph of this name computes
    layout: Callable | None = None  # (module, tensor, heads, to_stock) -> the tensor in the other side's order

    def unmet(self, config: MiniGPTConfig) -> list[tuple[str, Any]]:
        """(option, value this family needs) for each option of `config` it cannot express."""
        return [(option, value) for option, value in self.needs.items() if getattr(config, option) != value]

    def stock_config(self, config: MiniGPTConfig) -> PretrainedConfig:
        values = {theirs: getattr(config, ours) for ours, theirs in self.fields.items()}
        return AutoConfig.for_model(self.name, **values, **self.extra(config), use_cache=True)

    def minigpt_kwargs(self, stock: PretrainedConfig) -> dict[str, Any]:
        """MiniGPTConfig keyword arguments (all but `bias`) for `stock`; ExportError naming what stands in the way."""
        heads, rope = stock.num_attention_heads, getattr(stock, "rope_parameters", None) or {}
        window = getattr(stock, "sliding_window", None)
        checks = [
            *self.stock_checks,
            ("num_key_value_heads", heads, "MiniGPT has no grouped-query attention (a key/value head per query head)"),
            ("head_dim", stock.hidden_size // heads, "MiniGPT's head size is hidden_size / num_attention_heads"),
            ("partial_rotary_factor", 1.0, "MiniGPT rotates the whole head"),
            ("sliding_window", None, "MiniGPT attends to the whole context"),
        ]
        found = dict(
            num_key_value_heads=getattr(stock, "num_key_value_heads", None) or heads,
            head_dim=getattr(stock, "head_dim", None) or stock.hidden_size // heads,
            partial_rotary_factor=rope.get("partial_rotary_factor", 1.0),
            sliding_window=None if window is None or window >= stock.max_position_embeddings else window,
        )
        for setting, wanted, reason in checks:
            value = found[setting] if setting in found else getattr(stock, setting)
            if value != wanted:
                raise ExportError(f"{setting}={value!r}: {reason}")
        kwargs = {key: value for key, value in self.needs.items() if key != "bias"}
        for ours, theirs in self.fields.items():
            value = getattr(stock, theirs)
            kwargs[ours] = float(value or 0.0) if ours.endswith("dropout") else value
        kwargs["intermediate_size"] = kwargs["intermediate_size"] or 4 * kwargs["hidden_size"]  # GPT-2's None
        kwargs["tie_word_embeddings"] = bool(kwargs["tie_word_embeddings"])
        if self.needs["position_embedding_type"] == "rope":
            rope = dict(rope or {"rope_type": "default", "rope_theta": 10000.0})
            rope.pop("partial_rotary_factor", None)
            kwargs["rope_parameters"] = rope
        return kwargs

    def modules(self, layers: int) -> dict[str, tuple[str, ...]]:
        """{MiniGPT module: stock module(s)} for a model of `layers` blocks."""
        names = {ours: (theirs,) for ours, theirs in self.globals.items()}
        names["lm_head"] = ("lm_head",)
        for i in range(layers):
            for ours, theirs in self.layer.items():
                names[f"transformer.h.{i}.{ours}"] = tuple(f"{self.blocks}.{i}.{name}" for name in theirs)
        return names


def rename(weights: Weights, modules: dict[str, tuple[str, ...]], layout: Callable | None = None) -> Weights:
    """MiniGPT's `weights` under other names: each module's weight and bias, reordered by
    `layout(module, tensor)`, then split into as many equal row blocks as `modules` names for it."""
    renamed = {}
    for ours, theirs in modules.items():
        for kind in ("weight", "bias"):
            tensor = weights.get(f"{ours}.{kind}")
            if tensor is not None:
                tensor = layout(ours, tensor) if layout else tensor
                for name, part in zip(theirs, tensor.chunk(len(theirs)), strict=True):
                    renamed[f"{name}.{kind}"] = part
    return renamed


def unrename(weights: Weights, modules: dict[str, tuple[str, ...]], layout: Callable | None = None) -> Weights:
    """The inverse of `rename`: stock `weights` under MiniGPT's names."""
    ours = {}
    for module, theirs in modules.items():
        for kind in ("weight", "bias"):
            parts = [weights.get(f"{name}.{kind}") for name in theirs]
            if all(part is not None for part in parts):
                tensor = torch.cat(parts)
                ours[f"{module}.{kind}"] = layout(module, tensor) if layout else tensor
    return ours


def load_with_zero_biases(model: torch.nn.Module, weights: Weights) -> None:
    """Load `weights` into `model` strictly, but for biases: one the model lacks is dropped (the caller
    checked it is zero), one it has and `weights` lacks is zero."""
    expected = model.state_dict()
    weights = {name: t for name, t in weights.items() if name in expected or not name.endswith(".bias")}
    for name, tensor in expected.items():
        if name.endswith(".bias") and name not in weights:
            weights[name] = torch.zeros_like(tensor)
    model.load_state_dict(weights, strict=True)


def conv1d(module: str, tensor: torch.Tensor, heads: int, to_stock: bool) -> torch.Tensor:
    """GPT-2's projections are Conv1D layers, (in, out): the transpose of nn.Linear's weight."""
    projection = module.endswith(("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"))
    return tensor.t().contiguous() if projection and tensor.ndim == 2 else tensor


def per_head(module: str, tensor: torch.Tensor, heads: int, to_stock: bool) -> torch.Tensor:
    """GPT-NeoX fuses q, k, v head by head (head 0: q, k, v; head 1: ...); MiniGPT's rows are q|k|v."""
    if not module.endswith("c_attn"):
        return tensor
    shape = (3, heads, -1) if to_stock else (heads, 3, -1)  # (3C, ...) -> regrouped (3C, ...)
    return tensor.view(*shape, *tensor.shape[1:]).transpose(0, 1).reshape(tensor.shape)


def rotary_extra(config: MiniGPTConfig) -> dict[str, Any]:
    return dict(rope_parameters=dict(config.rope_parameters), num_key_value_heads=config.num_attention_heads)


def llama_extra(config: MiniGPTConfig) -> dict[str, Any]:
    return dict(rotary_extra(config), attention_bias=config.bias, head_dim=config.head_dim)


def neox_extra(config: MiniGPTConfig) -> dict[str, Any]:
    rope = dict(config.rope_parameters, partial_rotary_factor=1.0)  # GPT-NeoX's default rotates a quarter
    return dict(rope_parameters=rope, attention_bias=config.bias, use_parallel_residual=False)


SHARED = {name: name for name in SHARED_FIELDS}
LLAMA_FIELDS = dict(SHARED, layer_norm_epsilon="rms_norm_eps", attention_dropout="attention_dropout")
FAMILIES = (
    StockArchitecture(
        "llama", LLAMA_NEEDS, LLAMA_FIELDS, lambda c: dict(llama_extra(c), mlp_bias=c.bias), "model.layers",
        LLAMA_LAYER, LLAMA_GLOBALS, ("attention_bias", "mlp_bias"), gguf_acts=("silu",),
    ),
    StockArchitecture(
        "gpt2",
        dict(ROTARY_NEEDS, position_embedding_type="learned"),
        dict(SHARED, intermediate_size="n_inner", hidden_act="activation_function", hidden_dropout="resid_pdrop",
             attention_dropout="attn_pdrop", layer_norm_epsilon="layer_norm_epsilon"),
        lambda c: dict(embd_pdrop=c.hidden_dropout, scale_attn_weights=True),
        "transformer.h",
        {name: (name,) for name in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")},
        {name: name for name in ("transformer.wte", "transformer.wpe", "transformer.ln_f")},
        stock_checks=(
            ("scale_attn_weights", True, "MiniGPT scales attention by 1/sqrt(hs)"),
            ("scale_attn_by_inverse_layer_idx", False, "MiniGPT scales every layer's attention alike"),
            ("add_cross_attention", False, "MiniGPT is decoder-only"),
        ),
        gguf_acts=TANH_GELU,
        layout=conv1d,
    ),  # fmt: skip
    StockArchitecture(
        "gpt_neox",
        ROTARY_NEEDS,
        dict(SHARED, layer_norm_epsilon="layer_norm_eps", hidden_dropout="hidden_dropout",
             attention_dropout="attention_dropout"),
        neox_extra,
        "gpt_neox.layers",
        {"ln_1": ("input_layernorm",), "ln_2": ("post_attention_layernorm",),
         "attn.c_attn": ("attention.query_key_value",), "attn.c_proj": ("attention.dense",),
         "mlp.c_fc": ("mlp.dense_h_to_4h",), "mlp.c_proj": ("mlp.dense_4h_to_h",)},
        {"transformer.wte": "gpt_neox.embed_in", "transformer.ln_f": "gpt_neox.final_layer_norm"},
        stock_checks=(("use_parallel_residual", False, "MiniGPT's blocks add attention, then the MLP, in sequence"),),
        layout=per_head,
    ),  # fmt: skip
    StockArchitecture(
        "qwen3",
        dict(LLAMA_NEEDS, qk_norm=True, bias=False),
        LLAMA_FIELDS,
        lambda c: dict(llama_extra(c), use_sliding_window=False, sliding_window=None,
                       max_window_layers=c.num_hidden_layers),
        "model.layers",
        dict(LLAMA_LAYER, **{"attn.q_norm": ("self_attn.q_norm",), "attn.k_norm": ("self_attn.k_norm",)}),
        LLAMA_GLOBALS,
        ("attention_bias",),
        (("use_sliding_window", False, "MiniGPT attends to the whole context in every layer"),),
        gguf_acts=("silu",),
    ),  # fmt: skip
    StockArchitecture(
        "starcoder2",
        ROTARY_NEEDS,
        dict(SHARED, layer_norm_epsilon="norm_epsilon", hidden_dropout="residual_dropout",
             attention_dropout="attention_dropout"),
        lambda c: dict(rotary_extra(c), sliding_window=None, use_bias=c.bias, embedding_dropout=c.hidden_dropout),
        "model.layers",
        dict(LLAMA_LAYER, **{"mlp.c_fc": ("mlp.c_fc",), "mlp.c_proj": ("mlp.c_proj",)}),
        LLAMA_GLOBALS,
        ("use_bias",),
        gguf_acts=TANH_GELU,
    ),  # fmt: skip
)
STOCK_ARCHITECTURES = {family.name: family for family in FAMILIES}
assert tuple(STOCK_ARCHITECTURES) == STOCK_TARGETS, "targets.py lists the families in auto's order"


def choose_architecture(config: MiniGPTConfig, target: str = "auto") -> StockArchitecture:
    """The stock family `target` names, or for "auto" the most widely supported exact one; ExportError
    naming the option that stands in the way."""
    if target != "auto":
        if target not in STOCK_ARCHITECTURES:
            raise ExportError(f"unknown architecture {target!r}; choose one of {', '.join(TARGETS)}")
        unmet = STOCK_ARCHITECTURES[target].unmet(config)
        if unmet:
            (option, value), *_ = unmet
            ours = getattr(config, option)
            raise ExportError(f"cannot export to {target}: {option}={ours!r}: {target} needs {value!r}")
        return STOCK_ARCHITECTURES[target]
    unmet = {family: family.unmet(config) for family in FAMILIES}
    exact = [family for family, missing in unmet.items() if not missing]
    if exact:
        return exact[0]
    nearest = min(unmet, key=lambda family: len(unmet[family]))  # the first of the closest, in order
    option = unmet[nearest][0][0]
    wanted = ", ".join(f"{option}={value!r}" for option, value in unmet[nearest])
    raise ExportError(
        f"no stock architecture computes this model exactly: {option}={getattr(config, option)!r}; "
        f"the nearest, {nearest.name}, needs {wanted}"
    )


def to_stock_weights(family: StockArchitecture, config: MiniGPTConfig, weights: Weights) -> Weights:
    layout = family.layout and partial(family.layout, heads=config.num_attention_heads, to_stock=True)
    return rename(weights, family.modules(config.num_hidden_layers), layout)


def from_stock_weights(family: StockArchitecture, stock: PretrainedConfig, weights: Weights) -> Weights:
    layout = family.layout and partial(family.layout, heads=stock.num_attention_heads, to_stock=False)
    return unrename(weights, family.modules(stock.num_hidden_layers), layout)
