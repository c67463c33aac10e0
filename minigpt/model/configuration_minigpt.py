"""MiniGPTConfig: the architecture of a MiniGPT model, and nothing else.

Training, data and tokenizer settings live in the run config (`minigpt/training/settings.py`); generation
settings live in `GenerationConfig`. This file imports nothing from the `minigpt` package so that
`save_pretrained` can ship it as remote code.
"""

from __future__ import annotations

import copy
from typing import Any

from transformers import PretrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.utils.versions import require_version

# Also for remote-code users, who never see setup.cfg: on 5.23 the forward fails obscurely
# (`create_causal_mask() got an unexpected keyword argument 'cache'`).
require_version("transformers>=5.24", "MiniGPT's model code uses the cache and output-capture API of 5.24")
POSITION_EMBEDDING_TYPES = ("learned", "rope")
NORM_TYPES = ("layernorm", "rmsnorm")
MLP_TYPES = ("standard", "gated")
ROPE_TYPES = ("default", *ROPE_INIT_FUNCTIONS)  # "default" is plain RoPE; the others scale it (Llama's set)
# rope_parameters of a rotary config that gives none (transformers' defaults: unscaled, base 10000)
PLAIN_ROPE = {"rope_type": "default", "rope_theta": 10000.0}


def default_intermediate_size(hidden_size: int, mlp_type: str) -> int:
    """MLP width when none is given: 4C for the standard MLP; for the gated one, whose three matrices
    would hold 1.5x the parameters at 4C, 8C/3 rounded up to a multiple of 32 (Llama's rule)."""
    if mlp_type == "gated":
        return 32 * -(-8 * hidden_size // (3 * 32))
    return 4 * hidden_size


class MiniGPTConfig(PretrainedConfig):
    r"""Configuration of a decoder-only GPT (pre-norm blocks, fused QKV, GELU MLP).

    The defaults are GPT-2's block; `norm_type="rmsnorm"`, `mlp_type="gated"` with `hidden_act="silu"`
    and rotary positions give Llama's block, and `qk_norm=True` on top of that Qwen3's, so a model
    exports exactly to those stock architectures (`minigpt.export`).

    Every field is validated at construction: a bad value raises `ValueError` naming the field.
    """

    model_type = "minigpt"
    keys_to_ignore_at_inference = ["cache"]

    vocab_size: int = 2048  # tokens in the vocabulary (the tokenizer's size)
    hidden_size: int = 128  # width of the residual stream
    num_hidden_layers: int = 4  # transformer blocks
    num_attention_heads: int = 4  # heads per attention layer; must divide hidden_size
    # MLP width; None means 4 * hidden_size for the standard MLP (GPT-2) and 8/3 * hidden_size rounded up
    # to a multiple of 32 for the gated one (the same parameter count, as in Llama).
    intermediate_size: int | None = None
    # The context: learned positions end here (a longer input is an error); rotary positions past it
    # run (extrapolation, or the extension `rope_parameters` scaling gives), as in Llama.
    max_position_embeddings: int = 256
    position_embedding_type: str = "learned"  # "learned" (GPT-2) or "rope" (rotary, RoFormer)
    # rope_parameters (a keyword, not a field): the rotary settings, in transformers' format
    # {"rope_type": "default" | "linear" | "dynamic" | "yarn" | ..., "rope_theta": base frequency,
    # "factor": ...}. Only a rotary config has the attribute (PLAIN_ROPE when none is given; an old
    # config's top-level `rope_theta` moves in): transformers' rope code asks `hasattr(config,
    # "rope_parameters")` to tell a rotary model, so a field, which every instance would have, would
    # make a learned-position model look rotary to it. See __post_init__.
    hidden_act: str = "gelu_pytorch_tanh"  # MLP activation, any name in transformers' ACT2FN
    # "standard": act(x W_fc) W_proj (GPT-2); "gated": (act(x W_gate) * x W_up) W_proj, SwiGLU with
    # hidden_act "silu" (Shazeer 2020, as in Llama), GeGLU with "gelu".
    mlp_type: str = "standard"
    norm_type: str = "layernorm"  # "layernorm" (GPT-2) or "rmsnorm" (Zhang & Sennrich 2019, as in Llama)
    qk_norm: bool = False  # RMSNorm on each head's queries and keys before rotary (as in Qwen3, OLMo 2)
    hidden_dropout: float = 0.0  # dropout on embeddings and residual branches
    attention_dropout: float = 0.0  # dropout on attention probabilities
    bias: bool = True  # biases in linear layers and layer norms (False is faster, as in nanoGPT)
    layer_norm_epsilon: float = 1e-5  # epsilon of every norm (LayerNorm, RMSNorm, QK-norm)
    # std of the normal init of matrices and embeddings (GPT-2); the attention and MLP output
    # projections get initializer_range / sqrt(2 * num_hidden_layers), as GPT-2's.
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True  # share the input embedding with the output head
    use_cache: bool = True  # return a KV cache from forward when generating
    bos_token_id: int | None = None  # beginning-of-sequence token (None: no BOS)
    eos_token_id: int | list[int] | None = None  # end-of-text token that separates documents
    pad_token_id: int | None = None  # padding token for batched generation

    def __post_init__(self, **kwargs):
        if self.intermediate_size is None:
            self.intermediate_size = default_intermediate_size(self.hidden_size, self.mlp_type)
        rope_parameters = kwargs.pop("rope_parameters", None)
        if self.position_embedding_type == "rope":
            # Set before transformers' __post_init__, which then standardises it in place (rope_type and
            # rope_theta filled in, a legacy top-level rope_theta or rope_scaling moved in): a copy, so
            # the caller's dict is not changed.
            self.rope_parameters = copy.deepcopy(rope_parameters)
        else:
            drop_plain_rope_settings(rope_parameters, kwargs)
        super().__post_init__(**kwargs)
        self.validate_architecture()

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def validate_architecture(self) -> None:
        """Raise ValueError naming the first invalid field (called at construction and load)."""
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"MiniGPTConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise ValueError(
                f"MiniGPTConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        if self.position_embedding_type == "rope" and self.head_dim % 2 != 0:
            raise ValueError(
                f"MiniGPTConfig.hidden_size / num_attention_heads must be even for rope, got {self.head_dim}"
            )
        for name in ("hidden_dropout", "attention_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"MiniGPTConfig.{name} must be in [0, 1), got {value!r}")
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise ValueError(
                f"MiniGPTConfig.position_embedding_type must be one of {POSITION_EMBEDDING_TYPES}, "
                f"got {self.position_embedding_type!r}"
            )
        if self.norm_type not in NORM_TYPES:
            raise ValueError(f"MiniGPTConfig.norm_type must be one of {NORM_TYPES}, got {self.norm_type!r}")
        if self.mlp_type not in MLP_TYPES:
            raise ValueError(f"MiniGPTConfig.mlp_type must be one of {MLP_TYPES}, got {self.mlp_type!r}")
        if not isinstance(self.qk_norm, bool):
            raise ValueError(f"MiniGPTConfig.qk_norm must be true or false, got {self.qk_norm!r}")
        if self.layer_norm_epsilon <= 0:
            raise ValueError(
                f"MiniGPTConfig.layer_norm_epsilon must be positive, got {self.layer_norm_epsilon!r}"
            )
        if self.initializer_range <= 0:
            raise ValueError(
                f"MiniGPTConfig.initializer_range must be positive, got {self.initializer_range!r}"
            )
        self.validate_rope_parameters()

    def validate_rope_parameters(self) -> None:
        """Raise ValueError naming rope_parameters when rotary positions cannot be built from it."""
        if self.position_embedding_type != "rope":
            return
        rope = self.rope_parameters
        if rope.get("rope_type") not in ROPE_TYPES:
            raise ValueError(
                f"MiniGPTConfig.rope_parameters['rope_type'] must be one of {ROPE_TYPES}, got {rope.get('rope_type')!r}"
            )
        theta = rope.get("rope_theta")
        if not isinstance(theta, int | float) or theta <= 0:
            raise ValueError(f"MiniGPTConfig.rope_parameters['rope_theta'] must be positive, got {theta!r}")
        try:
            self.validate_rope()  # transformers' per-type check: required keys such as `factor`
        except KeyError as err:
            raise ValueError(f"MiniGPTConfig.rope_parameters: {err.args[0]}") from None


def drop_plain_rope_settings(rope_parameters: dict | None, kwargs: dict[str, Any]) -> None:
    """For a learned-position config: remove the rotary settings configs used to save for every model
    (rope_parameters, or a top-level rope_theta / rope_scaling, all plain RoPE's defaults), so the
    config has none; raise ValueError when they ask for anything else, which only rotary positions do."""
    legacy_scaling, legacy_theta = kwargs.pop("rope_scaling", None), kwargs.pop("rope_theta", None)
    given = dict(rope_parameters or legacy_scaling or {})
    if legacy_theta is not None:
        given.setdefault("rope_theta", legacy_theta)
    if {**PLAIN_ROPE, **given} != PLAIN_ROPE:
        raise ValueError(
            f"MiniGPTConfig.rope_parameters applies to position_embedding_type='rope' only, got {given!r} "
            "with learned positions"
        )


__all__ = ["MLP_TYPES", "NORM_TYPES", "PLAIN_ROPE", "MiniGPTConfig", "default_intermediate_size"]
