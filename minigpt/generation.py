"""Sample text from a trained model with `generate()`, streamed to the terminal or to a caller.

Settings come from the caller (the CLI flags), then the run's `training.sample_*` settings in the
resolved config beside the model, then the model's `generation_config.json`. Sample i is drawn
after `torch.manual_seed(seed + i)`: a seed gives the same text on every run.
"""

from __future__ import annotations

import copy
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import (
    CompileConfig,
    GenerationConfig,
    StoppingCriteria,
    StoppingCriteriaList,
    TextIteratorStreamer,
    TextStreamer,
)

from .errors import ConfigError

DECODINGS = ("dynamic", "static", "compiled")  # the KV cache: see decoding_options


@dataclass
class SamplingSettings:
    """How to sample; None means "take it from the run config or the generation config"."""

    max_new_tokens: int | None = None
    temperature: float | None = None  # 0 means greedy decoding
    top_k: int | None = None  # 0: no top-k filter
    top_p: float | None = None
    seed: int | None = None  # None: a random seed, reported so the text can be reproduced
    num_samples: int = 1
    decoding: str = "dynamic"  # one of DECODINGS

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


def decoding_options(decoding: str) -> dict[str, Any]:
    """`GenerationConfig` fields for a decoding mode (dynamic, static or compiled: docs/generation.md)."""
    if decoding == "static":
        return {"cache_implementation": "static", "disable_compile": True}
    if decoding == "compiled":
        compile_config = CompileConfig(fullgraph=True, dynamic=False, mode="default")
        compile_config._compile_all_devices = True  # generate() compiles only on GPUs unless told
        return {"cache_implementation": "static", "compile_config": compile_config}
    return {}


def build_generation_config(
    model_generation_config: GenerationConfig | None,
    settings: SamplingSettings,
    run_config: dict[str, Any] | None = None,
) -> GenerationConfig:
    """The model's generation config, overridden by the run's sample settings, then by `settings`
    (its decoding mode included)."""
    config = copy.deepcopy(model_generation_config) if model_generation_config else GenerationConfig()
    training = (run_config or {}).get("training") or {}
    chosen = {}
    for key in ("max_new_tokens", "temperature", "top_k", "top_p"):  # a run has no sample_top_p
        value = getattr(settings, key) if getattr(settings, key) is not None else training.get(f"sample_{key}")
        if value is not None:
            chosen[key] = value
    temperature = chosen.pop("temperature", config.temperature if config.do_sample else 0.0)
    if temperature is not None and temperature > 0:
        chosen.update(do_sample=True, temperature=temperature)
    else:
        chosen.update(do_sample=False, temperature=None, top_k=None, top_p=None)
    config.update(**chosen, **decoding_options(settings.decoding))
    return config


def with_length(model, config: GenerationConfig, prompt_tokens: int, new_tokens: int) -> GenerationConfig:
    """A copy of `config` that stops after `new_tokens`, bounded as the model's own generation config
    bounds length (a run's: max_length; a stock export's: max_new_tokens): no "both set" warning."""
    config = copy.deepcopy(config)
    if model.generation_config.max_new_tokens is None:
        config.max_length, config.max_new_tokens = prompt_tokens + new_tokens, None
    else:
        config.max_new_tokens = new_tokens
    return config


def random_seed() -> int:
    """A fresh seed for a caller that gave none (reported, so the text can be drawn again)."""
    return random.SystemRandom().randrange(2**31)


def prepare_generation(
    model, tokenizer, prompt: str, settings: SamplingSettings, run_config: dict[str, Any] | None = None
) -> tuple[torch.Tensor, GenerationConfig]:
    """Checked settings -> the prompt's (1, T) ids on the model's device and the generation config;
    a prompt and new tokens longer than the model's context are refused."""
    settings.validate()
    config = build_generation_config(model.generation_config, settings, run_config)
    if prompt:
        input_ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False).input_ids
    else:  # an empty prompt starts a new document (the BOS/EOS token)
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        if start is None:
            raise ConfigError("give a --prompt: the tokenizer has no BOS/EOS token to start from")
        input_ids = torch.tensor([[start]])
    input_ids = input_ids.to(model.device)  # (1, T)
    context = model.config.max_position_embeddings
    new_tokens = config.max_new_tokens or max(1, context - input_ids.shape[1])  # unset: fill the context
    if input_ids.shape[1] + new_tokens > context:
        raise ConfigError(
            f"prompt ({input_ids.shape[1]} tokens) + max_new_tokens ({new_tokens}) "
            f"exceeds the model's context of {context} tokens"
        )
    if config.pad_token_id is None:
        config.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return input_ids, with_length(model, config, input_ids.shape[1], new_tokens)


@dataclass
class StopOnEvent(StoppingCriteria):
    """Ends generation at the next token once `event` is set (a Stop button, Ctrl-C)."""

    event: threading.Event

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        # input_ids: (B, T); one flag per sequence
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


def sample(model, input_ids: torch.Tensor, config: GenerationConfig, seed: int, **kwargs: Any) -> torch.Tensor:
    """One `generate()` call, the model in eval mode and torch seeded with `seed`; both as they were
    after (a caller's RNG is not consumed). Returns the (1, T) prompt + new ids."""
    was_training = model.training
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)  # every GPU's generator too: all restored by fork_rng
        model.eval()
        try:
            return model.generate(input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config, **kwargs)
        finally:
            model.train(was_training)


def stream_pieces(
    model, tokenizer, input_ids: torch.Tensor, config: GenerationConfig, seed: int, skip_prompt: bool,
    stop: threading.Event, output: list[torch.Tensor],
) -> Iterator[str]:  # fmt: skip
    """`sample()` in a worker thread; yields the text as it is decoded, piece by piece. Setting `stop`
    ends it at the next token, as does closing this iterator; the (1, T) ids go into `output`."""
    streamer = TextIteratorStreamer(tokenizer, skip_prompt=skip_prompt, skip_special_tokens=True)
    failure: list[BaseException] = []

    def work() -> None:
        try:
            stopping = StoppingCriteriaList([StopOnEvent(stop)])
            output.append(sample(model, input_ids, config, seed, streamer=streamer, stopping_criteria=stopping))
        except BaseException as err:  # handed to the reader below, which re-raises it
            failure.append(err)
            streamer.end()  # unblocks the reader

    worker = threading.Thread(target=work, name="minigpt-generate", daemon=True)
    worker.start()
    finished = False
    try:
        for piece in streamer:
            if piece:
                yield piece
        finished = True
    finally:  # also when the caller stops iterating: end the worker first
        if not finished:
            stop.set()
        worker.join()
    if failure:
        raise failure[0]


def generate_samples(
    model, tokenizer, prompt: str, settings: SamplingSettings, run_config: dict[str, Any] | None = None,
    stream: bool = True, on_sample_start: Callable[[int, int], object] | None = None,
) -> list[str]:  # fmt: skip
    """`settings.num_samples` continuations of `prompt`, full texts (prompt included). With `stream`,
    each is printed as it is produced; `on_sample_start(i, seed)` is called before sample i (the CLI
    prints a header there)."""
    input_ids, config = prepare_generation(model, tokenizer, prompt, settings, run_config)
    base_seed = settings.seed if settings.seed is not None else random_seed()
    streamer = TextStreamer(tokenizer, skip_special_tokens=True) if stream else None
    texts = []
    for i in range(settings.num_samples):
        if on_sample_start is not None:
            on_sample_start(i, base_seed + i)
        output = sample(model, input_ids, config, base_seed + i, streamer=streamer)
        texts.append(tokenizer.decode(output[0], skip_special_tokens=True))
    return texts


def stream_text(
    model, tokenizer, prompt: str, settings: SamplingSettings, run_config: dict[str, Any] | None = None
) -> Iterator[str]:
    """One sample of `prompt`'s continuation (seed: `settings.seed`, else a random one), yielded as
    the text so far, prompt included; the last value equals `generate_samples(...)[0]`."""
    input_ids, config = prepare_generation(model, tokenizer, prompt, settings, run_config)
    seed = settings.seed if settings.seed is not None else random_seed()
    text = ""
    for piece in stream_pieces(model, tokenizer, input_ids, config, seed, False, threading.Event(), []):
        text += piece
        yield text
