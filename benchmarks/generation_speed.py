"""KV-cached sampling speed: MiniGPT against GPT-2 of the same shape, at several batch sizes.

Both models are freshly initialised (speed does not depend on what they learned), sample with
top-k 50 and exactly `new_tokens` new tokens (no end-of-text stop), and run interleaved in every
repeat so machine noise hits both alike. MiniGPT is timed the way `scripts/generate.py` runs it
(eager, `generate()`'s DynamicCache) and, as extra rows, with a static cache, and with a static
cache plus `torch.compile`d decoding, whose first call (the compilation) is reported separately. Each row keeps every repeat's value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.gpt2_twin import gpt2_twin_config
from benchmarks.spread import format_spread, per_repeat_ratio, spread
from minigpt.generation import decoding_options


@dataclass
class GenerationBenchmark:
    """Shape and settings of the generation comparison."""

    layers: int = 4
    heads: int = 4
    hidden: int = 128
    vocab: int = 2048
    prompt_tokens: int = 16
    new_tokens: int = 256
    batches: tuple[int, ...] = (1, 8)
    repeats: int = 5
    static_cache: bool = True  # also time MiniGPT with a static cache
    compiled: bool = False  # also time MiniGPT with a static cache and compiled decoding (slow first call)
    model_overrides: dict[str, Any] | None = None  # MiniGPTConfig fields (position type, bias, ...)

    @property
    def context(self) -> int:
        return self.prompt_tokens + self.new_tokens


def build_models(bench: GenerationBenchmark) -> dict[str, torch.nn.Module]:
    """MiniGPT and GPT-2 of the same shape, fp32, sdpa attention, in eval mode (no dropout)."""
    from transformers import GPT2LMHeadModel

    from minigpt.model import MiniGPTConfig, MiniGPTForCausalLM

    torch.manual_seed(0)
    minigpt = MiniGPTForCausalLM(
        MiniGPTConfig(
            vocab_size=bench.vocab,
            hidden_size=bench.hidden,
            num_hidden_layers=bench.layers,
            num_attention_heads=bench.heads,
            max_position_embeddings=bench.context,
            **(bench.model_overrides or {}),
        )
    )
    gpt2 = GPT2LMHeadModel(gpt2_twin_config(minigpt.config, bench.vocab, eos_token_id=0))
    return {"minigpt": minigpt.eval(), "gpt2": gpt2.eval()}


def sampler(
    model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int, decoding: str | None = None
) -> Callable[[], None]:
    """A call that samples `new_tokens` tokens after `prompt` (B, P) with top-k 50: with
    `generate()`'s defaults (decoding None), or as `scripts/generate.py` does for a decoding mode."""

    def run() -> None:
        torch.manual_seed(0)
        options: dict[str, Any] = {}
        if decoding is not None:
            options.update(decoding_options(decoding))
        with torch.inference_mode():
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=True,
                top_k=50,
                pad_token_id=0,
                eos_token_id=None,
                **options,
            )
        assert out.shape == (prompt.shape[0], prompt.shape[1] + new_tokens)

    return run


def compare_generation(
    bench: GenerationBenchmark, progress: Callable[[str], None] = lambda line: None
) -> dict[str, Any]:
    """Tokens/s of every contender at every batch size and its speedup over GPT-2 (taken repeat by
    repeat), each as a `spread` over the repeats; the first call's seconds (warm-up, compilation)."""
    models = build_models(bench)
    variants = ["dynamic"] + ["static"] * bench.static_cache + ["compiled"] * bench.compiled
    results: dict[str, Any] = {}
    for batch in bench.batches:
        prompt = torch.randint(
            0, bench.vocab, (batch, bench.prompt_tokens), generator=torch.Generator().manual_seed(1)
        )
        runs = {"gpt2": sampler(models["gpt2"], prompt, bench.new_tokens)}
        for variant in variants:
            name = "minigpt" if variant == "dynamic" else f"minigpt_{variant}"
            runs[name] = sampler(models["minigpt"], prompt, bench.new_tokens, variant)
        first_call = {}
        for name, run in runs.items():  # warm-up: allocator, kernel choice, compilation
            start = time.perf_counter()
            run()
            first_call[name] = time.perf_counter() - start
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(bench.repeats):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
        tokens = batch * bench.new_tokens
        rows = {
            name: {
                "tokens_per_s": spread(tokens / s for s in t),
                "speedup_over_gpt2": per_repeat_ratio(times["gpt2"], t),  # GPT-2's time / this one's
                "first_call_s": first_call[name],
            }
            for name, t in times.items()
        }
        results[f"batch_{batch}"] = rows
        progress(
            f"batch {batch}: "
            + ", ".join(
                f"{n} {format_spread(r['tokens_per_s'], '.0f')} tok/s "
                f"({format_spread(r['speedup_over_gpt2'], '.2f', 'x')})"
                for n, r in rows.items()
            )
        )
    return results


__all__ = ["GenerationBenchmark", "build_models", "compare_generation", "sampler"]
