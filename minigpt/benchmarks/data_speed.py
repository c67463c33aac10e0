"""Data preparation against raw `tokenizers`: what the pipeline costs over tokenizing alone.

A corpus is any `DataSettings` (its files and how the pipeline reads them): the run's own
(`compare_data`, scripts/benchmark.py's data rows) or Tiny Shakespeare repeated to given sizes
(`compare_sizes`, scripts/benchmark_data.py). On it, each repeat in an emptied folder, contenders
(functions of a `DataJob`, in `CONTENDERS`) in turn:
  raw       `tokenizers`' `encode_batch_fast` over the same lines, 1000 per call (the pipeline's
            Dataset.map batch), with the same cores (its thread pool)
  prepare   `prepare_corpus` with an empty cache: load to Arrow, check, split, tokenize, pack, write
  cached    `prepare_corpus` again with the same inputs and settings: reuses the blocks
and, when the corpus has no tokenizer given, training the byte-level BPE first (`tokenizer_s`).
Each contender times its own work, after imports. It runs in this process, or in a fresh one
(`fresh_processes`) whose process tree's peak memory is sampled: PSS, which splits the pages
forked workers share instead of counting them in each, and its anonymous part (no memory-mapped
Arrow files or libraries, which the OS can drop and reread). Every value is reported with its
spread over repeats; ratios are taken repeat by repeat. On a shared machine, run it when it is quiet.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..data.settings import DEFAULT_CORPUS, DataSettings, TokenizerSettings
from ..training.settings import RunConfig
from .spread import per_repeat_ratio, spread

RAW_BATCH_LINES = 1000  # lines per encode call: the pipeline's Dataset.map batch
SHAKESPEARE = Path(__file__).resolve().parents[2] / DEFAULT_CORPUS  # what sized corpora repeat
MEMORY_SAMPLE_S = 0.05  # how often a fresh process's memory is read
SIZE_TARGETS = {"throughput_ratio": 0.7, "cached_fraction": 0.05, "peak_mb": 2048}  # compare_sizes' report


@dataclass(frozen=True)
class DataJob:
    """What a contender is given: the corpus and the pipeline's settings (`data.cache_dir` is the
    repeat's), its text files resolved, and the folder of a trained tokenizer (tokenizer.json)."""

    data: DataSettings
    files: list[str]
    tokenizer_dir: str

    def to_json(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "data": dataclasses.asdict(self.data)})

    @classmethod
    def from_json(cls, text: str) -> DataJob:
        values = json.loads(text)
        return cls(DataSettings(**values["data"]), values["files"], values["tokenizer_dir"])


def encode_raw(job: DataJob) -> dict[str, Any]:
    """The bare `tokenizers` backend over every line of the corpus's files (universal newlines, as
    `datasets`' text loader reads them)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(job.tokenizer_dir) / "tokenizer.json"))
    tokens, start = 0, time.perf_counter()
    for path in job.files:
        with open(path, encoding="utf-8") as handle:
            while batch := list(itertools.islice(handle, RAW_BATCH_LINES)):
                tokens += sum(len(e.ids) for e in tokenizer.encode_batch_fast(batch, add_special_tokens=False))
    return {"seconds": time.perf_counter() - start, "tokens": tokens}


def prepare_blocks(job: DataJob) -> dict[str, Any]:
    """`prepare_corpus` into the job's cache: cold in an empty one, reusing the blocks otherwise."""
    from ..data.corpus import prepare_corpus  # imports datasets: before the clock starts
    from ..data.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(job.tokenizer_dir)
    start = time.perf_counter()
    corpus = prepare_corpus(job.data, tokenizer)
    seconds = time.perf_counter() - start
    tokens = corpus.train_stats.tokens + corpus.validation_stats.tokens
    return {"seconds": seconds, "tokens": tokens, "reused": corpus.reused}


# name -> contender, run in this order in every repeat ("cached" after "prepare": its cache is warm)
CONTENDERS: dict[str, Callable[[DataJob], dict[str, Any]]] = {
    "raw": encode_raw,
    "prepare": prepare_blocks,
    "cached": prepare_blocks,
}
EXPECTED_REUSE = {"prepare": False, "cached": True}  # a cache hit or miss where none was meant: a broken run


def process_memory(pid: int) -> tuple[int, int]:
    """(PSS, anonymous PSS) of one process in bytes (Linux `smaps_rollup`)."""
    fields = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
        for line in handle:
            name, _, value = line.partition(":")
            if value.strip().endswith("kB"):
                fields[name] = int(value.split()[0]) * 1024
    return fields.get("Pss", 0), fields.get("Pss_Anon", 0)


def run_in_fresh_process(name: str, job: DataJob) -> dict[str, Any]:
    """A contender in a new Python process; adds its process tree's peak memory (peak_mb, peak_anon_mb)."""
    import psutil

    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    env.pop("TOKENIZERS_PARALLELISM", None)  # the raw contender and the pipeline may both use threads
    package_root = str(Path(__file__).resolve().parents[2])  # the child imports this minigpt, wherever it runs
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", __name__, name, job.to_json()]
    process = psutil.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
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
        time.sleep(MEMORY_SAMPLE_S)
    out, err = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"data benchmark contender {name} failed:\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    return {**result, "peak_mb": peak / 2**20, "peak_anon_mb": peak_anon / 2**20}


def train_tokenizer(settings: TokenizerSettings, data: DataSettings, folder: Path) -> tuple[Path, float]:
    """A tokenizer trained on `data` into `folder`: (its folder, seconds of training)."""
    from ..data.tokenizer import load_or_train_tokenizer

    settings = dataclasses.replace(settings, path=str(folder), show_progress=False)
    start = time.perf_counter()
    load_or_train_tokenizer(settings, dataclasses.replace(data, show_progress=False))
    return folder, time.perf_counter() - start


def time_repeats(
    data: DataSettings,
    tokenizer: TokenizerSettings | Path,
    workdir: Path,
    repeats: int = 3,
    fresh_processes: bool = False,
    cached_runs: int = 1,
) -> dict[str, Any]:
    """Every contender on the corpus `data` names, `repeats` times, each repeat in an emptied folder.

    `tokenizer`: settings to train one with in every repeat (timed: `tokenizer_s`), or the folder
    of a trained one. `cached_runs`: cached runs after each cold one (cheap; all in the spread).
    Returns `<name>_s` spreads, tokens of the pipeline and of the raw encoder, throughputs and the
    prepare / raw throughput ratio (per repeat), and with `fresh_processes` the peak memories.
    """
    from ..data.sources import source_files

    train_paths, validation_paths = source_files(data)
    files = [str(p) for p in (*train_paths, *validation_paths)]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTENDERS}
    tokenizer_seconds = []
    for repeat in range(repeats):
        folder = Path(workdir) / f"repeat-{repeat}"
        shutil.rmtree(folder, ignore_errors=True)
        if isinstance(tokenizer, TokenizerSettings):
            tokenizer_dir, seconds = train_tokenizer(tokenizer, data, folder / "tokenizer")
            tokenizer_seconds.append(seconds)
        else:
            tokenizer_dir = tokenizer
        repeat_data = dataclasses.replace(data, cache_dir=str(folder / "data"), show_progress=False)
        job = DataJob(repeat_data, files, str(tokenizer_dir))
        for name, contender in CONTENDERS.items():
            for _ in range(cached_runs if name == "cached" else 1):
                run = run_in_fresh_process(name, job) if fresh_processes else contender(job)
                expected = EXPECTED_REUSE.get(name)
                if expected is not None and run["reused"] != expected:
                    raise RuntimeError(f"the {name} run {'reused' if expected is False else 'did not reuse'} the blocks")
                runs[name].append(run)
        shutil.rmtree(folder / "data", ignore_errors=True)  # a large corpus's blocks: one repeat's at a time

    tokens, raw_tokens = runs["prepare"][0]["tokens"], runs["raw"][0]["tokens"]  # the same text every repeat
    prepare_rate = [tokens / run["seconds"] for run in runs["prepare"]]
    raw_rate = [raw_tokens / run["seconds"] for run in runs["raw"]]
    result: dict[str, Any] = {
        **({"tokenizer_s": spread(tokenizer_seconds)} if tokenizer_seconds else {}),
        **{f"{name}_s": spread(run["seconds"] for run in named) for name, named in runs.items()},
        "bytes": sum(os.path.getsize(path) for path in files),
        "tokens": tokens,
        "raw_tokens": raw_tokens,
        "prepare_tokens_per_s": spread(prepare_rate),
        "raw_tokens_per_s": spread(raw_rate),
        "prepare_over_raw_throughput": per_repeat_ratio(prepare_rate, raw_rate),
    }
    if fresh_processes:
        for key in ("peak_mb", "peak_anon_mb"):
            result[key] = {name: spread(run[key] for run in named) for name, named in runs.items()}
    return result


def compare_data(run: RunConfig, workdir: Path, repeats: int = 3) -> dict[str, Any]:
    """The run's corpus and tokenizer settings, in this process: tokenizer training, cold and cached
    preparation and raw tokenizing, each a spread over `repeats`."""
    return time_repeats(run.data, run.tokenizer, Path(workdir), repeats)


def sized_corpus(path: Path, size_mb: float) -> Path:
    """Tiny Shakespeare repeated until `path` holds about `size_mb` MB (at least one copy)."""
    text = SHAKESPEARE.read_bytes()
    with open(path, "wb") as handle:
        for _ in range(max(1, round(size_mb * 1e6 / len(text)))):
            handle.write(text)
    return path


def compare_sizes(
    sizes_mb: list[float],
    workdir: Path,
    repeats: int = 3,
    num_proc: int = 0,
    vocab_size: int = 4096,
    block_size: int = 256,
    cached_runs: int = 3,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Generated corpora of `sizes_mb`, every contender in a fresh process (peak memory), with one
    tokenizer trained on Tiny Shakespeare; one `time_repeats` result per size, plus `size_mb`."""
    workdir = Path(workdir)
    shakespeare = DataSettings(train_files=[str(SHAKESPEARE)], cache_dir=str(workdir / "tokenizer-data"))
    tokenizer_dir, _ = train_tokenizer(TokenizerSettings(vocab_size=vocab_size), shakespeare, workdir / "tokenizer")
    results = []
    for size_mb in sizes_mb:
        corpus = sized_corpus(workdir / f"corpus-{size_mb:g}mb.txt", size_mb)
        data = DataSettings(train_files=[str(corpus)], num_proc=num_proc, block_size=block_size)
        result = time_repeats(data, tokenizer_dir, workdir / f"{size_mb:g}mb", repeats, True, cached_runs)
        results.append({"size_mb": result["bytes"] / 1e6, **result})
        corpus.unlink()
        if progress is not None:
            progress(size_report(results[-1:], num_proc))
    return results


def size_report(results: list[dict[str, Any]], num_proc: int = 0) -> str:
    """Medians per corpus size against the targets: throughput ratio, cached fraction, peak memory
    (and how the peak grows with the corpus)."""
    cores = len(os.sched_getaffinity(0))
    targets = SIZE_TARGETS
    lines = [f"corpus pipeline benchmark: {cores} CPU cores, data.num_proc={num_proc or cores}"]
    for r in results:
        raw_s, cold_s, cached_s = (r[f"{name}_s"]["median"] for name in ("raw", "prepare", "cached"))
        peak, anon = r["peak_mb"], r["peak_anon_mb"]
        lines += [
            f"{r['size_mb']:.1f} MB: raw encode_batch {r['size_mb'] / raw_s:.2f} MB/s ({raw_s:.1f} s), "
            f"pipeline {r['size_mb'] / cold_s:.2f} MB/s ({cold_s:.1f} s) -> ratio "
            f"{r['prepare_over_raw_throughput']['median']:.2f} (target >= {targets['throughput_ratio']})",
            f"  cached second run {cached_s:.3f} s = {cached_s / cold_s:.2%} of the first "
            f"(target < {targets['cached_fraction']:.0%})",
            f"  peak memory (PSS of the process tree): pipeline {peak['prepare']['median']:.0f} MB "
            f"({anon['prepare']['median']:.0f} MB anonymous), cached {peak['cached']['median']:.0f} MB "
            f"({anon['cached']['median']:.0f} MB anonymous), raw {peak['raw']['median']:.0f} MB "
            f"(target < {targets['peak_mb']} MB)",
            f"  tokens: pipeline {r['tokens']:,} (EOS included), raw {r['raw_tokens']:,}",
        ]
    if len(results) > 1:
        small, large = results[0], results[-1]
        growth = large["peak_mb"]["prepare"]["median"] / small["peak_mb"]["prepare"]["median"]
        anon_growth = large["peak_anon_mb"]["prepare"]["median"] / small["peak_anon_mb"]["prepare"]["median"]
        lines.append(
            f"pipeline peak memory {small['size_mb']:.0f} MB -> {large['size_mb']:.0f} MB corpus "
            f"(x{large['size_mb'] / small['size_mb']:.1f} the data): PSS x{growth:.2f}, anonymous x{anon_growth:.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """A fresh process's side of `run_in_fresh_process`: NAME JOB_JSON -> one JSON line on stdout."""
    name, job = argv
    print(json.dumps(CONTENDERS[name](DataJob.from_json(job))))
    return 0


__all__ = [
    "CONTENDERS",
    "DataJob",
    "compare_data",
    "compare_sizes",
    "size_report",
    "sized_corpus",
    "time_repeats",
]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
