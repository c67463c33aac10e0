"""Side-by-side speed of MiniGPT and transformers' GPT-2 at the same shape.

    python scripts/benchmark.py [--repeats 7] [--json results.json]

Measures, interleaving the models in every repeat so machine noise hits both alike:
  - training: forward + backward tokens/s on (batch, context) random tokens;
  - generation: KV-cached sampling tokens/s (batch 1, top-k 50), and the same without the cache.
Reports medians and the MiniGPT / GPT-2 ratios. Defaults are the shape of issue #2: 4 layers,
4 heads, hidden 128, vocab 2048, context 320, fp32, CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from minigpt import MiniGPTConfig, MiniGPTForCausalLM
from minigpt.errors import run_cli


def build_models(args: argparse.Namespace) -> dict[str, torch.nn.Module]:
    """Both models with the same shape, no dropout, fp32, sdpa attention."""
    torch.manual_seed(0)
    minigpt = MiniGPTForCausalLM(
        MiniGPTConfig(
            vocab_size=args.vocab,
            hidden_size=args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            max_position_embeddings=args.context,
        )
    )
    gpt2 = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=args.vocab,
            n_embd=args.hidden,
            n_layer=args.layers,
            n_head=args.heads,
            n_positions=args.context,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        )
    )
    return {"minigpt": minigpt, "gpt2": gpt2}


def time_call(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def train_step(model: torch.nn.Module, ids: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()

    return step


def sample(
    model: torch.nn.Module, prompt: torch.Tensor, new_tokens: int, use_cache: bool
) -> Callable[[], None]:
    def run() -> None:
        torch.manual_seed(0)
        with torch.no_grad():
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=True,
                top_k=50,
                use_cache=use_cache,
                pad_token_id=0,
                eos_token_id=None,
            )
        assert out.shape[1] == prompt.shape[1] + new_tokens

    return run


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--context", type=int, default=320)
    parser.add_argument("--batch", type=int, default=8, help="training batch size")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-cache-repeats", type=int, default=3, help="uncached generation is slow")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()

    models = build_models(args)
    ids = torch.randint(0, args.vocab, (args.batch, args.context), generator=torch.Generator().manual_seed(0))
    prompt = torch.randint(0, args.vocab, (1, args.prompt_tokens), generator=torch.Generator().manual_seed(1))
    tasks = {
        "train_tokens_per_s": (lambda m: train_step(m.train(), ids), args.batch * args.context, args.repeats),
        "cached_sample_tokens_per_s": (
            lambda m: sample(m.eval(), prompt, args.new_tokens, True),
            args.new_tokens,
            args.repeats,
        ),
        "uncached_sample_tokens_per_s": (
            lambda m: sample(m.eval(), prompt, args.new_tokens, False),
            args.new_tokens,
            args.no_cache_repeats,
        ),
    }
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; shape {vars(args)}")
    results: dict[str, dict[str, float]] = {}
    for task, (make, tokens, repeats) in tasks.items():
        runs = {name: make(model) for name, model in models.items()}
        for run in runs.values():
            run()  # warm-up: allocator, sdpa kernel choice
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(repeats):
            for name, run in runs.items():  # interleaved: noise hits both models alike
                times[name].append(time_call(run))
        results[task] = {name: tokens / statistics.median(t) for name, t in times.items()}
        ratio = results[task]["minigpt"] / results[task]["gpt2"]
        results[task]["ratio_minigpt_over_gpt2"] = ratio
        print(
            f"{task:30s} minigpt {results[task]['minigpt']:10.0f}  gpt2 {results[task]['gpt2']:10.0f}  "
            f"ratio {ratio:.2f}  (median of {repeats})"
        )
    for name in models:
        speedup = results["cached_sample_tokens_per_s"][name] / results["uncached_sample_tokens_per_s"][name]
        results.setdefault("cache_speedup", {})[name] = speedup
        print(f"KV cache speedup at {args.new_tokens} new tokens, {name}: {speedup:.2f}x")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), "results": results}, handle, indent=2)
    return 0


if __name__ == "__main__":
    run_cli(main)
