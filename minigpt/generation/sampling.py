"""Sample text from a model with `generate()`, streamed as it is produced (to the terminal, or to
a caller that iterates over the text, as the web app does).

Sampling settings come, in order, from the caller (the CLI flags), the run's sample settings in
the resolved training config beside the model (`training.sample_*`), then the model's
`generation_config.json`. Each sample i is drawn after `torch.manual_seed(seed + i)`, so a seed
gives the same text on every run, and any one sample can be redrawn alone.

Sampling leaves the process as it found it: the model is put in eval mode (no dropout) and back
in its mode after, and torch's random state (CPU and GPUs) is restored, so the samples a training
run draws between steps change neither its dropout masks nor a resumed run's (`SampleTextCallback`).
"""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import GenerationConfig, TextIteratorStreamer, TextStreamer

from ..errors import ConfigError
from .kv_cache import GrowingCache


@dataclass
class SamplingSettings:
    """How to sample; None means "take it from the run config or the generation config"."""

    max_new_tokens: int | None = None
    temperature: float | None = None  # 0 means greedy decoding
    top_k: int | None = None  # 0: no top-k filter
    top_p: float | None = None
    seed: int | None = None  # None: a random seed, reported so the text can be reproduced
    num_samples: int = 1
    decoding: str = "dynamic"  # KV cache and compilation, one of DECODINGS (see decoding_options)

    def validate(self) -> None:
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ConfigError(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature is not None and self.temperature < 0:
            raise ConfigError(f"--temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 0:
            raise ConfigError(f"--top-k must be >= 0 (0: no top-k filter), got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ConfigError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.num_samples < 1:
            raise ConfigError(f"--num-samples must be >= 1, got {self.num_samples}")
        if self.decoding not in DECODINGS:
            raise ConfigError(f"--decoding must be one of {', '.join(DECODINGS)}, got {self.decoding!r}")


DECODINGS = ("dynamic", "static", "compiled")


def decoding_options(decoding: str) -> dict[str, Any]:
    """`GenerationConfig` fields for a decoding mode.

    dynamic   a cache that grows by one token per step, held in room allocated for the whole
              sample (`GrowingCache`, see `decoding_cache`): fastest for one sample on a CPU
    static    a cache allocated once at the full length; every step attends over all of it, so it
              is slower than dynamic in eager mode, and exists to be compiled
    compiled  static cache plus `torch.compile`d decoding steps: the fastest per token once
              compiled, but compiling takes tens of seconds on a CPU (per batch size and length),
              so it pays only over many samples in one process
    """
    if decoding == "static":
        return {"cache_implementation": "static", "disable_compile": True}
    if decoding == "compiled":
        from transformers import CompileConfig

        compile_config = CompileConfig(fullgraph=True, dynamic=False, mode="default")
        compile_config._compile_all_devices = True  # generate() compiles only on GPUs unless told
        return {"cache_implementation": "static", "compile_config": compile_config}
    return {}


def decoding_cache(model, decoding: str, total_length: int) -> GrowingCache | None:
    """The cache object to hand `generate()` for a decoding mode: a fresh `GrowingCache` with room
    for `total_length` positions for "dynamic" (transformers' `DynamicCache` concatenates at every
    token, which copies the whole cache); None where `generate()` builds its own (static caches)."""
    if decoding != "dynamic":
        return None
    return GrowingCache(model.config, capacity=total_length)


def build_generation_config(
    model_generation_config: GenerationConfig | None,
    settings: SamplingSettings,
    run_config: dict[str, Any] | None = None,
) -> GenerationConfig:
    """The model's generation config, overridden by the run's sample settings, then by `settings`."""
    config = (
        GenerationConfig.from_dict(model_generation_config.to_dict())
        if model_generation_config
        else GenerationConfig()
    )
    training = (run_config or {}).get("training") or {}
    from_run = {
        "max_new_tokens": training.get("sample_max_new_tokens"),
        "temperature": training.get("sample_temperature"),
        "top_k": training.get("sample_top_k"),
    }
    chosen = {key: value for key, value in from_run.items() if value is not None}
    chosen.update(
        {
            key: getattr(settings, key)
            for key in ("max_new_tokens", "temperature", "top_k", "top_p")
            if getattr(settings, key) is not None
        }
    )
    temperature = chosen.pop("temperature", config.temperature if config.do_sample else 0.0)
    if temperature is not None and temperature > 0:
        chosen.update(do_sample=True, temperature=temperature)
    else:
        chosen.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    config.update(**chosen)
    return config


def prompt_ids(tokenizer, prompt: str) -> torch.Tensor:
    """(1, T) token ids of `prompt`; an empty prompt starts a new document (the EOS/BOS token)."""
    if prompt:
        return tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if start is None:
        raise ConfigError("give a --prompt: the tokenizer has no BOS/EOS token to start from")
    return torch.tensor([[start]])


def random_seed() -> int:
    """A fresh seed for a caller that gave none (reported, so the text can be drawn again)."""
    return random.SystemRandom().randrange(2**31)


def prepare_generation(
    model,
    tokenizer,
    prompt: str,
    settings: SamplingSettings,
    run_config: dict[str, Any] | None = None,
    fit_prompt: bool = False,
) -> tuple[torch.Tensor, GenerationConfig]:
    """Checked settings -> the prompt's (1, T) ids on the model's device and the generation config.

    A prompt and new tokens longer than the model's context are refused, or with `fit_prompt` the
    prompt is cut to its last tokens that leave room for the new ones (learned positions end at
    the context; a training run samples whatever prompts its config names).
    """
    settings.validate()
    generation_config = build_generation_config(model.generation_config, settings, run_config)
    input_ids = prompt_ids(tokenizer, prompt).to(model.device)  # (1, T)
    context = model.config.max_position_embeddings
    if generation_config.max_new_tokens is None:  # nothing set it: fill the context
        generation_config.max_new_tokens = max(1, context - input_ids.shape[1])
    if fit_prompt and generation_config.max_new_tokens < context:
        input_ids = input_ids[:, -(context - generation_config.max_new_tokens) :]  # (1, T' <= T)
    if input_ids.shape[1] + generation_config.max_new_tokens > context:
        raise ConfigError(
            f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens ({generation_config.max_new_tokens}) "
            f"exceeds the model's context of {context} tokens"
        )
    # generate() fills the settings left None from the model's generation config, and warns at every
    # call that sets max_new_tokens when that config sets max_length: the length goes the way the
    # model's config bounds it (a training run's: max_length, its context; a stock export's: max_new_tokens).
    if model.generation_config.max_new_tokens is None:
        generation_config.max_length = input_ids.shape[1] + generation_config.max_new_tokens
        generation_config.max_new_tokens = None
    generation_config.update(**decoding_options(settings.decoding))
    if generation_config.pad_token_id is None:
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        generation_config.pad_token_id = pad_id
    return input_ids, generation_config


@contextlib.contextmanager
def seeded_eval_mode(model, seed: int) -> Iterator[None]:
    """Inside: the model in eval mode, no gradients, torch's RNG seeded with `seed` (sampling draws
    from it). After: the model in the mode it was in, torch's random state of the CPU and of every
    initialized GPU as it was (Python's and NumPy's are never touched)."""
    was_training = model.training
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    # no_grad, not inference_mode: a training model must not keep inference tensors for its next backward
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        torch.manual_seed(seed)  # also seeds every GPU's generator: all restored by fork_rng
        model.eval()
        try:
            yield
        finally:
            model.train(was_training)


def total_length(input_ids: torch.Tensor, generation_config: GenerationConfig) -> int:
    """Prompt + new tokens, however `prepare_generation` set the length."""
    if generation_config.max_new_tokens is not None:
        return input_ids.shape[1] + generation_config.max_new_tokens
    return generation_config.max_length


def sample_once(
    model, input_ids: torch.Tensor, generation_config: GenerationConfig, decoding: str, seed: int, streamer=None
) -> torch.Tensor:
    """One `generate()` call in `seeded_eval_mode(model, seed)`, with the decoding mode's cache;
    returns the (1, T) prompt + new token ids."""
    with seeded_eval_mode(model, seed):
        return model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            generation_config=generation_config,
            streamer=streamer,
            cache=decoding_cache(model, decoding, total_length(input_ids, generation_config)),
        )


def generate_samples(
    model,
    tokenizer,
    prompt: str,
    settings: SamplingSettings,
    run_config: dict[str, Any] | None = None,
    stream: bool = True,
    on_sample_start=None,
    fit_prompt: bool = False,
    skip_special_tokens: bool = True,
) -> list[str]:
    """Generate `settings.num_samples` continuations of `prompt`; returns the full texts (prompt
    included, special tokens left out unless `skip_special_tokens` is False).

    With `stream`, each sample's text is printed as it is produced (`TextStreamer`).
    `on_sample_start(i, seed)` is called before sample i (the CLI prints a header there).
    `fit_prompt`: cut a prompt too long for the context to its tail (see `prepare_generation`).
    The model's mode and torch's random state are left as they were (`seeded_eval_mode`).
    """
    input_ids, generation_config = prepare_generation(
        model, tokenizer, prompt, settings, run_config, fit_prompt=fit_prompt
    )
    base_seed = settings.seed if settings.seed is not None else random_seed()
    streamer = TextStreamer(tokenizer, skip_prompt=False, skip_special_tokens=skip_special_tokens) if stream else None
    texts = []
    for i in range(settings.num_samples):
        if on_sample_start is not None:
            on_sample_start(i, base_seed + i)
        output = sample_once(model, input_ids, generation_config, settings.decoding, base_seed + i, streamer)
        texts.append(tokenizer.decode(output[0], skip_special_tokens=skip_special_tokens))
    return texts


def stream_text(
    model,
    tokenizer,
    prompt: str,
    settings: SamplingSettings,
    run_config: dict[str, Any] | None = None,
) -> Iterator[str]:
    """One sample of `prompt`'s continuation, yielded as the text so far (prompt included) after each
    decoded piece; the last value equals `generate_samples(...)[0]` with the same settings and seed.

    `generate()` runs in a worker thread and feeds a `TextIteratorStreamer`, which this iterates.
    The seed is `settings.seed` (a random one when None). Sampling draws from torch's process-wide
    RNG, so the text repeats by seed only when nothing else in the process draws from it meanwhile.
    """
    input_ids, generation_config = prepare_generation(model, tokenizer, prompt, settings, run_config)
    seed = settings.seed if settings.seed is not None else random_seed()
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=False, skip_special_tokens=True)
    failure: list[BaseException] = []

    def work() -> None:
        try:
            sample_once(model, input_ids, generation_config, settings.decoding, seed, streamer)
        except BaseException as err:  # handed to the reader below, which re-raises it
            failure.append(err)
            streamer.end()  # unblocks the reader

    worker = threading.Thread(target=work, name="minigpt-generate", daemon=True)
    worker.start()
    text = ""
    for piece in streamer:
        text += piece
        yield text
    worker.join()
    if failure:
        raise failure[0]


__all__ = [
    "DECODINGS",
    "SamplingSettings",
    "build_generation_config",
    "decoding_cache",
    "decoding_options",
    "generate_samples",
    "prepare_generation",
    "prompt_ids",
    "random_seed",
    "stream_text",
]
