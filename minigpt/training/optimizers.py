"""Muon for the hidden weight matrices, AdamW for everything else, as the one optimizer Trainer takes.

Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks") replaces each
matrix's momentum by its nearest semi-orthogonal matrix (five Newton-Schulz iterations), so every
direction of the update moves by about the same amount. It is defined for 2-D hidden-layer
weights only: embeddings, the output head, norm weights and biases stay with AdamW. Both are
torch's own (`torch.optim.Muon`, `torch.optim.AdamW`); Trainer's `optim` names have no Muon, so
`MiniGPTTrainer.create_optimizer` builds this pair and Trainer does the rest (schedule, clipping,
accumulation, precision, saving `optimizer.pt`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from transformers import Trainer, TrainingArguments

MUON = "muon"  # the training.optim value
AUX_ADAMW = "adamw_torch_fused"  # Trainer's optimizer for the rest (its default; fused on CPU too)


class CompositeOptimizer(torch.optim.Optimizer):
    """Several optimizers stepped as one, because Trainer, Accelerate and the LR scheduler take one.

    `param_groups` holds the inner optimizers' own group dicts (not copies), in order, so the
    scheduler's writes to each group's "lr" reach them and every group keeps its own peak LR.
    `state_dict()` holds each inner optimizer's state dict under its name: one optimizer.pt restores
    all of them.
    """

    def __init__(self, optimizers: Mapping[str, torch.optim.Optimizer]) -> None:
        self.optimizers = dict(optimizers)
        first = next(iter(self.optimizers.values()))
        # Defaults only "lr", the first optimizer's: cosine_with_min_lr turns min_lr into a ratio of
        # optimizer.defaults["lr"]; the groups already hold every key, so nothing is added to them.
        super().__init__(self.inner_groups(), {"lr": first.defaults["lr"]})

    def inner_groups(self) -> list[dict[str, Any]]:
        return [group for optimizer in self.optimizers.values() for group in optimizer.param_groups]

    @property
    def state(self) -> dict[torch.Tensor, Any]:  # type: ignore[override]
        """Every inner optimizer's per-parameter state, as one mapping (a read-only view)."""
        return {p: s for optimizer in self.optimizers.values() for p, s in optimizer.state.items()}

    @state.setter
    def state(self, value: Any) -> None:
        pass  # Optimizer.__init__ assigns an empty state: the state lives in the inner optimizers

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for optimizer in self.optimizers.values():
            optimizer.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for optimizer in self.optimizers.values():
            optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return {name: optimizer.state_dict() for name, optimizer in self.optimizers.items()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if set(state_dict) != set(self.optimizers):
            raise ValueError(
                f"optimizer state holds {sorted(state_dict)}, this optimizer is {sorted(self.optimizers)}"
            )
        for name, optimizer in self.optimizers.items():
            optimizer.load_state_dict(state_dict[name])
        # Optimizer.load_state_dict replaces each group dict with a new one: point at those, in
        # place, or the LR scheduler would go on writing to the old dicts (Accelerate's prepare()
        # already loads a state dict once, to move it to the device).
        self.param_groups[:] = self.inner_groups()


def muon_parameter_names(model: nn.Module) -> list[str]:
    """The hidden weight matrices Muon takes: every trainable 2-D parameter that is neither an
    embedding table nor the output head (c_attn, c_proj, c_fc, ... of every block)."""
    excluded = {id(module.weight) for module in model.modules() if isinstance(module, nn.Embedding)}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        excluded.add(id(head.weight))  # its rows are per-token classifiers, like an embedding's
    return [
        name
        for name, param in model.named_parameters()
        if param.requires_grad and param.ndim == 2 and id(param) not in excluded
    ]


def muon_with_adamw(
    model: nn.Module,
    args: TrainingArguments,
    decay_parameter_names: Iterable[str],
    muon_kwargs: Mapping[str, Any],
) -> CompositeOptimizer:
    """Muon (`muon_kwargs`: torch.optim.Muon's keywords) on `muon_parameter_names(model)`, and the
    optimizer Trainer builds from `args` (`args.optim`: AUX_ADAMW under training.optim muon, with
    learning_rate, betas, eps) on the rest, with `args.weight_decay` on those of them in
    `decay_parameter_names`.

    AdamW's groups come first, so Trainer's logged `learning_rate` (the first group's) stays AdamW's.
    """
    muon_names = set(muon_parameter_names(model))
    decayed = set(decay_parameter_names)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]

    def group(names_and_params: list[tuple[str, torch.Tensor]], **options: Any) -> dict[str, Any]:
        # param_names: the state dict and error messages name each parameter.
        params, names = [p for _, p in names_and_params], [n for n, _ in names_and_params]
        return {"params": params, "param_names": names, **options}

    others = [(n, p) for n, p in named if n not in muon_names]
    adamw_groups = [
        group([(n, p) for n, p in others if n in decayed], weight_decay=args.weight_decay),
        group([(n, p) for n, p in others if n not in decayed], weight_decay=0.0),
    ]
    adamw_cls, adamw_kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    adamw = adamw_cls([g for g in adamw_groups if g["params"]], **adamw_kwargs)
    muon = torch.optim.Muon([group([(n, p) for n, p in named if n in muon_names])], **muon_kwargs)
    return CompositeOptimizer({"adamw": adamw, "muon": muon})


__all__ = ["AUX_ADAMW", "MUON", "CompositeOptimizer", "muon_parameter_names", "muon_with_adamw"]
