"""Data preparation against raw `tokenizers`: what the pipeline costs over tokenizing alone.

On the run's corpus and tokenizer settings, in this process and after imports, each repeat in an
empty folder (every value, median, min, max and quartiles reported):
  tokenizer_s   training the byte-level BPE (`load_or_train_tokenizer` into an empty folder)
  prepare_s     `prepare_corpus` with an empty cache: load, split, tokenize, pack, write Arrow
  cached_s      `prepare_corpus` again: reuses the blocks
  raw_s         `tokenizers`' `encode_batch_fast` over the same lines, 1000 lines per call
"""

from __future__ import annotations

import dataclasses
import itertools
import shutil
import time
from pathlib import Path
from typing import Any

from ..data.corpus import prepare_corpus
from ..data.sources import source_files
from ..data.tokenizer import load_or_train_tokenizer
from ..training.settings import RunConfig
from .spread import per_repeat_ratio, spread

RAW_BATCH_LINES = 1000  # lines per encode call: the pipeline's Dataset.map batch


def raw_tokenize_seconds(tokenizer, paths: list[Path]) -> tuple[float, int]:
    """(seconds, tokens) of encoding every line of `paths` with the bare `tokenizers` backend."""
    backend = tokenizer.backend_tokenizer
    tokens, start = 0, time.perf_counter()
    for path in paths:
        with open(path, encoding="utf-8") as handle:  # universal newlines, as datasets' text loader
            while batch := list(itertools.islice(handle, RAW_BATCH_LINES)):
                tokens += sum(len(e.ids) for e in backend.encode_batch_fast(batch, add_special_tokens=False))
    return time.perf_counter() - start, tokens


def time_data_once(run: RunConfig, workdir: Path) -> dict[str, float]:
    """One repeat in an emptied `workdir`: seconds of each step, and the tokens each one produced."""
    workdir = Path(workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    tokenizer_settings = dataclasses.replace(
        run.tokenizer, path=str(workdir / "tokenizer"), show_progress=False
    )
    data = dataclasses.replace(run.data, cache_dir=str(workdir / "data"), show_progress=False)
    start = time.perf_counter()
    tokenizer = load_or_train_tokenizer(tokenizer_settings, data)
    tokenizer_s = time.perf_counter() - start
    start = time.perf_counter()
    corpus = prepare_corpus(data, tokenizer)
    prepare_s = time.perf_counter() - start
    start = time.perf_counter()
    prepare_corpus(data, tokenizer)
    cached_s = time.perf_counter() - start
    train_paths, validation_paths = source_files(data)
    raw_s, raw_tokens = raw_tokenize_seconds(tokenizer, [*train_paths, *validation_paths])
    return {
        "tokenizer_s": tokenizer_s,
        "prepare_s": prepare_s,
        "cached_s": cached_s,
        "raw_s": raw_s,
        "tokens": corpus.train_stats.tokens + corpus.validation_stats.tokens,
        "raw_tokens": raw_tokens,
    }


def compare_data(run: RunConfig, workdir: Path, repeats: int = 3) -> dict[str, Any]:
    """Seconds of tokenizer training, cold and cached preparation, and raw tokenizing, and the
    throughput ratio (taken repeat by repeat), each as a `spread` over `repeats` cold repeats."""
    samples = [time_data_once(run, Path(workdir) / f"repeat-{i}") for i in range(repeats)]
    tokens, raw_tokens = samples[0]["tokens"], samples[0]["raw_tokens"]  # the same text every repeat
    prepare_rate = [tokens / s["prepare_s"] for s in samples]
    raw_rate = [raw_tokens / s["raw_s"] for s in samples]
    return {
        **{key: spread(s[key] for s in samples) for key in ("tokenizer_s", "prepare_s", "cached_s", "raw_s")},
        "tokens": tokens,
        "raw_tokens": raw_tokens,
        "prepare_tokens_per_s": spread(prepare_rate),
        "raw_tokens_per_s": spread(raw_rate),
        "prepare_over_raw_throughput": per_repeat_ratio(prepare_rate, raw_rate),
    }


__all__ = ["compare_data", "raw_tokenize_seconds", "time_data_once"]
