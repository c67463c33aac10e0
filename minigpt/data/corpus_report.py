"""A report on the corpus before training: its size, its duplicates, and what a plan makes of it
(docs/data.md, "Duplicates and the corpus report"). Cached beside the prepared blocks (`REPORT_FILE`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..atomic import atomic_write_file
from ..console import plural
from .duplicates import PREFIX_CHARS, THRESHOLD, DuplicateIndex, document_batches, join_documents
from .raw_corpus import RawCorpus, document_sizes, load_raw_corpus
from .settings import DataSettings, seeded_unit
from .sources import Sources

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

    compared: int = 0  # documents compared (all of them, or the sample)
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
        """The report with a plan of `tokens` tokens for `parameters` matmul parameters; the tokens per
        parameter (repeats counted less) and the ratio a sized run aims at are the sizing rule's."""
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
    """What decides the comparison beyond the blocks' inputs: a cached report with others is redone."""
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
    scans = (SplitScan(), SplitScan())
    for scan, split, chosen in zip(scans, (raw.train, raw.validation), picked, strict=True):
        for document in join_documents(document_batches(split.dataset, chosen)):
            copy = index.match(document, add=scan is scans[0])  # validation: copies of training documents only
            scan.compared += 1
            if copy is not None:
                setattr(scan, copy.kind, getattr(scan, copy.kind) + 1)
    return scans[0], scans[1], sample


def build_report(raw: RawCorpus, settings: DataSettings, train_tokens: int, validation_tokens: int) -> CorpusReport:
    """The report on `raw` (its text compared now) with the prepared splits' token counts."""
    train, validation, sample = scan_corpus(raw, settings)
    sizes = [
        {"documents": split.documents, "bytes": split.bytes, "tokens": tokens, "bytes_per_token": split.bytes / max(tokens, 1)}
        for split, tokens in ((raw.train, train_tokens), (raw.validation, validation_tokens))
    ]
    return CorpusReport(*sizes, dataclasses.asdict(train), dataclasses.asdict(validation), sample, raw.dedup)


def read_report(folder: Path, settings: DataSettings) -> CorpusReport | None:
    """The report cached in `folder`, or None when there is none or it was made with other settings."""
    path = Path(folder) / REPORT_FILE
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    sample = dict(record.get("sample") or {})
    sample.pop("whole", None)
    return CorpusReport.from_dict(record) if sample == scan_settings(settings) else None


def corpus_report(
    folder: Path, sources: Sources, train_tokens: int, validation_tokens: int, raw: RawCorpus | None = None
) -> CorpusReport:
    """The report on the blocks in `folder`: the one saved there with these settings, else one made now
    from `raw` (the text the blocks were made of; loaded from `sources` when not given) and saved."""
    saved = read_report(folder, sources.settings)
    if saved is not None:
        return saved
    report = build_report(raw or load_raw_corpus(sources), sources.settings, train_tokens, validation_tokens)
    with atomic_write_file(Path(folder) / REPORT_FILE) as handle:
        json.dump(report.to_dict(), handle, indent=2)
    return report
