"""Speed and memory of the corpus pipeline (prepare_corpus) on large generated corpora.

    python scripts/benchmark_data.py [--sizes-mb 25 100] [--repeats 1] [--num-proc 0] [--workdir DIR]

Writes Tiny Shakespeare repeated to each size in a temporary folder (deleted at the end unless
--keep), trains a tokenizer once on Tiny Shakespeare, then measures, each in a fresh process:
  - raw: `tokenizers` `encode_batch` over the same lines, with the same cores (its thread pool);
  - cold: prepare_corpus with an empty cache (load to Arrow, check, split, tokenize, pack, write);
  - cached: prepare_corpus again with the same inputs and settings (reuses the blocks).
Each cold run is followed by 3 cached runs. Reports medians of the repeats, the cold/raw throughput ratio (target >= 0.7), cached/cold time
(target < 5%) and the peak memory (summed PSS) of each process tree (target < 2 GB, flat in
corpus size).
Timings are of the work itself, after imports. On a shared machine, run it when it is quiet.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from minigpt.errors import run_cli

REPO = Path(__file__).resolve().parent.parent
SHAKESPEARE = REPO / "data" / "tinyshakespeare.txt"
RAW_BATCH_LINES = 1000  # lines per encode_batch call, as the pipeline's Dataset.map batch
CACHED_RUNS = 3  # cached runs per cold run (cheap): their median is reported


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[25, 100], help="corpus sizes (MB)")
    parser.add_argument(
        "--repeats", type=int, default=3, help="repeats of each measurement (medians reported)"
    )
    parser.add_argument(
        "--num-proc", type=int, default=0, help="data.num_proc for the pipeline (0 = all cores)"
    )
    parser.add_argument("--vocab-size", type=int, default=4096, help="tokenizer vocabulary")
    parser.add_argument("--block-size", type=int, default=256, help="tokens per block")
    parser.add_argument("--workdir", help="folder for corpora and caches (default: a new temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)  # internal: one measured child
    return parser.parse_args(argv)


# ---- children: each measurement runs in its own process -------------------------------------


def worker_raw(corpus: str, tokenizer_dir: str) -> dict:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    tokens = 0
    start = time.perf_counter()
    with open(corpus, encoding="utf-8") as handle:  # universal newlines, as datasets' text loader
        while batch := list(itertools.islice(handle, RAW_BATCH_LINES)):
            tokens += sum(len(e.ids) for e in tokenizer.encode_batch(batch, add_special_tokens=False))
    return {"seconds": time.perf_counter() - start, "tokens": tokens}


def worker_prepare(corpus: str, tokenizer_dir: str, cache_dir: str, num_proc: str, block_size: str) -> dict:
    import minigpt.data.sources  # noqa: F401  (imports datasets: timed runs start after imports)
    from minigpt.data.corpus import prepare_corpus
    from minigpt.data.settings import DataSettings
    from minigpt.data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    settings = DataSettings(
        train_files=[corpus],
        cache_dir=cache_dir,
        num_proc=int(num_proc),
        block_size=int(block_size),
        show_progress=False,
    )
    start = time.perf_counter()
    result = prepare_corpus(settings, tokenizer)
    seconds = time.perf_counter() - start
    tokens = result.train_stats.tokens + result.validation_stats.tokens
    return {"seconds": seconds, "tokens": tokens, "reused": result.reused, "blocks": len(result.train)}


def process_memory(pid: int) -> tuple[int, int]:
    """(PSS, anonymous PSS) in bytes. PSS splits pages shared with forked workers instead of
    counting them in each; the anonymous part excludes memory-mapped Arrow files and libraries,
    which the OS can drop and reread (they grow with what was read, not with what is held)."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                fields[name] = int(value.split()[0]) * 1024
    return fields.get("Pss", 0), fields.get("Pss_Anon", 0)


def run_child(args: list[str]) -> dict:
    """Run this script as a measured child; add its process tree's peak resident memory."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.pop("TOKENIZERS_PARALLELISM", None)  # the raw baseline and the pipeline may both use threads
    process = psutil.Popen(
        [sys.executable, __file__, "--worker", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    peak = peak_anon = 0
    while process.poll() is None:
        total = anon = 0
        for member in [process, *process.children(recursive=True)]:
            try:
                pss, pss_anon = process_memory(member.pid)
            except (OSError, psutil.Error):  # a worker that just exited
                continue
            total, anon = total + pss, anon + pss_anon
        peak, peak_anon = max(peak, total), max(peak_anon, anon)
        time.sleep(0.05)
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"benchmark child {args[0]} failed:\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result["peak_mb"] = peak / 2**20
    result["peak_anon_mb"] = peak_anon / 2**20
    return result


# ---- the harness ------------------------------------------------------------------------------


def make_corpus(path: Path, size_mb: float) -> int:
    """Tiny Shakespeare repeated until the file holds at least size_mb MB; returns its bytes."""
    text = SHAKESPEARE.read_bytes()
    copies = max(1, round(size_mb * 1e6 / len(text)))
    with open(path, "wb") as handle:
        for _ in range(copies):
            handle.write(text)
    return path.stat().st_size


def train_benchmark_tokenizer(workdir: Path, vocab_size: int) -> Path:
    from minigpt.data.settings import DataSettings, TokenizerSettings
    from minigpt.data.tokenizer import load_or_train_tokenizer

    settings = TokenizerSettings(path=str(workdir / "tokenizer"), vocab_size=vocab_size, show_progress=False)
    data = DataSettings(
        train_files=[str(SHAKESPEARE)], cache_dir=str(workdir / "tok-cache"), show_progress=False
    )
    load_or_train_tokenizer(settings, data)
    return Path(settings.path)


def measure(size_mb: float, workdir: Path, tokenizer_dir: Path, args: argparse.Namespace) -> dict:
    corpus = workdir / f"corpus-{size_mb:g}mb.txt"
    size = make_corpus(corpus, size_mb)
    raw, cold, cached = [], [], []
    for repeat in range(args.repeats):
        raw.append(run_child(["raw", str(corpus), str(tokenizer_dir)]))
        cache = workdir / f"cache-{size_mb:g}mb-{repeat}"
        prepare = [
            "prepare",
            str(corpus),
            str(tokenizer_dir),
            str(cache),
            str(args.num_proc),
            str(args.block_size),
        ]
        cold.append(run_child(prepare))
        for _ in range(CACHED_RUNS):
            cached.append(run_child(prepare))
        assert not cold[-1]["reused"] and all(run["reused"] for run in cached)
        shutil.rmtree(cache)

    def median(runs: list[dict], key: str) -> float:
        return statistics.median(run[key] for run in runs)

    result = {
        "size_mb": size / 1e6,
        "raw_seconds": median(raw, "seconds"),
        "cold_seconds": median(cold, "seconds"),
        "cached_seconds": median(cached, "seconds"),
        "raw_mb_per_s": size / 1e6 / median(raw, "seconds"),
        "pipeline_mb_per_s": size / 1e6 / median(cold, "seconds"),
        "raw_peak_mb": median(raw, "peak_mb"),
        "cold_peak_mb": median(cold, "peak_mb"),
        "cached_peak_mb": median(cached, "peak_mb"),
        "cold_peak_anon_mb": median(cold, "peak_anon_mb"),
        "cached_peak_anon_mb": median(cached, "peak_anon_mb"),
        "tokens_raw": raw[0]["tokens"],
        "tokens_pipeline": cold[0]["tokens"],
        "all_cold_seconds": [round(r["seconds"], 2) for r in cold],
        "all_raw_seconds": [round(r["seconds"], 2) for r in raw],
    }
    result["throughput_ratio"] = result["pipeline_mb_per_s"] / result["raw_mb_per_s"]
    result["cached_fraction"] = result["cached_seconds"] / result["cold_seconds"]
    corpus.unlink()
    return result


def report(results: list[dict], cores: int, num_proc: int) -> str:
    lines = [f"corpus pipeline benchmark: {cores} CPU cores, data.num_proc={num_proc or cores}"]
    for r in results:
        lines += [
            f"{r['size_mb']:.1f} MB: raw encode_batch {r['raw_mb_per_s']:.2f} MB/s ({r['raw_seconds']:.1f} s), "
            f"pipeline {r['pipeline_mb_per_s']:.2f} MB/s ({r['cold_seconds']:.1f} s) -> ratio {r['throughput_ratio']:.2f} (target >= 0.7)",
            f"  cached second run {r['cached_seconds']:.3f} s = {r['cached_fraction']:.2%} of the first (target < 5%)",
            f"  peak memory (PSS of the process tree): pipeline {r['cold_peak_mb']:.0f} MB "
            f"({r['cold_peak_anon_mb']:.0f} MB anonymous), cached {r['cached_peak_mb']:.0f} MB "
            f"({r['cached_peak_anon_mb']:.0f} MB anonymous), raw {r['raw_peak_mb']:.0f} MB (target < 2048 MB)",
            f"  tokens: pipeline {r['tokens_pipeline']:,} (EOS included), raw {r['tokens_raw']:,}",
        ]
    if len(results) > 1:
        small, large = results[0], results[-1]
        growth = large["cold_peak_mb"] / small["cold_peak_mb"]
        anon_growth = large["cold_peak_anon_mb"] / small["cold_peak_anon_mb"]
        lines.append(
            f"pipeline peak memory {small['size_mb']:.0f} MB -> {large['size_mb']:.0f} MB corpus "
            f"(x{large['size_mb'] / small['size_mb']:.1f} the data): PSS x{growth:.2f}, anonymous x{anon_growth:.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        kind, *rest = args.worker
        print(json.dumps(worker_raw(*rest) if kind == "raw" else worker_prepare(*rest)))
        return 0
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="minigpt-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"work folder: {workdir}", flush=True)
    try:
        tokenizer_dir = train_benchmark_tokenizer(workdir, args.vocab_size)
        results = []
        for size_mb in args.sizes_mb:
            results.append(measure(size_mb, workdir, tokenizer_dir, args))
            print(report(results[-1:], len(os.sched_getaffinity(0)), args.num_proc), flush=True)
        print()
        print(report(results, len(os.sched_getaffinity(0)), args.num_proc))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    run_cli(main)
