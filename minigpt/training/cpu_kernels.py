"""CPU training kernels: swaps applied to a model only while it trains on a CPU, never saved or shipped.

The model file (`minigpt/model/modeling_minigpt.py`) is the same function on every device and uses
torch's own kernels. One of its layers still has a cheaper CPU backward: `MiniGPTRMSNorm`'s autograd
backward of Llama's formula is 22 aten calls, the hand-written one here 14, and at hidden 128 each
call costs more in dispatch than in arithmetic (17 norms a step in the default Qwen3-style block).
On the default run's step (2-core CPU, bf16 autocast) the autograd backward took about 1.04x the
step time of this one; in fp32 the two were within noise.

`cpu_training_kernels(model, enabled)` swaps the class of every `MiniGPTRMSNorm` for
`CPUTrainingRMSNorm` (same parameters, same state dict, same forward numbers) for the length of a
`with` block, and restores it on exit, also when the block raises. Checkpoints written inside the
block save the model's own class and files: `save_pretrained` copies the source of the top-level
model class, which is never swapped, and the weights, which do not change.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from ..model.modeling_minigpt import MiniGPTRMSNorm


class RMSNormFunction(torch.autograd.Function):
    """`MiniGPTRMSNorm`'s forward, the same ops, with its backward written out.

    Forward (x in any dtype, statistics in fp32): y = x r with r = rsqrt(mean(x^2) + eps), out = w y.
    Backward: dw = sum(g y), dx = r (g w - y mean(g w y)).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x32 = x.to(torch.float32)  # (..., C)
        rsqrt = torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)  # (..., 1)
        normed = x32 * rsqrt  # (..., C), fp32
        ctx.save_for_backward(normed, rsqrt, weight)
        ctx.input_dtype = x.dtype
        return weight * normed.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        normed, rsqrt, weight = ctx.saved_tensors
        grad_x = grad_weight = None
        if ctx.needs_input_grad[1]:  # (C,): summed over every position
            grad_weight = (grad * normed.to(ctx.input_dtype)).flatten(0, -2).sum(0).to(weight.dtype)
        if ctx.needs_input_grad[0]:
            grad_normed = (grad * weight).to(torch.float32)  # (..., C)
            projection = (grad_normed * normed).mean(-1, keepdim=True)  # (..., 1)
            grad_x = torch.addcmul(grad_normed, normed, projection, value=-1.0).mul_(rsqrt)
            grad_x = grad_x.to(ctx.input_dtype)
        return grad_x, grad_weight, None


class CPUTrainingRMSNorm(MiniGPTRMSNorm):
    """`MiniGPTRMSNorm` whose training forward records the hand-written backward of `RMSNormFunction`.

    Without grad (evaluation, generation) and under torch.compile, which fuses the plain formula
    itself, it is the parent's forward.
    """

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        if torch.is_grad_enabled() and not torch.compiler.is_compiling():
            return RMSNormFunction.apply(hidden_states, self.weight, self.eps)
        return super().forward(hidden_states)


@contextmanager
def cpu_training_kernels(model: nn.Module, enabled: bool) -> Iterator[nn.Module]:
    """Within the block, every `MiniGPTRMSNorm` of `model` (that exact class, not a subclass) runs as
    `CPUTrainingRMSNorm`; on exit each gets its own class back. Yields `model`.

    `enabled=False` changes nothing: pass whether the run trains on a CPU without torch.compile.
    """
    swapped = [module for module in model.modules() if type(module) is MiniGPTRMSNorm] if enabled else []
    for module in swapped:
        module.__class__ = CPUTrainingRMSNorm
    try:
        yield model
    finally:
        for module in swapped:
            module.__class__ = MiniGPTRMSNorm


__all__ = ["CPUTrainingRMSNorm", "RMSNormFunction", "cpu_training_kernels"]
