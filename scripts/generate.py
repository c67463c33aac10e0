"""Generate text from a trained model, streamed to the terminal as it is produced.

    python scripts/generate.py runs/shakespeare --prompt "ROMEO:" --seed 1
    python scripts/generate.py me/shakespeare-gpt --hub-dir hub --revision v1 --num-samples 3

MODEL is a model folder, a run or checkpoint folder, or ORG/NAME in a hub folder. Settings not
given default to the run's sample settings (training.sample_* in the resolved config beside the
model), then to the model's generation_config.json. The same --seed gives the same text.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from minigpt.errors import DataError, run_cli
from minigpt.hub.model_argument import add_model_arguments

# minigpt.generation.DECODINGS (a test keeps them equal), written out so that --help and argument
# errors answer before torch and transformers are imported.
DECODINGS = ("dynamic", "static", "compiled")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", default="", help="text to continue (default: start a new document)")
    prompt.add_argument("--prompt-file", default=None, help="file whose text is continued")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--temperature", type=float, default=None, help="0 for greedy decoding")
    parser.add_argument(
        "--top-k", type=int, default=None, help="sample from the k most likely tokens (0: all)"
    )
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument(
        "--seed", type=int, default=None, help="sample i uses seed + i (default: random, printed)"
    )
    parser.add_argument("--num-samples", type=int, default=1)
    parser.add_argument(
        "--decoding",
        choices=DECODINGS,
        default="dynamic",
        help="KV cache: dynamic (fastest for a few samples), static, or compiled (static + torch.compile: "
        "fastest per token, but compiling takes tens of seconds, so only for many samples)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # heavy imports: only once the arguments are good
    from minigpt.generation import SamplingSettings, generate_samples
    from minigpt.hub.loading import load_model, load_tokenizer, resolve_model
    from minigpt.run_layout import read_run_config

    prompt = args.prompt
    if args.prompt_file is not None:
        try:
            prompt = Path(args.prompt_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise DataError(f"cannot read --prompt-file {args.prompt_file}: {err}") from None
    location = resolve_model(args.model, hub_dir=args.hub_dir, revision=args.revision)
    model, tokenizer = load_model(location), load_tokenizer(location)
    settings = SamplingSettings(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        num_samples=args.num_samples,
        decoding=args.decoding,
    )

    def header(i: int, seed: int) -> None:
        if i > 0:
            print()
        print(f"--- sample {i + 1}/{args.num_samples} (seed {seed}) ---", file=sys.stderr, flush=True)

    generate_samples(
        model, tokenizer, prompt, settings, read_run_config(location.local_dir), on_sample_start=header
    )


if __name__ == "__main__":
    run_cli(main)
