"""The corpus report and data.dedup on a large corpus with planted copies: time, peak memory, findings.

`write_planted_corpus` makes JSON lines of documents of 30 to 90 lines of Tiny Shakespeare drawn
at random (seeded: the same file every time; two such documents share almost no word 5-gram),
with copies planted among them: an exact copy of an earlier document (every `EXACT_EVERY`-th
document) and a near one (every `NEAR_EVERY`-th: two words changed, Jaccard of the word 5-grams
about 0.9 or more). A document is rebuilt from its number, so the writer holds none of them.
`compare_corpus_report` writes one per size, loads it once (datasets' Arrow copy, `load`), then
in each repeat measures the report's comparison (`report`, its bounded sample) and data.dedup
over every document (`dedup`), each in a fresh process whose tree's peak memory is sampled
(`data_speed.run_in_fresh_process`).
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.data_speed import SHAKESPEARE, DataJob, run_in_fresh_process
from benchmarks.spread import format_spread, spread
from minigpt.data.settings import DataSettings

EXACT_EVERY = 20  # every 20th document is an exact copy of an earlier one (5%)
NEAR_EVERY = 20  # and every 20th (offset by 10) a near copy (5%)
LINES_PER_DOCUMENT = (30, 90)  # Tiny Shakespeare lines per document, drawn uniformly
CONTENDERS = ("report", "dedup")  # after one `load`


@dataclass
class PlantedCorpus:
    """A written corpus and the copies planted in it."""

    path: Path
    bytes: int
    documents: int
    exact: int  # documents that are exact copies of an earlier one
    near: int  # documents that are near copies of an earlier one


def _document(lines: list[str], number: int, seed: int) -> str:
    draw = random.Random(seed * 1_000_003 + number)
    return "\n".join(draw.choices(lines, k=draw.randint(*LINES_PER_DOCUMENT)))


def _near_copy(text: str, number: int) -> str:
    """`text` with two of its words changed, a third and two thirds in."""
    words = text.split(" ")
    for position in (len(words) // 3, 2 * len(words) // 3):
        words[position] = f"changed{number}"
    return " ".join(words)


def _copy_kind(number: int) -> str | None:
    """"exact" or "near" for the documents that copy an earlier one, else None."""
    if number and number % EXACT_EVERY == 0:
        return "exact"
    return "near" if number % NEAR_EVERY == NEAR_EVERY // 2 else None


def _original(number: int) -> int:
    """The earlier document, itself no copy, that document `number` copies (drawn by its number)."""
    original = random.Random(number).randrange(number)
    while _copy_kind(original) is not None:
        original -= 1
    return original


def write_planted_corpus(path: Path, size_bytes: int, seed: int = 0) -> PlantedCorpus:
    """JSON lines of about `size_bytes` (at least 20 documents) with exact and near copies planted."""
    lines = [line for line in SHAKESPEARE.read_text(encoding="utf-8").splitlines() if line.strip()]
    written = documents = exact = near = 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < size_bytes or documents < 20:
            kind = _copy_kind(documents)
            if kind == "exact":
                text, exact = _document(lines, _original(documents), seed), exact + 1
            elif kind == "near":
                text, near = _near_copy(_document(lines, _original(documents), seed), documents), near + 1
            else:
                text = _document(lines, documents, seed)
            record = json.dumps({"text": text}) + "\n"
            handle.write(record)
            written, documents = written + len(record.encode("utf-8")), documents + 1
    return PlantedCorpus(path, written, documents, exact, near)


def compare_corpus_report(
    sizes_mb: list[float],
    workdir: Path,
    repeats: int = 1,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Per size: the planted corpus, its load, and `repeats` of the report and of data.dedup, each in
    a fresh process (peak memory of its process tree)."""
    workdir = Path(workdir)
    results = []
    for size_mb in sizes_mb:
        corpus = write_planted_corpus(workdir / f"planted-{size_mb:g}mb.jsonl", int(size_mb * 1e6))
        data = DataSettings(
            train_files=[str(corpus.path)], cache_dir=str(workdir / f"{size_mb:g}mb-cache"), show_progress=False
        )
        job = DataJob(data, [str(corpus.path)], tokenizer_dir="")
        load = run_in_fresh_process("load", job)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTENDERS}
        for _ in range(repeats):
            for name in CONTENDERS:
                runs[name].append(run_in_fresh_process(name, job))
        result = {
            "size_mb": corpus.bytes / 1e6,
            "documents": corpus.documents,
            "planted": {"exact": corpus.exact, "near": corpus.near},
            "load": load,
            "runs": runs,
            **{f"{name}_s": spread(run["seconds"] for run in runs[name]) for name in CONTENDERS},
            "peak_mb": {name: spread(run["peak_mb"] for run in runs[name]) for name in CONTENDERS},
            "peak_anon_mb": {name: spread(run["peak_anon_mb"] for run in runs[name]) for name in CONTENDERS},
        }
        results.append(result)
        shutil.rmtree(data.cache_dir, ignore_errors=True)
        corpus.path.unlink()
        if progress is not None:
            progress(corpus_report_report(results[-1:]))
    return results


def corpus_report_report(results: list[dict[str, Any]]) -> str:
    """Time and peak memory of the report and of data.dedup per size, and what each found."""
    lines = []
    for r in results:
        report, dedup = r["runs"]["report"][0], r["runs"]["dedup"][0]
        lines += [
            f"{r['size_mb']:.0f} MB of JSON lines, {r['documents']:,} documents, planted {r['planted']['exact']:,} "
            f"exact and {r['planted']['near']:,} near copies (load into Arrow {r['load']['seconds']:.1f} s):",
            f"  report {format_spread(r['report_s'])} s, peak PSS {format_spread(r['peak_mb']['report'], '.0f')} MB "
            f"({format_spread(r['peak_anon_mb']['report'], '.0f')} MB anonymous): compared {report['compared']:,} "
            f"documents{'' if report['whole'] else ' (a sample)'}, found {report['exact']:,} exact and "
            f"{report['near']:,} near copies in training, {report['validation_copies']:,} validation copies",
            f"  data.dedup {format_spread(r['dedup_s'])} s, peak PSS {format_spread(r['peak_mb']['dedup'], '.0f')} MB "
            f"({format_spread(r['peak_anon_mb']['dedup'], '.0f')} MB anonymous): removed {dedup['exact']:,} exact and "
            f"{dedup['near']:,} near copies of {dedup['documents']:,} documents",
        ]
    return "\n".join(lines)


__all__ = ["PlantedCorpus", "compare_corpus_report", "corpus_report_report", "write_planted_corpus"]
