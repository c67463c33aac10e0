"""Where a run's parameters live across processes, said once when training starts.

Under `accelerate launch` every process holds a whole copy of the model (DDP) or only its shard
(FSDP2), and nothing else a run prints tells the two apart: a CPU run given the FSDP config that
accelerate left unsharded looked just like a sharded one. The line is counted on every process
from the parameters the training loop holds (FSDP2's are DTensors; a process holds `to_local()`).
"""

from __future__ import annotations

import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor
from transformers import TrainerCallback


def held_parameters(model: nn.Module) -> tuple[int, int, bool]:
    """(parameters this process holds, parameters of the whole model, whether any is sharded)."""
    held = total = 0
    sharded = False
    for param in model.parameters():  # a tied weight once
        if isinstance(param, DTensor):
            held += param.to_local().numel()
            sharded = sharded or any(placement.is_shard() for placement in param.placements)
        else:
            held += param.numel()
        total += param.numel()  # a DTensor's numel is the whole parameter's
    return held, total, sharded


def describe_layout(held: list[int], total: int, sharded: bool) -> str:
    """The run's line: `held` = the parameters each process holds, by process index."""
    if sharded:
        shares = " + ".join(f"{count:,}" for count in held)
        return f"parameters: sharded over {len(held)} processes (FSDP2): {shares} of {total:,}, one shard on each"
    return f"parameters: a whole copy on each of {len(held)} processes ({total:,} each)"


class ParameterLayoutCallback(TrainerCallback):
    """Says on the main process, when training starts, what each process holds of the model."""

    def on_train_begin(self, args, state, control, model=None, **kwargs) -> None:
        if args.world_size == 1 or model is None:
            return
        held, total, sharded = held_parameters(model)
        everyone: list[tuple[int, bool] | None] = [None] * args.world_size
        dist.all_gather_object(everyone, (held, sharded))  # every process takes part
        if state.is_world_process_zero:
            counts = [count for count, _ in everyone]
            print(describe_layout(counts, total, any(s for _, s in everyone)), flush=True)


__all__ = ["ParameterLayoutCallback", "describe_layout", "held_parameters"]
