"""First-token latency and tokens/s of a chat model behind each serving engine, beside scripts/chat.py.

    python scripts/benchmark_serving.py runs/shakespeare-chat [--threads 1 2] [--repeats 5] [--max-tokens 64]
    python scripts/benchmark_serving.py runs/shakespeare-chat --json out.json --markdown

Starts `scripts/serve.py RUN --engine transformers|llama.cpp --threads N` for each thread count on
loopback ports, then sends the same greedy, streamed chat completion to every server through the
`openai` client and asks scripts/chat.py's ChatSession in this process, contenders interleaved in
every repeat; prints median (min-max) of each figure. See benchmarks/serving_speed.py.
Run it on a quiet machine: the figures are wall-clock.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: beside the package, not in the wheel

from minigpt.errors import run_cli


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", help="a chat run folder or model folder (what scripts/serve.py takes)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts to compare")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (after one warm-up)")
    parser.add_argument("--max-tokens", type=int, default=64, help="most reply tokens")
    parser.add_argument("--json", type=Path, help="write every figure here")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    from benchmarks.machine import describe_machine, load_average
    from benchmarks.serving_speed import compare_serving, serving_report

    machine = describe_machine()
    machine["load_before"] = load_average()
    with tempfile.TemporaryDirectory() as workdir:
        rows = compare_serving(args.model, args.threads, args.repeats, args.max_tokens, Path(workdir))
    machine["load_after"] = load_average()
    if args.json:
        args.json.write_text(json.dumps({"machine": machine, "serving": rows}, indent=2) + "\n")
    print(serving_report(rows, machine))
    print(f"load average before {machine['load_before']:.2f}, after {machine['load_after']:.2f}")


if __name__ == "__main__":
    run_cli(main)
