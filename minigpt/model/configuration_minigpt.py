"""MiniGPTConfig: the architecture of a MiniGPT model, and nothing else (training settings live in
the run config, generation settings in `GenerationConfig`). The options are written once in
`architecture_minigpt.py`, its only import from the package, so `save_pretrained` ships both as remote code.
"""

from __future__ import annotations

import copy
from typing import Any

from transformers import PretrainedConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.utils.versions import require_version

from .architecture_minigpt import OPTIONS, check_architecture, declare_fields, default_intermediate_size

# Also for remote-code users, who never see setup.cfg: on 5.23 the forward fails obscurely
# (`create_causal_mask() got an unexpected keyword argument 'cache'`).
require_version("transformers>=5.24", "MiniGPT's model code uses the cache and output-capture API of 5.24")
ROPE_TYPES = ("default", *ROPE_INIT_FUNCTIONS)  # "default" is plain RoPE; the others scale it (Llama's set)
# rope_parameters of a rotary config that gives none (transformers' defaults: unscaled, base 10000)
PLAIN_ROPE = {"rope_type": "default", "rope_theta": 10000.0}


class MiniGPTConfig(PretrainedConfig):
    r"""Configuration of a decoder-only GPT: GPT-2's block by default; rmsnorm, a gated silu MLP and
    rotary positions give Llama's, and `qk_norm=True` Qwen3's. A bad value raises `ValueError` naming the field.
    """

    model_type = "minigpt"
    keys_to_ignore_at_inference = ["cache"]

    # The table's fields, declared in this body because transformers makes every config subclass a
    # dataclass of its body's annotated attributes. rope_parameters is a keyword: see __post_init__.
    declare_fields(vars(), (option for option in OPTIONS if not option.keyword))

    def __post_init__(self, **kwargs):
        if self.intermediate_size is None:
            self.intermediate_size = default_intermediate_size(self.hidden_size, self.mlp_type)
        rope_parameters = kwargs.pop("rope_parameters", None)
        if self.position_embedding_type == "rope":
            # A copy (the caller's dict unchanged), set before transformers' __post_init__ standardises it
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
        fields = {option.name: getattr(self, option.name) for option in OPTIONS if not option.keyword}
        check_architecture(fields, prefix="MiniGPTConfig.")
        self.validate_rope_parameters()

    def validate_rope_parameters(self) -> None:
        """Raise ValueError naming rope_parameters when rotary positions cannot be built from it."""
        if self.position_embedding_type != "rope":
            return
        rope = self.rope_parameters
        if rope.get("rope_type") not in ROPE_TYPES:
            got = rope.get("rope_type")
            raise ValueError(f"MiniGPTConfig.rope_parameters['rope_type'] must be one of {ROPE_TYPES}, got {got!r}")
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
