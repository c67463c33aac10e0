"""Publish a trained model to a hub folder: pick the files, write the model card, commit.

Only an allowlist of files is published: weights as safetensors, config and generation config,
tokenizer files, the model's source files, the resolved training config and the loss curve.
Nothing published names a folder of the training machine (`minigpt.hub.portable`): the config
names data files by file name, the JSON metadata loses transformers' loading state.
Trainer's checkpoint extras are left behind, above all its pickles (`training_args.bin`,
`optimizer.pt`, `rng_state*.pth`): loading a pickle runs code, so none is ever published.
Every check runs before the hub folder is touched, so a rejected push leaves it as it was.

Forms (`form`): "stock" publishes the model as the stock transformers architecture that computes
it exactly (`minigpt.export`), which loads everywhere without remote code; "minigpt" publishes
MiniGPT's own config with its source files (`trust_remote_code=True`); "auto", the default, is
stock when a stock architecture fits and minigpt otherwise. A GGUF file for llama.cpp can go beside.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import yaml
from safetensors import safe_open
from transformers import GenerationConfig

from ..data.chat_template import end_of_turn_id
from ..data.tokenizer import load_tokenizer
from ..errors import MiniGPTUserError
from ..export.errors import ExportError
from ..export.exporting import to_stock_model, write_stock_folder
from ..export.gguf_export import write_gguf
from ..export.model_card import CardFacts, render_model_card
from ..model import MiniGPTForCausalLM
from ..run_layout import RESOLVED_CONFIG_NAME
from . import store
from .loading import resolve_model
from .model_card import count_parameters, read_base_metrics, read_eval_metrics, read_segments
from .portable import clean_json_text, find_local_path, local_paths, portable_run_config

SHARD_PATTERN = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
)
LOSS_CURVE_NAME = "loss.png"  # the loss-curve picture training draws in the run folder
# Formats that unpickle (torch.save, pickle, joblib): never published, whatever the allowlist says.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib")


PUBLISH_FORMS = ("auto", "stock", "minigpt")


class PublishError(MiniGPTUserError):
    """The source cannot be published: missing, no weights, no tokenizer, no source files."""


def _weights_files(model_dir: Path) -> dict[str, Path]:
    single = model_dir / "model.safetensors"
    if single.is_file():
        return {single.name: single}
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
        missing = [s for s in shards if not SHARD_PATTERN.fullmatch(s) or not (model_dir / s).is_file()]
        if shards and not missing:
            return {index.name: index, **{s: model_dir / s for s in shards}}
    raise PublishError(
        f"{model_dir} has no weights (model.safetensors); only safetensors weights are published"
    )


def _check_safetensors(path: Path) -> None:
    try:
        with safe_open(str(path), framework="numpy") as handle:
            handle.keys()
    except Exception as err:  # safetensors raises its own error types for a corrupt header
        raise PublishError(f"{path} is not a readable safetensors file: {err}") from None


def _tokenizer_files(model_dir: Path) -> dict[str, Path]:
    found = {name: model_dir / name for name in TOKENIZER_FILES if (model_dir / name).is_file()}
    has_vocab = "tokenizer.json" in found or {"vocab.json", "merges.txt"} <= found.keys()
    if "tokenizer_config.json" not in found or not has_vocab:
        raise PublishError(
            f"{model_dir} has no tokenizer (tokenizer.json + tokenizer_config.json); "
            "save the tokenizer with the model (tokenizer.save_pretrained)"
        )
    return found


def _source_files(model_dir: Path, config: dict) -> dict[str, Path]:
    """The model's Python files that `auto_map` names: what lets it load without minigpt."""
    auto_map = config.get("auto_map") or {}
    if "AutoModelForCausalLM" not in auto_map:
        raise PublishError(
            f"{model_dir}/config.json has no auto_map for AutoModelForCausalLM; re-save the model "
            "with minigpt imported so its source files are written beside the weights"
        )
    modules = {ref.split(".")[0] + ".py" for ref in auto_map.values() if isinstance(ref, str)}
    files = {p.name: p for p in sorted(model_dir.glob("*.py"))}
    missing = sorted(modules - files.keys())
    if missing:
        raise PublishError(f"{model_dir} lacks the model source files {', '.join(missing)} named by auto_map")
    return files


def _first_file(name: str, *folders: Path | None) -> Path | None:
    for folder in folders:
        if folder is not None and (folder / name).is_file():
            return folder / name
    return None


def _generation_config_file(model_dir: Path, staging: Path, config: dict) -> Path:
    """The folder's generation_config.json, or one written to `staging` that bounds the length and
    stops at the end of a chat turn.

    A model used with defaults must not generate past its context: a pipeline with no length
    set adds 256 tokens. A folder saved without a generation config (or by an older MiniGPT,
    with token ids only) gets `max_length` = the model's context added; one that sets a length
    is published as it is. A model whose tokenizer has `<|im_end|>` stops there too (a chat
    model's reply ends with it; a base model never writes it).
    """
    existing = model_dir / "generation_config.json"
    try:
        values = json.loads(existing.read_text()) if existing.is_file() else {}
    except json.JSONDecodeError as err:
        raise PublishError(f"{existing} is not valid JSON: {err}") from None
    bounded = "max_length" in values or "max_new_tokens" in values
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if config.get(key) is not None:
            values.setdefault(key, config[key])
    stops = _stop_ids(model_dir, values.get("eos_token_id"))
    if existing.is_file() and bounded and stops == values.get("eos_token_id"):
        return existing
    if not bounded and config.get("max_position_embeddings"):
        values["max_length"] = config["max_position_embeddings"]  # prompt + new tokens
    if stops is not None:
        values["eos_token_id"] = stops
    written = staging / "generation_config.json"
    written.write_text(json.dumps(values, indent=2, sort_keys=True) + "\n")
    return written


def _stop_ids(model_dir: Path, eos: int | list[int] | None) -> int | list[int] | None:
    """`eos` (an id or a list), with `<|im_end|>`'s id added when the folder's tokenizer has it."""
    end_of_turn = None
    if (model_dir / "tokenizer.json").is_file():
        end_of_turn = end_of_turn_id(load_tokenizer(model_dir))
    if end_of_turn is None:
        return eos
    ids = [eos] if isinstance(eos, int) else list(eos or [])
    return list(dict.fromkeys([*ids, end_of_turn]))


def _has_chat_template(files: dict[str, Path]) -> bool:
    """Whether the published tokenizer carries a chat template (its own file, or in its config)."""
    if "chat_template.jinja" in files:
        return True
    return "chat_template" in json.loads(files["tokenizer_config.json"].read_text(encoding="utf-8"))


def _stock_files(
    model_dir: Path, staging: Path, generation_file: Path, form: str, gguf_dtype: str | None, repo_id: str
) -> dict[str, Path]:
    """The model exported to its stock architecture (and GGUF) in `staging`: {snapshot name: file}.

    Empty when `form` is "auto" and no stock architecture computes the model (it is published as is).
    """
    model = MiniGPTForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    tokenizer = load_tokenizer(model_dir)
    files: dict[str, Path] = {}
    if form != "minigpt":
        try:
            export = to_stock_model(model)
        except ExportError as err:
            if form == "stock":
                raise PublishError(f"cannot publish the stock form: {err}") from None
            export = None
        if export is not None:
            generation = GenerationConfig.from_pretrained(generation_file.parent, generation_file.name)
            folder = write_stock_folder(export, tokenizer, staging / "stock", generation)
            files = {p.name: p for p in sorted(folder.iterdir()) if p.name != "README.md"}
    if gguf_dtype is not None:
        name = f"{repo_id.split('/')[-1]}-{gguf_dtype.upper()}.gguf"
        write_gguf(model, tokenizer, staging / name, dtype=gguf_dtype)
        files[name] = staging / name
    return files


def collect_files(
    source: str | os.PathLike,
    staging: Path,
    repo_id: str,
    license: str,
    form: str = "auto",
    gguf_dtype: str | None = None,
) -> dict[str, Path]:
    """{snapshot name: file} for everything published from `source`; generated files go to `staging`."""
    if form not in PUBLISH_FORMS:
        raise PublishError(f"form must be one of {', '.join(PUBLISH_FORMS)}, got {form!r}")
    if not Path(source).exists():
        raise PublishError(f"source not found: {source}")
    location = resolve_model(source)
    model_dir, run_dir = location.local_dir, location.run_dir
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except json.JSONDecodeError as err:
        raise PublishError(f"{model_dir}/config.json is not valid JSON: {err}") from None

    weights = _weights_files(model_dir)
    for path in weights.values():
        if path.suffix == ".safetensors":
            _check_safetensors(path)
    files: dict[str, Path] = {"config.json": model_dir / "config.json", **weights}
    files.update(_tokenizer_files(model_dir))
    files["generation_config.json"] = _generation_config_file(model_dir, staging, config)
    minigpt_config = config
    converted = {}
    if config.get("model_type") == "minigpt" and (form != "minigpt" or gguf_dtype is not None):
        generation_file = files["generation_config.json"]
        converted = _stock_files(model_dir, staging, generation_file, form, gguf_dtype, repo_id)
    if "config.json" in converted:  # the stock form replaces MiniGPT's config, weights and tokenizer
        files = dict(converted)
        config = json.loads(files["config.json"].read_text())
    else:
        files.update(converted)  # a GGUF, if asked for
        if config.get("model_type") == "minigpt":  # a stock folder (an export) needs no source files
            files.update(_source_files(model_dir, config))

    for name in [n for n in files if n.endswith(".json")]:  # no loading state (`_name_or_path`, ...)
        cleaned = clean_json_text(files[name].read_text(encoding="utf-8"))
        if cleaned is not None:
            files[name] = staging / name
            files[name].write_text(cleaned, encoding="utf-8")

    run_config, portable = None, None
    resolved = _first_file(RESOLVED_CONFIG_NAME, model_dir, run_dir)
    if resolved is not None:
        run_config = yaml.safe_load(resolved.read_text()) or {}
        portable = portable_run_config(run_config)  # data files by name, no local folders
        files[RESOLVED_CONFIG_NAME] = staging / RESOLVED_CONFIG_NAME
        files[RESOLVED_CONFIG_NAME].write_text(portable.to_yaml(), encoding="utf-8")
    loss_curve = _first_file(LOSS_CURVE_NAME, model_dir, run_dir)
    if loss_curve is not None:
        files[LOSS_CURVE_NAME] = loss_curve

    metrics, step = read_eval_metrics(run_dir, model_dir)
    base = (portable.config.get("model") if portable is not None else None) or {}
    base_from, base_revision = base.get("init_from"), base.get("init_revision")
    stock = config.get("model_type") != "minigpt"  # converted here, or a folder exported before
    facts = CardFacts(
        repo_id=repo_id,
        model_config=minigpt_config,
        stock_class=(config.get("architectures") or [config.get("model_type")])[0] if stock else None,
        extra_tags=[config["model_type"]] if stock and config.get("model_type") else [],
        gguf_files=sorted(name for name in files if name.endswith(".gguf")),
        chat_template=_has_chat_template(files),
        num_parameters=count_parameters([p for p in weights.values() if p.suffix == ".safetensors"]),
        license=license,
        run_config=portable.config if portable is not None else None,
        train_sources=portable.train_sources if portable is not None else [],
        validation_sources=portable.validation_sources if portable is not None else [],
        metrics=metrics,
        metrics_step=step,
        loss_curve=LOSS_CURVE_NAME if loss_curve is not None else None,
        base_model=base_from if base_from and base_revision is not None else None,  # a repo id
        base_revision=base_revision,
        base_folder=base_from if base_from and base_revision is None else None,
        base_metrics=read_base_metrics(run_dir, model_dir) if base_from else {},
        segments=read_segments(run_dir),
    )
    card = staging / "README.md"
    card.write_text(render_model_card(facts))
    files["README.md"] = card

    pickles = sorted(name for name in files if name.lower().endswith(PICKLE_SUFFIXES))
    if pickles:  # unreachable with the allowlist above; kept as the last line of defence
        raise PublishError(f"refusing to publish pickle files: {', '.join(pickles)}")
    leak = find_local_path(files, local_paths(run_config, repo_id, Path(source), model_dir, run_dir))
    if leak is not None:  # the same: what is written above names no local folder
        raise PublishError(f"refusing to publish {leak[0]}: it names the local path {leak[1]}")
    return files


def publish(
    source: str | os.PathLike,
    repo_id: str,
    hub_dir: str | os.PathLike,
    tag: str | None = None,
    message: str | None = None,
    license: str = "apache-2.0",
    form: str = "auto",
    gguf_dtype: str | None = None,
) -> store.CommitInfo:
    """Commit the model in `source` (model, checkpoint or run folder) to `repo_id` in `hub_dir`.

    `form` and `gguf_dtype`: see the module docstring.
    """
    store.validate_model_repo_id(repo_id)
    if tag is not None:
        store.validate_tag(tag)
        store.check_new_tag(hub_dir, repo_id, tag)
    with tempfile.TemporaryDirectory(prefix="minigpt-publish-") as staging:
        files = collect_files(source, Path(staging), repo_id, license, form, gguf_dtype)
        return store.push_files(files, repo_id, hub_dir, message or f"Publish {source}", tag=tag)


__all__ = ["PICKLE_SUFFIXES", "PUBLISH_FORMS", "PublishError", "collect_files", "publish"]
