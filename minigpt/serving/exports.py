"""The files each serving engine reads (a stock transformers folder, an f32 GGUF), exported once per
model version under a digest of its files, in `<run>/serving/` or the per-user cache (docs/serving.md)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from ..cache_dir import user_cache_dir
from ..hub.loading import ModelLocation
from ..run_layout import model_folder_name

ENGINES = ("transformers", "llama.cpp")
EXPORT_VERSION = b"2"  # in the digest: exports made by an earlier MiniGPT are made again (2: sampling)
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")  # fmt: skip
# What an OpenAI request does not set: sample the whole distribution at temperature 1.
SAMPLING = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0}


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


def engine_files(location: ModelLocation, engine: str) -> EngineFiles:
    """Where `engine`'s files for the model at `location` are (or will be once exported)."""
    digest = hashlib.sha256(EXPORT_VERSION)
    for name in MODEL_FILES:
        if (location.local_dir / name).is_file():
            digest.update(name.encode() + b"\0" + hashlib.sha256((location.local_dir / name).read_bytes()).digest())
    base = location.run_dir if location.run_dir is not None else user_cache_dir()
    folder = base / "serving" / digest.hexdigest()[:16]
    name = location.name_or_path if location.is_repo else model_folder_name(location.local_dir)
    config = json.loads((location.local_dir / "config.json").read_text())
    context = config.get("max_position_embeddings") or config["n_positions"]  # (a stock GPT-2's name)
    if engine == "transformers":
        return EngineFiles(engine, name, folder / "transformers" / name, folder / "transformers", context)
    return EngineFiles(engine, name, folder / "model-f32.gguf", folder, context)


def export_for_engine(location: ModelLocation, engine: str) -> tuple[EngineFiles, bool]:
    """`engine`'s files for the model, exported when missing (whole or not at all); and whether they
    were exported now. An option the engine's format cannot express is an ExportError (one line)."""
    files = engine_files(location, engine)
    if files.ready:
        return files, False
    from ..export.exporting import to_stock_model, write_stock_folder
    from ..export.gguf_export import write_gguf
    from ..export.importing import import_stock_model, is_stock_model_dir
    from ..hub.loading import load_model, load_tokenizer

    if is_stock_model_dir(location.local_dir):  # already stock: MiniGPT's own form of it first
        model = import_stock_model(location.name_or_path, **location.from_pretrained_kwargs())
    else:
        model = load_model(location, attn_implementation="eager")
    tokenizer = load_tokenizer(location)
    if engine == "llama.cpp":
        write_gguf(model, tokenizer, files.path, dtype="f32")
    else:
        stock = to_stock_model(model)
        write_stock_folder(stock, tokenizer, files.path, model.generation_config, files.name, sampling=SAMPLING)
    return files, True
