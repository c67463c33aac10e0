"""Stock transformers architectures that compute a MiniGPT model exactly, in the order `auto` prefers.

The order is how widely each is supported (transformers 4.x and 5.x, vLLM, TGI, llama.cpp, ONNX
tooling): Llama everywhere, then GPT-2, GPT-NeoX, Qwen3 (transformers >= 4.51) and Starcoder2. For
a MiniGPT config at most one family of each kind fits, so `auto` takes the first that does.
"""

from __future__ import annotations

from ...model.configuration_minigpt import MiniGPTConfig
from ..errors import ExportError
from ..targets import STOCK_TARGETS, TARGETS
from .base import StockArchitecture
from .gpt2 import GPT2Architecture
from .gpt_neox import GPTNeoXArchitecture, Starcoder2Architecture
from .llama import LlamaArchitecture, Qwen3Architecture

STOCK_ARCHITECTURES: dict[str, StockArchitecture] = {
    arch.name: arch
    for arch in (
        LlamaArchitecture(),
        GPT2Architecture(),
        GPTNeoXArchitecture(),
        Qwen3Architecture(),
        Starcoder2Architecture(),
    )
}
BY_MODEL_TYPE = {arch.model_type: arch for arch in STOCK_ARCHITECTURES.values()}
assert tuple(STOCK_ARCHITECTURES) == STOCK_TARGETS, "targets.py lists the families in auto's order"


def choose_architecture(config: MiniGPTConfig, target: str = "auto") -> StockArchitecture:
    """The stock family `target` names, or for "auto" the most widely supported exact one.

    Raises ExportError with one line naming the option that stands in the way.
    """
    if target != "auto":
        arch = STOCK_ARCHITECTURES.get(target)
        if arch is None:
            raise ExportError(f"unknown architecture {target!r}; choose one of {', '.join(TARGETS)}")
        refusal = arch.refusal(config)
        if refusal is not None:
            raise ExportError(f"cannot export to {target}: {refusal}")
        return arch
    unmet = {arch: arch.unmet_requirements(config) for arch in STOCK_ARCHITECTURES.values()}
    exact = [arch for arch, missing in unmet.items() if not missing]
    if exact:
        return exact[0]
    nearest = min(unmet, key=lambda arch: len(unmet[arch]))  # the first of the closest, in order
    wanted = ", ".join(f"{option}={value!r}" for option, value, _ in unmet[nearest])
    option, _, reason = unmet[nearest][0]
    raise ExportError(
        f"no stock architecture computes this model exactly: {option}={getattr(config, option)!r} "
        f"({reason}); the nearest, {nearest.name}, needs {wanted}"
    )


def architecture_for_model_type(model_type: str) -> StockArchitecture | None:
    return BY_MODEL_TYPE.get(model_type)


__all__ = [
    "STOCK_ARCHITECTURES",
    "TARGETS",
    "StockArchitecture",
    "architecture_for_model_type",
    "choose_architecture",
]
