"""Publish a trained model to a hub folder (docs/sharing.md): an allowlist of files, in the stock or
MiniGPT's own form, a GGUF beside if asked, the model card; every check runs before the hub folder
is touched."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import yaml
from transformers import GenerationConfig

from ..data.chat_template import end_of_turn_id
from ..data.tokenizer import load_tokenizer
from ..errors import MiniGPTUserError
from ..export.errors import ExportError
from ..export.exporting import to_stock_model, write_stock_folder
from ..export.gguf_export import write_gguf
from ..export.model_card import CardFacts, count_parameters, read_run_facts, render_model_card, stock_facts
from ..run_layout import LOSS_PLOT_FILE, RESOLVED_CONFIG_NAME
from . import store
from .loading import load_model, resolve_model
from .portable import clean_json_text, find_local_path, local_paths, portable_run_config

# What save_pretrained writes for a fast tokenizer (MiniGPT's, and every stock export's)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


class PublishError(MiniGPTUserError):
    """The source cannot be published: missing, no weights, no tokenizer, no source files."""


def _weights_file(model_dir: Path) -> tuple[Path, int]:
    """model.safetensors (MiniGPT's models are far below save_pretrained's 50 GB shard size), and its parameters."""
    path = model_dir / "model.safetensors"
    if not path.is_file():
        raise PublishError(f"{model_dir} has no weights (model.safetensors); only safetensors weights are published")
    try:
        return path, count_parameters(path)
    except Exception as err:  # safetensors raises its own error types for a corrupt header
        raise PublishError(f"{path} is not a readable safetensors file: {err}") from None


def _tokenizer_files(model_dir: Path) -> dict[str, Path]:
    found = {name: model_dir / name for name in TOKENIZER_FILES if (model_dir / name).is_file()}
    if not {"tokenizer.json", "tokenizer_config.json"} <= found.keys():
        raise PublishError(
            f"{model_dir} has no tokenizer (tokenizer.json + tokenizer_config.json); "
            "save the tokenizer with the model (tokenizer.save_pretrained)"
        )
    return found


def _source_files(model_dir: Path, config: dict) -> dict[str, Path]:
    """The model's Python files that `auto_map` names: what lets it load without minigpt."""
    auto_map = config.get("auto_map") or {}
    files = {p.name: p for p in sorted(model_dir.glob("*.py"))}
    named = {ref.split(".")[0] + ".py" for ref in auto_map.values() if isinstance(ref, str)}
    if "AutoModelForCausalLM" not in auto_map or not named <= files.keys():
        raise PublishError(
            f"{model_dir} lacks the model source files its config.json's auto_map names; re-save the model "
            "with minigpt imported so they are written beside the weights"
        )
    return files


def _generation_config_file(model_dir: Path, staging: Path, config: dict) -> Path:
    """The folder's generation config in `staging`, with `max_length` = the context when it sets no
    length (a pipeline would add 256 tokens past it), stopping at `<|im_end|>` too when the tokenizer has it."""
    existing = model_dir / "generation_config.json"
    try:
        values = json.loads(existing.read_text()) if existing.is_file() else {}
    except json.JSONDecodeError as err:
        raise PublishError(f"{existing} is not valid JSON: {err}") from None
    values = {key: config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id") if config.get(key) is not None} | values
    if "max_length" not in values and "max_new_tokens" not in values and config.get("max_position_embeddings"):
        values["max_length"] = config["max_position_embeddings"]  # prompt + new tokens
    end_of_turn = end_of_turn_id(load_tokenizer(model_dir)) if (model_dir / "tokenizer.json").is_file() else None
    if end_of_turn is not None:
        eos = values.get("eos_token_id")
        values["eos_token_id"] = list(dict.fromkeys([*([eos] if isinstance(eos, int) else eos or []), end_of_turn]))
    (staging / "generation_config.json").write_text(json.dumps(values, indent=2, sort_keys=True) + "\n")
    return staging / "generation_config.json"


def _converted_files(
    model_dir: Path, staging: Path, generation: Path, form: str, gguf_dtype: str | None, repo_id: str
) -> dict[str, Path]:
    """{snapshot name: file} of the stock form (unless "minigpt", or "auto" and none fits) and the GGUF."""
    model = load_model(resolve_model(model_dir), attn_implementation="eager")
    tokenizer = load_tokenizer(model_dir)
    files: dict[str, Path] = {}
    if form != "minigpt":
        try:
            export = to_stock_model(model)
        except ExportError as err:
            if form == "stock":
                raise PublishError(f"cannot publish the stock form: {err}") from None
        else:
            config = GenerationConfig.from_pretrained(generation.parent, generation.name)
            folder = write_stock_folder(export, tokenizer, staging / "stock", config)
            files = {p.name: p for p in sorted(folder.iterdir()) if p.name != "README.md"}
    if gguf_dtype is not None:
        name = f"{repo_id.split('/')[-1]}-{gguf_dtype.upper()}.gguf"
        write_gguf(model, tokenizer, staging / name, dtype=gguf_dtype)
        files[name] = staging / name
    return files


def collect_files(
    source: str | os.PathLike, staging: Path, repo_id: str, license: str, form: str = "auto", gguf_dtype: str | None = None
) -> dict[str, Path]:
    """{snapshot name: file} for everything published from `source`; generated files go to `staging`."""
    location = resolve_model(source)  # ModelNotFoundError (one line) for a missing source
    model_dir, run_dir = location.local_dir, location.run_dir
    try:
        minigpt_config = config = json.loads((model_dir / "config.json").read_text())
    except json.JSONDecodeError as err:
        raise PublishError(f"{model_dir}/config.json is not valid JSON: {err}") from None
    weights, num_parameters = _weights_file(model_dir)
    files = {"config.json": model_dir / "config.json", weights.name: weights, **_tokenizer_files(model_dir)}
    files["generation_config.json"] = _generation_config_file(model_dir, staging, config)
    minigpt = config.get("model_type") == "minigpt"  # else a stock folder (an export): no source files
    converted = {}
    if minigpt and (form != "minigpt" or gguf_dtype is not None):
        converted = _converted_files(model_dir, staging, files["generation_config.json"], form, gguf_dtype, repo_id)
    if "config.json" in converted:  # the stock form replaces MiniGPT's config, weights and tokenizer
        files = dict(converted)
        config = json.loads(files["config.json"].read_text())
    else:
        files |= converted | (_source_files(model_dir, config) if minigpt else {})
    for name in [n for n in files if n.endswith(".json")]:  # no loading state (`_name_or_path`, ...)
        cleaned = clean_json_text(files[name].read_text(encoding="utf-8"))
        if cleaned is not None:
            files[name] = staging / name
            files[name].write_text(cleaned, encoding="utf-8")

    run_config, portable = None, None
    resolved = next((d / RESOLVED_CONFIG_NAME for d in (model_dir, run_dir) if d and (d / RESOLVED_CONFIG_NAME).is_file()), None)
    if resolved is not None:
        run_config = yaml.safe_load(resolved.read_text()) or {}
        portable = portable_run_config(run_config)  # data files by name, no local folders
        files[RESOLVED_CONFIG_NAME] = staging / RESOLVED_CONFIG_NAME
        files[RESOLVED_CONFIG_NAME].write_text(portable.to_yaml(), encoding="utf-8")
    loss_curve = next((d / LOSS_PLOT_FILE for d in (model_dir, run_dir) if d and (d / LOSS_PLOT_FILE).is_file()), None)
    if loss_curve is not None:
        files[LOSS_PLOT_FILE] = loss_curve

    run = vars(portable) if portable is not None else {}
    base = run.get("config", {}).get("model") or {}
    tokenizer_config = json.loads(files["tokenizer_config.json"].read_text(encoding="utf-8"))
    facts = CardFacts(
        repo_id=repo_id,
        model_config=minigpt_config,
        **stock_facts(config),  # converted here, or a folder exported before
        gguf_files=sorted(name for name in files if name.endswith(".gguf")),
        chat_template="chat_template.jinja" in files or "chat_template" in tokenizer_config,
        num_parameters=num_parameters,
        license=license,
        run_config=run.get("config"),
        train_sources=run.get("train_sources", []),
        validation_sources=run.get("validation_sources", []),
        loss_curve=LOSS_PLOT_FILE if loss_curve is not None else None,
        base=base.get("init_from"),
        base_revision=base.get("init_revision"),
        **read_run_facts(run_dir, model_dir),
    )
    files["README.md"] = staging / "README.md"
    files["README.md"].write_text(render_model_card(facts))
    leak = find_local_path(files, local_paths(run_config, repo_id, Path(source), model_dir, run_dir))
    if leak is not None:  # the last line of defence: what is written above names no local folder
        raise PublishError(f"refusing to publish {leak[0]}: it names the local path {leak[1]}")
    return files


def publish(
    source: str | os.PathLike, repo_id: str, hub_dir: str | os.PathLike, tag: str | None = None,
    message: str | None = None, license: str = "apache-2.0", form: str = "auto", gguf_dtype: str | None = None,
) -> store.CommitInfo:  # fmt: skip
    """Commit the model in `source` (model, checkpoint or run folder) to `repo_id` in `hub_dir`, as `form`
    (see above) with a GGUF of `gguf_dtype` beside it when given."""
    store.check_new_tag(hub_dir, repo_id, tag)  # the repo id and the tag, before anything is written
    with tempfile.TemporaryDirectory(prefix="minigpt-publish-") as staging:
        files = collect_files(source, Path(staging), repo_id, license, form, gguf_dtype)
        return store.push_files(files, repo_id, hub_dir, message or f"Publish {source}", tag=tag)
