"""The files each serving engine reads, exported from a MiniGPT model once and found again after.

    transformers   a stock transformers folder (no remote code: `transformers serve` loads no
                   custom class), its chat template and `<|im_end|>` stop in the tokenizer and
                   generation config (`minigpt.export.exporting`)
    llama.cpp      one f32 GGUF file with the tokenizer, the template and `<|im_end|>` as its
                   end-of-turn token (`minigpt.export.gguf_export`); f32 weights and, in
                   `engines.py`, an f32 KV cache give MiniGPT's greedy tokens (f16 rounds)

They go beside the run, in `<run>/serving/`, when the model is a run's `final/` or `checkpoint-N/`,
else (a model folder, a repo in a hub folder) in the per-user cache, never into the folder the
model lives in. Each export sits under a digest of the model's files (weights, config, tokenizer):
a model trained again gets new exports, an unchanged one reuses its own.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..cache_dir import user_cache_dir
from ..hub.loading import ModelLocation
from ..run_layout import model_folder_name

ENGINES = ("transformers", "llama.cpp")
SERVING_DIR = "serving"
GGUF_NAME = "model-f32.gguf"
DIGEST_CHARS = 16  # of the SHA-256: plenty to tell one model's versions apart
# The files that make the model what it computes and how it reads text (not model cards or notes).
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


@dataclass(frozen=True)
class EngineFiles:
    """What an engine serves: `path` (a stock folder or a GGUF file) under the name clients send."""

    engine: str
    name: str  # the `model` of every request, and what /v1/models lists
    path: Path
    root: Path  # the folder `name` is a path in (transformers serve names a local model by its path)
    context: int  # the model's context in tokens

    @property
    def ready(self) -> bool:
        return (self.path / "config.json").is_file() if self.engine == "transformers" else self.path.is_file()


def served_name(location: ModelLocation) -> str:
    """The name clients use: ORG/NAME for a repo, the run's name for a run, a folder's own name."""
    return location.name_or_path if location.is_repo else model_folder_name(location.local_dir)


def model_digest(folder: Path) -> str:
    """SHA-256 over the names and bytes of the model's files in `folder` (`MODEL_FILES`)."""
    digest = hashlib.sha256()
    for name in MODEL_FILES:
        path = folder / name
        if path.is_file():
            digest.update(name.encode() + b"\0")
            with open(path, "rb") as handle:
                digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()[:DIGEST_CHARS]


def exports_root(location: ModelLocation) -> Path:
    """`<run>/serving/` for a model in a run folder, else `serving/` in the per-user cache."""
    base = location.run_dir if location.run_dir is not None else user_cache_dir()
    return base / SERVING_DIR


def engine_files(location: ModelLocation, engine: str) -> EngineFiles:
    """Where `engine`'s files for the model at `location` are (or will be once exported)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
    folder = exports_root(location) / model_digest(location.local_dir)
    name = served_name(location)
    config = json.loads((location.local_dir / "config.json").read_text())
    context = config.get("max_position_embeddings") or config["n_positions"]  # (a stock GPT-2's name)
    if engine == "transformers":
        root = folder / "transformers"
        return EngineFiles(engine, name, root / name, root, context)
    return EngineFiles(engine, name, folder / GGUF_NAME, folder, context)


def export_for_engine(location: ModelLocation, engine: str) -> tuple[EngineFiles, bool]:
    """`engine`'s files for the model, exported when missing (whole or not at all); and whether they
    were exported now. An option the engine's format cannot express is an ExportError (one line)."""
    files = engine_files(location, engine)
    if files.ready:
        return files, False
    from transformers.utils import logging as transformers_logging

    from ..export.exporting import export_stock_folder
    from ..export.gguf_export import write_gguf
    from ..export.importing import import_stock_model, is_stock_model_dir
    from ..hub.loading import load_model, load_tokenizer

    transformers_logging.disable_progress_bar()  # per-tensor loading bars: instant for these models
    if is_stock_model_dir(location.local_dir):  # already stock: MiniGPT's own form of it first
        model = import_stock_model(location.name_or_path, **location.from_pretrained_kwargs())
    else:
        model = load_model(location, attn_implementation="eager")
    tokenizer = load_tokenizer(location)
    if engine == "transformers":
        export_stock_folder(model, tokenizer, files.path, source_name=files.name)
    else:
        write_gguf(model, tokenizer, files.path, dtype="f32")
    return files, True


__all__ = [
    "ENGINES",
    "EngineFiles",
    "engine_files",
    "export_for_engine",
    "exports_root",
    "model_digest",
    "served_name",
]
