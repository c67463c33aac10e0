"""Load the base model a new run starts from (`model.init_from`, docs/init-from.md): find it, fit
the run config to its architecture and tokenizer, load its weights (`load_base`). A stock
transformers folder is converted by `minigpt.export.importing.import_stock_model`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import PreTrainedModel, PreTrainedTokenizerFast
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from ..data.corpus import tokenizer_fingerprint
from ..data.tokenizer import load_tokenizer
from ..errors import ConfigError, MiniGPTUserError
from ..export.importing import import_stock_model
from ..model import MiniGPTConfig, MiniGPTForCausalLM
from ..run_layout import model_folder_name
from ..training.hardware import resolve_hardware
from ..training.run_config import check_fits_model
from ..training.settings import INIT_KEYS, ModelSettings, RunConfig
from ..training.start import BaseStart
from .loading import ModelLocation, resolve_model

MAY_CHANGE = ("hidden_dropout", "attention_dropout")  # regularisation, not shapes or function
ROTARY_MAY_CHANGE = ("max_position_embeddings", "rope_parameters")  # a longer context by rope scaling
CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")  # transformers' causal-LM class names (GPT2LMHeadModel)


class BaseModelError(ConfigError):
    """`model.init_from` names no usable base: missing, unreadable, not a causal LM, or contradicted."""


@dataclass
class BaseModel:
    """A base model as found and read: where it is, what it is, and its architecture."""

    location: ModelLocation
    model_type: str  # config.json's model_type: "minigpt", or the stock architecture ("gpt2", ...)
    config: MiniGPTConfig  # the base's architecture (a stock model's as converted)
    stock_model: PreTrainedModel | None = None  # a converted stock model (loaded to learn its config)

    @property
    def name(self) -> str:
        """How the run names its base: `ORG/NAME@revision`, or the folder as given."""
        if self.location.is_repo:
            return f"{self.location.name_or_path}@{self.location.revision}"
        return self.location.name_or_path

    def record(self) -> dict[str, Any]:
        """The base as the run's summary records it: repo id, revision and commit, or a folder name
        (never a local path)."""
        if self.location.is_repo:
            return {
                "repo_id": self.location.name_or_path,
                "revision": self.location.revision,
                "commit": self.location.local_dir.name,  # a snapshot folder is named by its commit
                "model_type": self.model_type,
            }
        return {"folder": model_folder_name(self.location.name_or_path), "model_type": self.model_type}


def find_base_model(model: ModelSettings) -> ModelLocation:
    """Resolve `model.init_from` (+ revision, hub folder) to a folder; one-line error if there is none."""
    if model.init_revision is not None and Path(model.init_from).is_dir():
        raise BaseModelError(
            f"model.init_revision applies to ORG/NAME in a hub folder, but model.init_from {model.init_from} is a folder"
        )
    try:
        return resolve_model(model.init_from, hub_dir=model.init_hub_dir, revision=model.init_revision)
    except MiniGPTUserError as err:
        raise BaseModelError(f"model.init_from: {err}") from None


def read_base_model(model: ModelSettings) -> BaseModel:
    """Find the base and read its architecture (a stock model is converted, so loaded, here)."""
    location = find_base_model(model)
    config_file = location.local_dir / "config.json"
    try:
        raw = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BaseModelError(f"model.init_from: cannot read {config_file}: {err}") from None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if not isinstance(model_type, str):
        raise BaseModelError(f"model.init_from: {config_file} names no model_type: not a transformers model")
    if model_type == MiniGPTConfig.model_type:
        architectures = raw.get("architectures") or [MiniGPTForCausalLM.__name__]
        if MiniGPTForCausalLM.__name__ not in architectures:
            raise _not_a_causal_lm(location, ", ".join(architectures))
        try:
            config = MiniGPTConfig.from_pretrained(location.local_dir)
        except (ValueError, TypeError) as err:
            raise BaseModelError(f"model.init_from: {config_file}: {err}") from None
        return BaseModel(location, model_type, config)
    architectures = [a for a in raw.get("architectures") or [] if isinstance(a, str)]
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or (
        architectures and not any(a.endswith(CAUSAL_LM_SUFFIXES) for a in architectures)
    ):
        named = f" ({', '.join(architectures)})" if architectures else ""
        raise _not_a_causal_lm(location, f"a {model_type} model{named}")
    try:
        stock = import_stock_model(location.local_dir)
    except MiniGPTUserError as err:  # an option MiniGPT cannot express, in one line
        raise BaseModelError(f"model.init_from: {err}") from None
    except (OSError, ValueError, RuntimeError) as err:  # unreadable weights, shapes that do not fit
        raise BaseModelError(f"model.init_from: cannot load {location.name_or_path}: {_first_line(err)}") from None
    return BaseModel(location, model_type, stock.config, stock_model=stock)


def _not_a_causal_lm(location: ModelLocation, what: str) -> BaseModelError:
    return BaseModelError(
        f"model.init_from: {location.name_or_path} is {what}, not a causal language model: "
        "a run continues a model that predicts the next token"
    )


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# ---- the run config against the base ------------------------------------------------------------


def adopt_base_architecture(run: RunConfig, base: MiniGPTConfig, base_name: str) -> tuple[RunConfig, MiniGPTConfig]:
    """The run with the base's architecture in its `model:` section, and the new model's config. A key
    the config wrote must equal the base's (both normalised by MiniGPTConfig) unless `MAY_CHANGE` (rope:
    `ROTARY_MAY_CHANGE`) names it; keys the config did not write take the base's value."""
    architecture = run.model.architecture()
    written = {key: value for key, value in architecture.items() if f"model.{key}" in run.explicit_keys}
    if isinstance(written.get("rope_parameters"), Mapping) and getattr(base, "rope_parameters", None):
        # rope scaling keeps the base's frequencies unless the config names its own rope_theta
        scaling = written["rope_parameters"]
        written["rope_parameters"] = {"rope_theta": base.rope_parameters.get("rope_theta"), **scaling}
    try:
        candidate = MiniGPTConfig.from_dict({**base.to_dict(), **written})
    except ValueError as err:  # MiniGPTConfig names the field: say it as the YAML key
        raise ConfigError(str(err).replace("MiniGPTConfig.", "model.")) from None
    allowed = MAY_CHANGE + (ROTARY_MAY_CHANGE if base.position_embedding_type == "rope" else ())
    for key in written:
        mine, theirs = getattr(candidate, key, None), getattr(base, key, None)
        if mine == theirs:
            continue
        if key not in allowed:
            raise BaseModelError(
                f"model.{key} is {architecture[key]!r} in this config but {theirs!r} in the base "
                f"model {base_name}: the architecture comes from model.init_from; remove model.{key} "
                f"(only {', '.join(f'model.{k}' for k in allowed)} may change)"
            )
    if candidate.position_embedding_type == "rope":
        base_theta, new_theta = (c.rope_parameters.get("rope_theta") for c in (base, candidate))
        if new_theta != base_theta:
            raise BaseModelError(
                f"model.rope_parameters rope_theta is {new_theta!r} in this config but {base_theta!r} in the "
                f"base model {base_name}: only the scaling (rope_type, factor, ...) may change"
            )
    init = {key: getattr(run.model, key) for key in INIT_KEYS}
    # a learned-position config has no rope_parameters: None
    architecture = {key: getattr(candidate, key, None) for key in ModelSettings().architecture()}
    model = ModelSettings(**init, **architecture)
    return dataclasses.replace(run, model=model), candidate


# ---- tokenizer and weights -----------------------------------------------------------------------


def load_base_tokenizer(run: RunConfig, base: BaseModel) -> PreTrainedTokenizerFast:
    """The base's tokenizer. A `tokenizer.path` the config writes must hold that same tokenizer."""
    folder = base.location.local_dir
    if not (folder / "tokenizer.json").is_file():
        raise BaseModelError(
            f"model.init_from: {base.location.name_or_path} has no tokenizer (tokenizer.json): "
            "a base model carries the tokenizer it was trained with"
        )
    tokenizer = load_tokenizer(folder)
    if "tokenizer.path" in run.explicit_keys:
        own = Path(run.tokenizer.path)
        other = load_tokenizer(own) if (own / "tokenizer.json").is_file() else None
        if other is None or tokenizer_fingerprint(other) != tokenizer_fingerprint(tokenizer):
            what = "another tokenizer" if other is not None else "no tokenizer"
            raise BaseModelError(
                f"tokenizer.path {own} holds {what} than the base model {base.name}'s: with model.init_from "
                "the tokenizer comes from the base; remove tokenizer.path"
            )
    return tokenizer


def load_base_weights(base: BaseModel, config: MiniGPTConfig, attn_implementation: str) -> PreTrainedModel:
    """The base's weights in a MiniGPT built from `config` (the base's architecture with the allowed
    changes), in float32 for training, with the run's attention kernel."""
    if base.stock_model is not None:
        model = MiniGPTForCausalLM(config)
        try:
            model.load_state_dict(base.stock_model.state_dict(), strict=True)
        except RuntimeError as err:
            raise BaseModelError(f"model.init_from: {base.location.name_or_path}: {_first_line(err)}") from None
        base.stock_model = None  # one copy of the weights is enough
        model.set_attn_implementation(attn_implementation)
        return model.float()
    try:
        model, info = MiniGPTForCausalLM.from_pretrained(
            base.location.local_dir, config=config, dtype=torch.float32,
            attn_implementation=attn_implementation, output_loading_info=True,
        )  # fmt: skip
    except (OSError, ValueError, RuntimeError, SafetensorError) as err:  # missing, truncated, unreadable
        raise BaseModelError(f"model.init_from: cannot load the weights of {base.name}: {_first_line(err)}") from None
    tied = set(getattr(model, "all_tied_weights_keys", None) or ())
    missing = [key for key in info["missing_keys"] if key not in tied]
    if missing or info["unexpected_keys"] or info.get("mismatched_keys"):
        problems = missing or info["unexpected_keys"] or info["mismatched_keys"]
        raise BaseModelError(
            f"model.init_from: the weights of {base.name} do not fit its config.json ({len(problems)} "
            f"tensors missing, unexpected or of another shape, e.g. {problems[0]})"
        )
    return model


def load_base(run: RunConfig) -> BaseStart:
    """The base of a new run that names `model.init_from`: the run with the base's architecture and
    location in its config, the base's tokenizer and its weights; every check before anything loads."""
    base = read_base_model(run.model)
    adopted, model_config = adopt_base_architecture(run, base.config, base.name)
    tokenizer = load_base_tokenizer(adopted, base)  # checks the config's own tokenizer.path
    # as the resolved config records the base: for ORG/NAME the revision it resolved, for a folder none
    location = base.location
    model = dataclasses.replace(adopted.model, init_revision=location.revision if location.is_repo else None)
    tokenizer_settings = dataclasses.replace(adopted.tokenizer, path=str(location.local_dir))
    adopted = dataclasses.replace(adopted, model=model, tokenizer=tokenizer_settings)
    check_fits_model(adopted, whose="the base model's ")
    weights = load_base_weights(base, model_config, resolve_hardware(adopted.hardware).attn_implementation)
    return BaseStart(adopted, weights, tokenizer, name=f"{base.name} ({base.model_type})", record=base.record())
