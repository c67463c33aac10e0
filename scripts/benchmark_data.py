"""Speed and peak memory of the corpus pipeline on large corpora, each contender in a fresh process.

    python scripts/benchmark_data.py [--sizes-mb 25 100] [--repeats 3] [--num-proc 0] [--workdir DIR]
    python scripts/benchmark_data.py --python-corpus [MB ...] [--contenders NAME ...] [--repeats 1]
    python scripts/benchmark_data.py --tokenizer-samples 1 0.25 0.1 [--python-mb 235] [--doc-max-chars 0 10000]
    python scripts/benchmark_data.py --corpus-report 1000 [--repeats 1] [--workdir DIR]

Default: Tiny Shakespeare repeated to each size in a work folder (deleted at the end unless
--keep), one tokenizer trained on Tiny Shakespeare, then in every repeat raw `tokenizers`, a cold
`prepare_corpus` and 3 cached ones, against the targets: pipeline / raw throughput >= 0.7, cached
< 5% of cold, peak memory < 2 GB and flat in corpus size.

--python-corpus: this environment's Python sources (every *.py of site-packages, flat in one
folder; `benchmarks.python_corpus`) cut to each size in MB (60 235 1000; none: all of them
once; past their size, copies under new names), a tokenizer trained on each, then the contenders:
raw encoding, raw BPE training, transformers' run_clm.py recipe, the project's first run (cold),
with the tokenizer reused (prepare), cached, and the seconds to a training run's first step; wall
time and peak memory of each, and how the peaks grow with the corpus.

--tokenizer-samples: tokenizers trained on that share of the Python corpus's train split
(tokenizer.train_max_bytes; 1 = all of it) with each --doc-max-chars, and their bytes per token on
the same validation split.

--corpus-report: JSON lines of about MB each of Tiny Shakespeare lines drawn into documents, with
5% exact and 5% near copies planted (`benchmarks.report_speed`); the corpus report's
comparison of documents (its bounded sample) and data.dedup over every document, each in a fresh
process: wall time, peak memory, and what each found against what was planted.

See benchmarks/data_speed.py; the run's own corpus, in process: `scripts/benchmark.py --only data`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: beside the package, not in the wheel

from minigpt.errors import ConfigError, run_cli

SIZED_DEFAULTS = {"vocab_size": 4096, "block_size": 256}  # Tiny Shakespeare repeated
PYTHON_DEFAULTS = {"vocab_size": 16384, "block_size": 512}  # the Python corpus (issue #30's measurement)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[25, 100], help="corpus sizes (MB)")
    parser.add_argument(
        "--python-corpus",
        type=float,
        nargs="*",
        metavar="MB",
        help="the Python sources of this environment at these sizes (none given: all of them once)",
    )
    parser.add_argument(
        "--tokenizer-samples",
        type=float,
        nargs="+",
        metavar="FRACTION",
        help="train tokenizers on these shares of the Python corpus's train split (1 = all)",
    )
    parser.add_argument(
        "--corpus-report",
        type=float,
        nargs="+",
        metavar="MB",
        help="the corpus report and data.dedup on generated JSON lines of these sizes with planted copies",
    )
    parser.add_argument("--python-mb", type=float, help="size of the Python corpus for --tokenizer-samples (default: all)")
    parser.add_argument("--doc-max-chars", type=int, nargs="+", help="tokenizer.doc_max_chars values for --tokenizer-samples")
    parser.add_argument("--contenders", nargs="+", help="with --python-corpus: only these contenders, in this order")
    parser.add_argument("--repeats", type=int, help="repeats of each measurement (medians reported; default 3, 1 for --python-corpus)")
    parser.add_argument("--num-proc", type=int, default=0, help="data.num_proc for the pipeline (0 = all cores)")
    parser.add_argument("--vocab-size", type=int, help="tokenizer vocabulary (default 4096; 16384 on the Python corpus)")
    parser.add_argument("--block-size", type=int, help="tokens per block (default 256; 512 on the Python corpus)")
    parser.add_argument("--workdir", type=Path, help="folder for corpora and caches (default: a new temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from benchmarks import data_speed

    args = parse_args(argv)
    python = args.python_corpus is not None or args.tokenizer_samples is not None
    defaults = PYTHON_DEFAULTS if python else SIZED_DEFAULTS
    vocab_size = args.vocab_size or defaults["vocab_size"]
    block_size = args.block_size or defaults["block_size"]
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="minigpt-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"work folder: {workdir}", flush=True)

    def report(text: str) -> None:
        print(text, flush=True)

    try:
        if args.corpus_report is not None:
            from benchmarks import report_speed

            results = report_speed.compare_corpus_report(args.corpus_report, workdir, args.repeats or 1, progress=report)
            print(f"\n{report_speed.corpus_report_report(results)}")
        elif args.tokenizer_samples is not None:
            results = data_speed.compare_tokenizer_samples(
                args.tokenizer_samples, workdir, args.python_mb, args.doc_max_chars, vocab_size
            )
            print(f"\n{data_speed.tokenizer_samples_report(results)}")
        elif args.python_corpus is not None:
            contenders = tuple(args.contenders or data_speed.CORPUS_CONTENDERS)
            unknown = sorted(set(contenders) - set(data_speed.CONTENDERS))
            if unknown:
                raise ConfigError(f"unknown contenders: {', '.join(unknown)} (known: {', '.join(data_speed.CONTENDERS)})")
            results = data_speed.compare_python_corpus(
                args.python_corpus or [None],
                workdir,
                repeats=args.repeats or 1,
                num_proc=args.num_proc,
                vocab_size=vocab_size,
                block_size=block_size,
                contenders=contenders,
                progress=report,
            )
            print(f"\n{data_speed.python_corpus_report(results)}")
        else:
            results = data_speed.compare_sizes(
                args.sizes_mb,
                workdir,
                repeats=args.repeats or 3,
                num_proc=args.num_proc,
                vocab_size=vocab_size,
                block_size=block_size,
                progress=report,
            )
            print(f"\n{data_speed.size_report(results, args.num_proc)}")
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
