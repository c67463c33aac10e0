"""Freshly initialised MiniGPT models for a run, and the generation defaults saved with them.

The architecture comes from the `model:` section sized to the tokenizer (`build_model`) or from a
saved folder's config.json (`build_model_from_folder`); a base model's weights are base_model.py's.
"""

from __future__ import annotations

from pathlib import Path

from transformers import AutoModelForCausalLM, GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from ..errors import ConfigError
from ..model import MiniGPTConfig
from .hardware import resolve_hardware
from .settings import ModelSettings, RunConfig, TrainingSettings


def build_model_config(model: ModelSettings, tokenizer: PreTrainedTokenizerBase) -> MiniGPTConfig:
    """The model's MiniGPTConfig: the `model:` section plus the tokenizer's vocabulary and special ids."""
    try:
        return MiniGPTConfig(
            **model.architecture(),
            vocab_size=len(tokenizer),
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    except ValueError as err:  # MiniGPTConfig names the field: say it as the YAML key
        raise ConfigError(str(err).replace("MiniGPTConfig.", "model.")) from None


def build_model(run: RunConfig, tokenizer: PreTrainedTokenizerBase) -> PreTrainedModel:
    """A freshly initialised MiniGPT sized to the tokenizer (len(tokenizer) tokens, its special ids)."""
    return fresh_model(build_model_config(run.model, tokenizer), run)


def build_model_from_folder(folder: str | Path, run: RunConfig) -> PreTrainedModel:
    """A MiniGPT with the architecture of a saved model folder (its config.json), freshly initialised:
    for resuming a run that started from a base, whose checkpoint then supplies the weights."""
    return fresh_model(MiniGPTConfig.from_pretrained(folder), run)


def fresh_model(config: MiniGPTConfig, run: RunConfig) -> PreTrainedModel:
    """A newly initialised model of `config`, with the run's attention and generation defaults."""
    attention = resolve_hardware(run.hardware).attn_implementation
    model = AutoModelForCausalLM.from_config(config, attn_implementation=attention)
    model.generation_config = generation_defaults(config, run.training)  # saved with every checkpoint
    return model


def generation_defaults(model_config: MiniGPTConfig, training: TrainingSettings) -> GenerationConfig:
    """What `generate()` and `pipeline("text-generation")` use when the caller sets nothing.

    The run's sample settings (greedy when training.sample_temperature is 0; top_k 0 is no top-k
    cut), and sequences no longer than the model's context: with no length of its own, the
    pipeline would add 256 new tokens, past the last learned position.
    """
    sampling = (
        {"do_sample": True, "temperature": training.sample_temperature, "top_k": training.sample_top_k or 0}
        if training.sample_temperature > 0
        else {"do_sample": False}
    )
    return GenerationConfig(
        max_length=model_config.max_position_embeddings,  # prompt + new tokens
        bos_token_id=model_config.bos_token_id,
        eos_token_id=model_config.eos_token_id,
        pad_token_id=model_config.pad_token_id,
        **sampling,
    )


__all__ = [
    "build_model",
    "build_model_config",
    "build_model_from_folder",
    "fresh_model",
    "generation_defaults",
]
