"""FSDP2 as accelerate runs it, plus the two things it leaves undone for MiniGPT.

1. Sharding on CPU processes. Accelerate 1.15 makes a run FSDP only from a GPU-like process type
   (`AcceleratorState` checks MULTI_GPU, MULTI_XPU, ...): under `accelerate launch --config_file
   configs/accelerate/fsdp.yaml` a CPU run stays MULTI_CPU, wraps the model in DDP and keeps every
   parameter whole on every process, without a word. Torch's FSDP2 (`fully_shard`) runs on CPU over
   gloo, so `shard_on_cpu` lifts that one gate once the Accelerator exists; from there accelerate
   shards the model, gathers state dicts and saves and loads checkpoints as it does on GPUs.
2. Saving a sharded model as an unsharded one would. `fully_shard` swaps the model's class for a
   subclass `FSDP<Class>` defined in torch; `save_pretrained` would copy torch's file as the
   model's code and name that class in config.json's auto_map, so the folder would not load:
   `own_class` gives the model its class back for the length of a save. And the gathered state
   dict holds a tied weight twice, as two tensors (`save_pretrained` drops only shared storage):
   `without_tied_copies` drops the copy, as an unsharded save does.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from accelerate import Accelerator, PartialState
from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
from torch import nn
from torch.distributed.fsdp import FSDPModule


def fsdp_requested() -> bool:
    """True when the launcher was given an FSDP config (`accelerate launch` sets ACCELERATE_USE_FSDP)."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def shard_on_cpu(accelerator: Accelerator) -> bool:
    """Make a CPU run that asked for FSDP an FSDP run; True when it changed the accelerator's state.

    A no-op on GPUs (accelerate sets FSDP itself) and for runs that did not ask for it.
    """
    state = accelerator.state
    if not fsdp_requested() or state.distributed_type != DistributedType.MULTI_CPU:
        return False
    plugin = FullyShardedDataParallelPlugin()  # from the launcher's FSDP_* variables, as Accelerator builds it
    if state.mixed_precision != "no":  # what AcceleratorState does for a GPU FSDP run
        plugin.set_mixed_precision(state.mixed_precision)
    state.fsdp_plugin = plugin
    # Both shared states, as AcceleratorState's own upgrade does: every later `AcceleratorState()`
    # copies PartialState's type over its own.
    state.distributed_type = PartialState().distributed_type = DistributedType.FSDP
    return True


@contextlib.contextmanager
def own_class(model: nn.Module) -> Iterator[nn.Module]:
    """`model` with its own class (not FSDP2's `FSDP<Class>`) inside the block; any model passes through.

    Only for saving from a state dict already gathered: FSDP's own methods are not there meanwhile.
    """
    sharded_class = type(model)
    if not isinstance(model, FSDPModule):
        yield model
        return
    # fully_shard builds FSDP<Class> with bases (FSDPModule, Class): the first class past FSDP's.
    model.__class__ = next(cls for cls in sharded_class.__mro__ if not issubclass(cls, FSDPModule))
    try:
        yield model
    finally:
        model.__class__ = sharded_class


def without_tied_copies(model: nn.Module, state_dict: dict | None) -> dict | None:
    """`state_dict` without the weights tied to another one (the output head tied to the embedding),
    which `from_pretrained` ties again; None stays None (the model's own state dict is saved)."""
    if state_dict is None:
        return None
    tied = set(getattr(model, "all_tied_weights_keys", None) or ())
    return {name: tensor for name, tensor in state_dict.items() if name not in tied}


__all__ = ["fsdp_requested", "own_class", "shard_on_cpu", "without_tied_copies"]
