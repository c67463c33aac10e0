"""Loss, perplexity and bits per byte of a model over a text file or folder.

    python scripts/evaluate.py runs/shakespeare --data data/tinyshakespeare.txt
    python scripts/evaluate.py runs/shakespeare --split validation      # the run's own split
    python scripts/evaluate.py me/shakespeare-gpt --hub-dir hub --revision v1 --data notes/ --json

MODEL is a model folder, a run or checkpoint folder, or ORG/NAME in a hub folder. The text is
tokenized as training does and scored in non-overlapping windows of the training block size
(training's blocks), or in sliding windows with --stride. Bits per byte agree with training's
eval_bpb on the same split up to the last partial window, which training leaves out.
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
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="text file, folder or glob to evaluate on (whole)")
    source.add_argument(
        "--split", choices=("train", "validation"), help="a split of the model's training data"
    )
    parser.add_argument(
        "--window", type=int, default=None, help="tokens per window (default: training block size)"
    )
    parser.add_argument("--stride", type=int, default=None, help="sliding-window stride (default: = window)")
    parser.add_argument("--batch-size", type=int, default=None, help="windows per forward pass")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    from minigpt.evaluation import evaluate_model  # heavy: only once the arguments are good
    from minigpt.hub.loading import resolve_model

    location = resolve_model(args.model, hub_dir=args.hub_dir, revision=args.revision)
    result = evaluate_model(
        location,
        data=args.data,
        split=args.split,
        window=args.window,
        stride=args.stride,
        batch_size=args.batch_size,
        show_progress=not args.json,
    )
    if args.json:
        print(json.dumps({"model": args.model, "revision": location.revision, **result.to_dict()}, indent=2))
        return
    print(f"model:          {args.model}" + (f" @ {location.revision}" if location.revision else ""))
    print(f"text:           {result.source} ({result.num_bytes:,} bytes, {result.num_text_tokens:,} tokens)")
    print(f"method:         {result.method} ({result.num_windows:,} windows, {result.num_tokens:,} scored)")
    print(f"loss:           {result.loss:.4f} nats/token")
    print(f"perplexity:     {result.perplexity:.3f}")
    print(f"bits per byte:  {result.bits_per_byte:.4f}")


if __name__ == "__main__":
    run_cli(main)
