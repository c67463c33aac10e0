"""Find and load a model from every script's MODEL argument: a model folder (`config.json` inside:
`final/`, `checkpoint-N/`, a snapshot), a run folder (its `final/`), or `ORG/NAME` in a hub folder
at a branch, tag or commit, loaded with `from_pretrained(repo_id, cache_dir=hub_dir, revision=...)`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..console import transformers_progress_bars
from ..errors import MiniGPTUserError
from ..model import register_auto_classes
from ..run_layout import FINAL_DIR, checkpoint_step, list_checkpoints
from . import store


class ModelNotFoundError(MiniGPTUserError):
    """MODEL names no model folder, run, checkpoint or repo in the hub folder."""


@dataclass(frozen=True)
class ModelLocation:
    """Where a model lives, in the terms `from_pretrained` takes, plus the folder on disk."""

    name_or_path: str  # a folder, or a repo id
    local_dir: Path  # the folder holding config.json (for a repo id: its snapshot)
    run_dir: Path | None = None  # the training run the model came from, when known
    revision: str | None = None  # repo ids only: branch, tag or commit
    hub_dir: Path | None = None  # repo ids only: the hub folder (a huggingface_hub cache)

    @property
    def is_repo(self) -> bool:
        return self.hub_dir is not None

    def from_pretrained_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `AutoModel*/AutoTokenizer.from_pretrained(self.name_or_path, ...)`."""
        return {"revision": self.revision, "cache_dir": str(self.hub_dir), "local_files_only": True} if self.is_repo else {}


def resolve_model(
    model: str | os.PathLike, hub_dir: str | os.PathLike | None = None, revision: str | None = None
) -> ModelLocation:
    """Turn a MODEL argument into a `ModelLocation`; a folder on disk wins over a repo id."""
    path = Path(model)
    if path.is_dir():
        if revision is not None:
            raise ModelNotFoundError(f"--revision applies to repo ids, but {model} is a folder")
        if (path / "config.json").is_file():  # in a run folder: `final/` or `checkpoint-N/`
            in_run = path.resolve().name == FINAL_DIR or checkpoint_step(path.resolve()) is not None
            return ModelLocation(str(path), path, run_dir=path.resolve().parent if in_run else None)
        final = path / FINAL_DIR
        if (final / "config.json").is_file():
            return ModelLocation(str(final), final, run_dir=path)
        checkpoint = next((p for p in list_checkpoints(path) if (p / "config.json").is_file()), None)
        if checkpoint is not None:
            raise ModelNotFoundError(f"run folder {model} has no {FINAL_DIR}/ model (training unfinished?); "
                                     f"pass a checkpoint folder instead, e.g. {checkpoint}")  # fmt: skip
        raise ModelNotFoundError(f"{model} holds no model: no config.json, {FINAL_DIR}/ or checkpoint-N/")
    if path.exists():
        raise ModelNotFoundError(f"{model} is a file; MODEL is a model, run or checkpoint folder, or ORG/NAME")
    model = str(model)
    hub_path = Path(hub_dir) if hub_dir is not None else store.default_hub_dir()
    if model.count("/") != 1 or model.startswith((".", "/", "~")):  # path syntax, not ORG/NAME
        hint = " (a repo id reads ORG/NAME)" if "/" not in model else ""
        raise ModelNotFoundError(f"no model at {model}: no such folder{hint}")
    try:
        store.validate_model_repo_id(model)
    except store.HubError:
        raise ModelNotFoundError(f"no model at {model}: no such folder (and not a valid repo id)") from None
    if not (store.repo_dir(hub_path, model) / "snapshots").is_dir():
        # "runs/nothere" reads as a folder and as a repo id: say that it is neither.
        raise ModelNotFoundError(f"no model at {model}: not a folder, and not a repo id in hub folder {hub_path}/")
    revision = revision or store.MAIN_BRANCH
    snapshot = store.snapshot_dir(hub_path, model, revision)  # HubError if the repo or revision is absent
    return ModelLocation(model, snapshot, revision=revision, hub_dir=hub_path)


def load_tokenizer(location: ModelLocation) -> PreTrainedTokenizerBase:
    """The model's tokenizer, through `AutoTokenizer` as any transformers user would load it."""
    return AutoTokenizer.from_pretrained(location.name_or_path, **location.from_pretrained_kwargs())


def load_model(location: ModelLocation, **kwargs: Any) -> PreTrainedModel:
    """The model in eval mode through `AutoModelForCausalLM`, with the installed minigpt classes
    (registered with the Auto classes), and no per-tensor "Loading weights" bar (instant for these models)."""
    register_auto_classes()
    with transformers_progress_bars(False):
        model = AutoModelForCausalLM.from_pretrained(location.name_or_path, **location.from_pretrained_kwargs(), **kwargs)
    return model.eval()
