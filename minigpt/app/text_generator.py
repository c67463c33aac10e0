"""The Generate tab's work: find a model as the CLI does, keep the last one loaded, stream text.

The Chat tab talks to the same loaded model (`using`, `chat_replies`).

A model is named like `scripts/generate.py`'s MODEL argument (a run, checkpoint or model folder,
or ORG/NAME in a hub folder at a revision) and loaded with `AutoModelForCausalLM`. The last model
stays in memory, so trying prompt after prompt reloads nothing; a checkpoint that changed on disk
(a run that saved a new final/ into the same folder) is loaded again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt.generation import SamplingSettings, random_seed, stream_text
from minigpt.hub.loading import ModelLocation, load_model, load_tokenizer, resolve_model
from minigpt.run_layout import read_run_config
from minigpt.training.run_folder import FINAL_DIR, RESOLVED_CONFIG_NAME, list_checkpoints


@dataclass
class LoadedModel:
    key: tuple[Any, ...]
    location: ModelLocation
    model: Any
    tokenizer: Any
    run_config: dict[str, Any]  # the resolved training config beside the model ({} if none)


class TextGenerator:
    """Loads one model at a time and streams continuations; generations run one after another."""

    def __init__(self) -> None:
        self._loaded: LoadedModel | None = None
        self._lock = threading.Lock()  # one generation at a time: they share the model and torch's RNG

    def load(self, model: str, revision: str | None = None, hub_dir: str | None = None) -> LoadedModel:
        """The named model, from memory when it is the one loaded last and unchanged on disk.

        Raises MiniGPTUserError (ModelNotFoundError, HubError) when nothing is found.
        """
        location = resolve_model(model.strip(), hub_dir=hub_dir or None, revision=revision or None)
        key = (str(location.local_dir.resolve()), location.revision, _weights_mtime(location.local_dir))
        if self._loaded is None or self._loaded.key != key:
            self._loaded = None  # free the old weights before loading the new ones
            self._loaded = LoadedModel(
                key,
                location,
                load_model(location),
                load_tokenizer(location),
                read_run_config(location.local_dir),
            )
        return self._loaded

    @contextmanager
    def using(
        self, model: str, revision: str | None = None, hub_dir: str | None = None
    ) -> Iterator[LoadedModel]:
        """The named model (`load`), held alone for the block: generations share the model and
        torch's RNG, so they run one after another (the Generate and Chat tabs alike)."""
        with self._lock:
            yield self.load(model, revision, hub_dir)

    def stream(
        self,
        model: str,
        prompt: str,
        settings: SamplingSettings,
        revision: str | None = None,
        hub_dir: str | None = None,
    ) -> Iterator[tuple[str, int]]:
        """Yield (text so far, seed) while the continuation of `prompt` is produced."""
        seed = settings.seed if settings.seed is not None else random_seed()
        settings = SamplingSettings(**{**settings.__dict__, "seed": seed, "num_samples": 1})
        settings.validate()  # before loading: a bad setting should not wait for a model
        with self.using(model, revision, hub_dir) as loaded:
            for text in stream_text(loaded.model, loaded.tokenizer, prompt, settings, loaded.run_config):
                yield text, seed


def _weights_mtime(folder: Path) -> int | None:
    weights = folder / "model.safetensors"
    return weights.stat().st_mtime_ns if weights.exists() else None


def list_model_choices(roots: list[Path]) -> list[str]:
    """Run folders with a final/ model and every checkpoint-N under `roots` (one level deep), newest first.

    A run folder is one holding resolved_config.yaml, as every training run writes.
    """
    runs: set[Path] = set()
    for root in roots:
        if (root / RESOLVED_CONFIG_NAME).is_file():
            runs.add(root)
        if root.is_dir():
            runs.update(p.parent for p in root.glob(f"*/{RESOLVED_CONFIG_NAME}"))
    choices: list[tuple[float, str]] = []
    for run in runs:
        if (run / FINAL_DIR / "config.json").is_file():
            choices.append(((run / FINAL_DIR).stat().st_mtime, str(run)))
        for checkpoint in list_checkpoints(run):
            if (checkpoint / "config.json").is_file():
                choices.append((checkpoint.stat().st_mtime, str(checkpoint)))
    return [name for _, name in sorted(choices, reverse=True)]


__all__ = ["LoadedModel", "TextGenerator", "list_model_choices"]
