"""MiniGPT's architecture options, written once (`OPTIONS`), and the checks of a set of values
(`check_architecture`). `MiniGPTConfig` and the run config's `model:` section are built from this
table; it ships as remote code and loads without torch, so it imports only the standard library.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn


@dataclass(frozen=True)
class Option:
    """One architecture option: a MiniGPTConfig field, or with `keyword` a MiniGPTConfig keyword
    that only some configs keep as an attribute (rope_parameters)."""

    name: str
    annotation: Any  # a type object, not a string: a class declaring it resolves its hints without this file
    default: Any
    doc: str
    keyword: bool = False


OPTIONS: tuple[Option, ...] = (
    Option("vocab_size", int, 2048, "tokens in the vocabulary (the tokenizer's size)"),
    Option("hidden_size", int, 128, "width of the residual stream"),
    Option("num_hidden_layers", int, 4, "transformer blocks"),
    Option("num_attention_heads", int, 4, "heads per attention layer; must divide hidden_size"),
    # None: default_intermediate_size
    Option("intermediate_size", int | None, None, "MLP width; None: 4 * hidden_size (standard), ~8/3 * (gated)"),
    # Learned positions end here (a longer input is an error); rotary positions past it run, as in Llama.
    Option("max_position_embeddings", int, 256, "the context: longest sequence (prompt + generated) it takes"),
    Option("position_embedding_type", str, "learned", '"learned" (GPT-2) or "rope" (rotary, RoFormer)'),
    # {"rope_type": "default" | "linear" | "yarn" | ..., "rope_theta": base, "factor": ...}; None: plain RoPE,
    # base 10000. A keyword, not a field: transformers tells a rotary model by `hasattr(config,
    # "rope_parameters")`, so only a rotary config keeps the attribute.
    Option("rope_parameters", dict | None, None, "rotary settings in transformers' format", keyword=True),
    Option("hidden_act", str, "gelu_pytorch_tanh", "MLP activation, any name in transformers' ACT2FN"),
    # "gated": (act(x W_gate) * x W_up) W_proj, SwiGLU with silu (Shazeer 2020), GeGLU with gelu.
    Option("mlp_type", str, "standard", '"standard" (GPT-2) or "gated": SwiGLU with hidden_act silu (Llama)'),
    Option("norm_type", str, "layernorm", '"layernorm" (GPT-2) or "rmsnorm" (Zhang & Sennrich 2019, Llama)'),
    Option("qk_norm", bool, False, "RMSNorm on each head's queries and keys before rotary (Qwen3, OLMo 2)"),
    Option("hidden_dropout", float, 0.0, "dropout on embeddings and residual branches"),
    Option("attention_dropout", float, 0.0, "dropout on attention probabilities"),
    Option("bias", bool, True, "biases in linear layers and layer norms (False is faster, as in nanoGPT)"),
    Option("layer_norm_epsilon", float, 1e-5, "epsilon of every norm (LayerNorm, RMSNorm, QK-norm)"),
    # The residual projections get initializer_range / sqrt(2 * num_hidden_layers) (GPT-2).
    Option("initializer_range", float, 0.02, "std of the normal init of matrices and embeddings (GPT-2)"),
    Option("tie_word_embeddings", bool, True, "share the input embedding with the output head"),
    Option("use_cache", bool, True, "return a KV cache from forward when generating"),
    Option("bos_token_id", int | None, None, "beginning-of-sequence token (None: no BOS)"),
    Option("eos_token_id", int | list[int] | None, None, "end-of-text token that separates documents"),
    Option("pad_token_id", int | None, None, "padding token for batched generation"),
)

# intermediate_size may also be None: the default width
POSITIVE_INTEGERS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "max_position_embeddings",
)  # fmt: skip
CHOICES = {
    "position_embedding_type": ("learned", "rope"), "norm_type": ("layernorm", "rmsnorm"),
    "mlp_type": ("standard", "gated"),
}  # fmt: skip


def declare_fields(namespace: dict[str, Any], options: Iterable[Option]) -> None:
    """Write `options` into a class body's namespace (`vars()` there) as if each were written there as
    `name: annotation = default`, so the dataclass the class becomes has them as fields, in table order."""
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
    `prefix + name` ("MiniGPTConfig.hidden_size", "model.hidden_size"). Only the options `values` holds
    are checked; rope_parameters is MiniGPTConfig's to check, against the installed transformers."""

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
