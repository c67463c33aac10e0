"""MiniGPT's architecture options, written once: each one's name, type, default and meaning
(`OPTIONS`), the values its choices take, and the checks of a set of values (`check_architecture`).

Two classes are built from this table: `MiniGPTConfig` (configuration_minigpt.py) and the run
config's `model:` section (`ModelSettings` in minigpt/training/settings.py). The run config must load
without torch or transformers, and this file ships beside the model as remote code (the config file
imports it with a flat relative import, which `save_pretrained` follows), so it imports nothing but
the standard library.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

POSITION_EMBEDDING_TYPES = ("learned", "rope")
NORM_TYPES = ("layernorm", "rmsnorm")
MLP_TYPES = ("standard", "gated")


@dataclass(frozen=True)
class Option:
    """One architecture option: a MiniGPTConfig field, or with `keyword` a MiniGPTConfig keyword
    that only some configs keep as an attribute (rope_parameters)."""

    name: str
    # A type object (`int | None`), not a string, so that any class declaring it resolves its type
    # hints (the run config types its overrides by them) without the namespace of this file.
    annotation: Any
    default: Any
    doc: str
    keyword: bool = False


OPTIONS: tuple[Option, ...] = (
    Option("vocab_size", int, 2048, "tokens in the vocabulary (the tokenizer's size)"),
    Option("hidden_size", int, 128, "width of the residual stream"),
    Option("num_hidden_layers", int, 4, "transformer blocks"),
    Option("num_attention_heads", int, 4, "heads per attention layer; must divide hidden_size"),
    # None means 4 * hidden_size for the standard MLP (GPT-2) and 8/3 * hidden_size rounded up to a
    # multiple of 32 for the gated one (the same parameter count, as in Llama): default_intermediate_size.
    Option("intermediate_size", int | None, None, "MLP width; None: 4 * hidden_size (standard), ~8/3 * (gated)"),
    # Learned positions end here (a longer input is an error); rotary positions past it run
    # (extrapolation, or the extension `rope_parameters` scaling gives), as in Llama.
    Option("max_position_embeddings", int, 256, "the context: longest sequence (prompt + generated) it takes"),
    Option("position_embedding_type", str, "learned", '"learned" (GPT-2) or "rope" (rotary, RoFormer)'),
    # In transformers' format {"rope_type": "default" | "linear" | "dynamic" | "yarn" | ..., "rope_theta":
    # base frequency, "factor": ...}; None is plain RoPE, base 10000 (configuration_minigpt.PLAIN_ROPE).
    # A keyword of MiniGPTConfig, not a field: transformers' rope code asks `hasattr(config,
    # "rope_parameters")` to tell a rotary model, so a field, which every instance would have, would
    # make a learned-position model look rotary to it. Only a rotary config keeps the attribute (an old
    # config's top-level `rope_theta` moves in); MiniGPTConfig checks it, against transformers' types.
    Option("rope_parameters", dict | None, None, "rotary settings in transformers' format", keyword=True),
    Option("hidden_act", str, "gelu_pytorch_tanh", "MLP activation, any name in transformers' ACT2FN"),
    # "standard": act(x W_fc) W_proj (GPT-2); "gated": (act(x W_gate) * x W_up) W_proj, SwiGLU with
    # hidden_act "silu" (Shazeer 2020, as in Llama), GeGLU with "gelu".
    Option("mlp_type", str, "standard", '"standard" (GPT-2) or "gated": SwiGLU with hidden_act silu (Llama)'),
    Option("norm_type", str, "layernorm", '"layernorm" (GPT-2) or "rmsnorm" (Zhang & Sennrich 2019, Llama)'),
    Option("qk_norm", bool, False, "RMSNorm on each head's queries and keys before rotary (Qwen3, OLMo 2)"),
    Option("hidden_dropout", float, 0.0, "dropout on embeddings and residual branches"),
    Option("attention_dropout", float, 0.0, "dropout on attention probabilities"),
    Option("bias", bool, True, "biases in linear layers and layer norms (False is faster, as in nanoGPT)"),
    Option("layer_norm_epsilon", float, 1e-5, "epsilon of every norm (LayerNorm, RMSNorm, QK-norm)"),
    # The attention and MLP output projections get initializer_range / sqrt(2 * num_hidden_layers), as
    # GPT-2's, so the residual stream's variance does not grow with depth.
    Option("initializer_range", float, 0.02, "std of the normal init of matrices and embeddings (GPT-2)"),
    Option("tie_word_embeddings", bool, True, "share the input embedding with the output head"),
    Option("use_cache", bool, True, "return a KV cache from forward when generating"),
    Option("bos_token_id", int | None, None, "beginning-of-sequence token (None: no BOS)"),
    Option("eos_token_id", int | list[int] | None, None, "end-of-text token that separates documents"),
    Option("pad_token_id", int | None, None, "padding token for batched generation"),
)

POSITIVE_INTEGERS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",  # or None: the default width
    "max_position_embeddings",
)
CHOICES = {
    "position_embedding_type": POSITION_EMBEDDING_TYPES,
    "norm_type": NORM_TYPES,
    "mlp_type": MLP_TYPES,
}


def declare_fields(namespace: dict[str, Any], options: Iterable[Option]) -> None:
    """Write `options` into a class body's namespace (`vars()` there) as annotated attributes with
    their defaults, as if each were written there as `name: annotation = default`: the dataclass the
    class becomes (`@dataclass`, or transformers' PretrainedConfig when the subclass is created) has
    them as fields, in table order after those written above the call."""
    annotations = namespace.setdefault("__annotations__", {})
    for option in options:
        annotations[option.name] = option.annotation
        namespace[option.name] = option.default


def default_intermediate_size(hidden_size: int, mlp_type: str) -> int:
    """MLP width when none is given: 4C for the standard MLP; for the gated one, whose three matrices
    would hold 1.5x the parameters at 4C, 8C/3 rounded up to a multiple of 32 (Llama's rule)."""
    if mlp_type == "gated":
        return 32 * -(-8 * hidden_size // (3 * 32))
    return 4 * hidden_size


def check_architecture(values: Mapping[str, Any], prefix: str = "") -> None:
    """Raise ValueError naming the first option of `values` that holds an impossible value, as
    `prefix + name` ("MiniGPTConfig.hidden_size", "model.hidden_size"); so are the options a message
    refers to. Only the options `values` holds are checked (the run config's section has no
    vocab_size: the tokenizer sets it); rope_parameters is MiniGPTConfig's to check, against the
    rotary types of the installed transformers."""

    def fail(name: str, what: str, value: Any) -> NoReturn:
        raise ValueError(f"{prefix}{name} {what}, got {value!r}")

    for name in POSITIVE_INTEGERS:
        value = values.get(name)
        if name not in values or (name == "intermediate_size" and value is None):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            fail(name, "must be a positive integer" + (" or null" if name == "intermediate_size" else ""), value)
    hidden, heads = values.get("hidden_size"), values.get("num_attention_heads")
    if hidden is not None and heads is not None:
        if hidden % heads != 0:
            fail("hidden_size", f"must be divisible by {prefix}num_attention_heads ({heads})", hidden)
        if values.get("position_embedding_type") == "rope" and (hidden // heads) % 2 != 0:
            fail("hidden_size", f"/ {prefix}num_attention_heads must be even for rope", hidden // heads)
    for name, choices in CHOICES.items():
        if name in values and values[name] not in choices:
            value = values[name]
            close = difflib.get_close_matches(str(value), choices, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{prefix}{name} must be one of {', '.join(choices)}, got {value!r}{hint}")
    if "qk_norm" in values and not isinstance(values["qk_norm"], bool):
        fail("qk_norm", "must be true or false", values["qk_norm"])
    for name in ("hidden_dropout", "attention_dropout"):
        if name in values and not (_is_number(values[name]) and 0.0 <= values[name] < 1.0):
            fail(name, "must be in [0, 1)", values[name])
    for name in ("layer_norm_epsilon", "initializer_range"):
        if name in values and not (_is_number(values[name]) and values[name] > 0):
            fail(name, "must be positive", values[name])


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


__all__ = [
    "MLP_TYPES",
    "NORM_TYPES",
    "OPTIONS",
    "POSITION_EMBEDDING_TYPES",
    "Option",
    "check_architecture",
    "declare_fields",
    "default_intermediate_size",
]
