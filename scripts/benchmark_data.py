"""Speed and peak memory of the corpus pipeline on large generated corpora, each run in a fresh process.

    python scripts/benchmark_data.py [--sizes-mb 25 100] [--repeats 3] [--num-proc 0] [--workdir DIR]

Writes Tiny Shakespeare repeated to each size in a work folder (deleted at the end unless --keep),
trains a tokenizer once on Tiny Shakespeare, then in every repeat times raw `tokenizers`, a cold
`prepare_corpus` and 3 cached ones, and reports medians against the targets: pipeline / raw
throughput >= 0.7, cached < 5% of cold, peak memory < 2 GB and flat in corpus size
(`minigpt.benchmarks.data_speed`; the run's own corpus, in process: `scripts/benchmark.py --only data`).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from minigpt.errors import run_cli


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[25, 100], help="corpus sizes (MB)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of each measurement (medians reported)")
    parser.add_argument("--num-proc", type=int, default=0, help="data.num_proc for the pipeline (0 = all cores)")
    parser.add_argument("--vocab-size", type=int, default=4096, help="tokenizer vocabulary")
    parser.add_argument("--block-size", type=int, default=256, help="tokens per block")
    parser.add_argument("--workdir", type=Path, help="folder for corpora and caches (default: a new temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from minigpt.benchmarks.data_speed import compare_sizes, size_report

    args = parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="minigpt-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"work folder: {workdir}", flush=True)
    try:
        results = compare_sizes(
            args.sizes_mb,
            workdir,
            repeats=args.repeats,
            num_proc=args.num_proc,
            vocab_size=args.vocab_size,
            block_size=args.block_size,
            progress=lambda report: print(report, flush=True),
        )
        print(f"\n{size_report(results, args.num_proc)}")
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
