"""A report on the corpus before training: its size, its duplicates, and what a plan makes of it.

Computed where the blocks are prepared (`corpus.prepare_corpus`), from the raw splits' text and
the prepared splits' tokens, and cached beside the blocks (`REPORT_FILE`): a run that reuses the
blocks reads it, no text is scanned again. It holds, per split, documents, bytes, tokens and bytes
per token; the exact and near-duplicate documents within the training split (`duplicates.py`);
and the validation documents that copy a training document, which make validation flatter the
model. Training adds its plan (`with_plan`): the epochs and tokens per parameter the run's steps
imply, in the sizing rule's terms (training/sizing.py: effective tokens per matmul parameter). A
run prints `lines()` at its start and writes the report into its folder.

Bounded: at most `data.report_max_documents` documents and REPORT_MAX_BYTES of their text are
compared, drawn by `data.seed` across each split (each document up to its first PREFIX_CHARS
characters), so a 10 GB corpus costs seconds. Counts from a sample are counts in the sample, said
so: a copy is found only when both it and its original are drawn, and how many more the corpus
holds depends on how its copies cluster, which a sample cannot tell.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..console import plural
from .duplicates import PREFIX_CHARS, THRESHOLD, Copy, DuplicateIndex, document_batches, join_documents
from .raw_corpus import RawCorpus
from .settings import DataSettings, seeded_unit
from .text_rows import RawSplit, document_sizes

REPORT_FILE = "corpus_report.json"  # beside the prepared blocks, and in a run's folder
REPORT_VERSION = 1  # bump when the same corpus gives another report
REPORT_MAX_BYTES = 50_000_000  # text compared at most (MinHash reads about 12 MB/s a core)
REPORT_SEED_SALT = 0x2E9087D1  # the report's draw is another than the split's and the tokenizer's
# Muennighoff et al. 2023, "Scaling Data-Constrained Language Models": up to about 4 epochs,
# repeated tokens are worth almost as much as new ones; beyond that their value falls fast.
EPOCHS_WORTH_REPEATING = 4


@dataclass
class SplitScan:
    """What comparing one split's documents found."""

    documents: int  # documents with text in the split
    compared: int  # documents compared (all of them, or the sample)
    exact: int = 0  # training: copies of an earlier training document; validation: of a training one
    near: int = 0


@dataclass
class CorpusReport:
    """The corpus in numbers, as `corpus_report.json` holds it (`to_dict`)."""

    train: dict[str, Any]  # documents, bytes, tokens, bytes_per_token
    validation: dict[str, Any]
    duplicates: dict[str, Any]  # within training: compared (documents), exact, near (copies found)
    validation_in_train: dict[str, Any]  # validation documents: compared, exact, near (copies of training ones)
    sample: dict[str, Any]  # whole (bool: every document compared), max_documents, max_bytes, seed, version
    dedup: dict[str, Any] | None = None  # what data.dedup removed before this (RawCorpus.dedup)
    plan: dict[str, Any] | None = None  # with_plan: tokens, parameters, epochs, tokens_per_parameter, rule_tokens_per_parameter

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, record: dict[str, Any]) -> CorpusReport:
        return cls(**{f.name: record.get(f.name) for f in dataclasses.fields(cls)})

    @property
    def overlap(self) -> int:
        """Validation documents (compared) that copy a training document."""
        return self.validation_in_train["exact"] + self.validation_in_train["near"]

    def with_plan(
        self, tokens: int, parameters: int, tokens_per_parameter: float, rule_tokens_per_parameter: float
    ) -> CorpusReport:
        """The report with a training plan of `tokens` tokens for a model of `parameters` matmul
        parameters: `tokens_per_parameter` its effective tokens (repeats counted less) per parameter,
        `rule_tokens_per_parameter` the ratio a sized run aims at (both the sizing rule's, which
        training owns)."""
        epochs = tokens / max(self.train["tokens"], 1)
        plan = {
            "tokens": tokens, "parameters": parameters, "epochs": epochs, "tokens_per_parameter": tokens_per_parameter,
            "rule_tokens_per_parameter": rule_tokens_per_parameter,
        }
        return dataclasses.replace(self, plan=plan)

    def lines(self) -> list[str]:
        """What a run prints: a few lines, then a `warning:` line for each problem found."""
        lines = [
            "corpus: " + "; ".join(f"{name} {_sizes(getattr(self, name))}" for name in ("train", "validation"))
        ]
        if self.dedup is not None:
            lines.append(_dedup_line(self.dedup))
        lines += [self._duplicates_line(), self._validation_line()]
        if self.plan is not None:
            p = self.plan
            lines.append(
                f"plan: {p['tokens']:,} tokens = {p['epochs']:.2f} epochs of the {self.train['tokens']:,} training tokens, "
                f"{p['tokens_per_parameter']:.2f} tokens per parameter, repeats counted less ({p['parameters']:,} matmul "
                f"parameters; a sized run aims at {p['rule_tokens_per_parameter']:.2f})"
            )
        return lines + [f"warning: {warning}" for warning in self.warnings()]

    def warnings(self) -> list[str]:
        """Problems, one line each: validation that copies training; epochs past the point of worth."""
        found = []
        if self.overlap:
            compared = self.validation_in_train["compared"]
            sampled = "" if self.sample["whole"] else " (in the sample)"
            found.append(
                f"{self.overlap:,} of {plural(compared, 'validation document')} ({self.overlap / compared:.1%}) also in "
                f"training{sampled}: validation flatters the model; data.dedup=true removes them"
            )
        if self.plan is not None and self.plan["epochs"] > EPOCHS_WORTH_REPEATING:
            found.append(
                f"the plan trains {self.plan['epochs']:.2f} epochs of the training tokens: past about "
                f"{EPOCHS_WORTH_REPEATING}, repeated tokens are worth ever less than new ones (Muennighoff et al. 2023); "
                "more text would be worth more than these passes"
            )
        return found

    def _duplicates_line(self) -> str:
        d, documents = self.duplicates, self.train["documents"]
        if documents < 2:
            return f"duplicates: none to compare in training ({plural(documents, 'document')})"
        found = f"{d['exact']:,} exact and {d['near']:,} near copies (MinHash, Jaccard >= {THRESHOLD} of word 5-grams)"
        if self.sample["whole"]:
            return f"duplicates in training: {found} among its {plural(documents, 'document')}"
        return (
            f"duplicates in a sample of {d['compared']:,} of the {documents:,} training documents "
            f"(data.report_max_documents={self.sample['max_documents']}): {found}; a sample finds a copy "
            "only when it draws its original too, so the corpus may hold more"
        )

    def _validation_line(self) -> str:
        v = self.validation_in_train
        where = "training" if self.sample["whole"] else "the training sample"
        of = plural(v["compared"], "validation document") + ("" if self.sample["whole"] else " sampled")
        kinds = f" ({v['exact']:,} exact, {v['near']:,} near)" if self.overlap else ""
        return f"validation: {self.overlap:,} of {of} also in {where}{kinds}"


def _sizes(split: dict[str, Any]) -> str:
    return (
        f"{plural(split['documents'], 'document')}, {split['bytes']:,} bytes, {split['tokens']:,} tokens "
        f"({split['bytes_per_token']:.2f} bytes/token)"
    )


def _dedup_line(dedup: dict[str, Any]) -> str:
    parts = []
    for pool, counts in dedup.items():
        what = {"corpus": "documents before the split", "train": "training documents", "validation": "validation documents"}
        part = f"{counts['exact']:,} exact and {counts['near']:,} near copies of {counts['documents']:,} {what[pool]}"
        if counts.get("copies_of_validation"):
            part += f" ({counts['copies_of_validation']:,} of them copies of validation documents)"
        parts.append(part)
    return "data.dedup removed " + "; ".join(reversed(parts))  # training first


def scan_settings(settings: DataSettings) -> dict[str, Any]:
    """What decides the comparison beyond the blocks' own inputs: a cached report with others is redone."""
    return {
        "max_documents": settings.report_max_documents,
        "max_bytes": None if settings.report_max_documents is None else REPORT_MAX_BYTES,
        "seed": settings.seed,
        "version": REPORT_VERSION,
    }


def scan_corpus(raw: RawCorpus, settings: DataSettings) -> tuple[SplitScan, SplitScan, dict[str, Any]]:
    """Compare the documents of `raw`: (training's duplicates, validation's copies of training, the
    sample's settings with `whole`). Both splits are drawn with one share p, seeded."""
    sample = scan_settings(settings)
    picked: list[np.ndarray | None] = [None, None]  # None: every document of the split
    if settings.report_max_documents is not None:
        documents = [document_sizes(split) for split in (raw.train, raw.validation)]
        count = sum(len(keys) for keys, _ in documents)
        compared_bytes = sum(int(np.minimum(sizes, PREFIX_CHARS).sum()) for _, sizes in documents)  # as read
        p = min(1.0, settings.report_max_documents / max(count, 1), REPORT_MAX_BYTES / max(compared_bytes, 1))
        if p < 1.0:
            picked = [keys[seeded_unit(keys, settings.seed ^ REPORT_SEED_SALT) < p] for keys, _ in documents]
    sample["whole"] = picked[0] is None
    index = DuplicateIndex()
    train = SplitScan(raw.train.documents, 0)
    for document in join_documents(document_batches(raw.train.dataset, picked[0])):
        _count_copy(train, index.match(document))
    validation = SplitScan(raw.validation.documents, 0)
    for document in join_documents(document_batches(raw.validation.dataset, picked[1])):
        _count_copy(validation, index.match(document, add=False))  # copies of training documents only
    return train, validation, sample


def _count_copy(scan: SplitScan, copy: Copy | None) -> None:
    scan.compared += 1
    if copy is not None:
        setattr(scan, copy.kind, getattr(scan, copy.kind) + 1)


def build_report(
    raw: RawCorpus, settings: DataSettings, train_tokens: int, validation_tokens: int
) -> CorpusReport:
    """The report on `raw` (its text compared now) with the prepared splits' token counts."""
    train, validation, sample = scan_corpus(raw, settings)
    return CorpusReport(
        train=_split_record(raw.train, train_tokens),
        validation=_split_record(raw.validation, validation_tokens),
        duplicates={"compared": train.compared, "exact": train.exact, "near": train.near},
        validation_in_train={"compared": validation.compared, "exact": validation.exact, "near": validation.near},
        sample=sample,
        dedup=raw.dedup,
    )


def _split_record(split: RawSplit, tokens: int) -> dict[str, Any]:
    return {
        "documents": split.documents,
        "bytes": split.bytes,
        "tokens": tokens,
        "bytes_per_token": split.bytes / max(tokens, 1),
    }


def read_report(folder: Path, settings: DataSettings) -> CorpusReport | None:
    """The report cached in `folder`, or None when there is none or it was made with other settings."""
    path = Path(folder) / REPORT_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    sample = dict(record.get("sample") or {})
    sample.pop("whole", None)
    return CorpusReport.from_dict(record) if sample == scan_settings(settings) else None


__all__ = [
    "EPOCHS_WORTH_REPEATING",
    "REPORT_FILE",
    "CorpusReport",
    "build_report",
    "read_report",
    "scan_corpus",
    "scan_settings",
]
