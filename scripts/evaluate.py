"""Loss, perplexity and bits per byte (and lm-eval's byte and word perplexity) of a model over a text.

    python scripts/evaluate.py runs/shakespeare --data data/tinyshakespeare.txt
    python scripts/evaluate.py runs/shakespeare --split validation      # the run's own split
    python scripts/evaluate.py runs/shakespeare --split validation --packed   # as training evaluates
    python scripts/evaluate.py me/shakespeare-gpt --hub-dir hub --revision v1 --data notes/ --json

MODEL is a model folder, a run or checkpoint folder, or ORG/NAME in a hub folder. The text is
tokenized as training does. By default each document is scored on its own as lm-evaluation-harness's
loglikelihood_rolling scores it (every token, the first conditioned on end-of-text, windows of the
model's context), so bits per byte equals lm-eval's bits_per_byte; --packed scores the documents as
training's validation blocks read them (windows of the training block size), which gives training's
eval_bpb. Bits per byte is the loss of the tokens that encode the text over the bytes they encode;
byte perplexity is 2 ** bits per byte and word perplexity exp(loss of the text / its words), both as
lm-eval defines them (words: whitespace-separated pieces of each document). Everything is scored
unless --eval-tokens asks for a fixed, seeded sample of the windows (then no word perplexity).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# This script shares its name with the `evaluate` library: take its folder off the import path,
# or `import evaluate` (inside minigpt.evaluation) would import this file instead.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from minigpt.errors import run_cli  # noqa: E402
from minigpt.hub.model_argument import add_model_arguments  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="text file, folder or glob to evaluate on (whole)")
    source.add_argument(
        "--split", choices=("train", "validation"), help="a split of the model's training data"
    )
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        help="tokens a window reads (default: the model's context; --packed: the training block size)",
    )
    parser.add_argument("--stride", type=int, default=None, help="sliding-window stride (default: = window)")
    parser.add_argument(
        "--packed",
        action="store_true",
        help="score the documents packed as training's blocks (window: the training block size)",
    )
    parser.add_argument("--batch-size", type=int, default=None, help="windows per forward pass")
    parser.add_argument(
        "--eval-tokens",
        type=int,
        default=None,
        help="score a fixed sample of EVAL_TOKENS // window windows (default: all), as training.eval_tokens",
    )
    parser.add_argument("--seed", type=int, default=None, help="the sample's seed (default: the run's data.seed, else 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    from minigpt.evaluation import describe_result, evaluate_model
    from minigpt.hub.loading import resolve_model

    location = resolve_model(args.model, hub_dir=args.hub_dir, revision=args.revision)
    result = evaluate_model(
        location,
        data=args.data,
        split=args.split,
        window=args.window,
        stride=args.stride,
        packed=args.packed,
        batch_size=args.batch_size,
        eval_tokens=args.eval_tokens,
        seed=args.seed,
        show_progress=not args.json,
    )
    if args.json:
        print(json.dumps({"model": args.model, "revision": location.revision, **result.to_dict()}, indent=2))
        return
    name = args.model + (f" @ {location.revision}" if location.revision else "")
    print("\n".join(describe_result(result, name)))


if __name__ == "__main__":
    run_cli(main)
