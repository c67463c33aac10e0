"""Exact and near-duplicate documents: what the corpus report counts and `data.dedup` removes
(`raw_corpus.deduplicated`).

Exact: the same text up to its whitespace. Near: MinHash of word 5-grams at Jaccard >= 0.8 (Lee et al.
2022), candidates from a MinHashLSH tuned for 0.7 (LSH alone at 0.8 misses many pairs), each confirmed by
the MinHash estimate (standard error 0.035 at 0.8). Recall figures: docs/data.md.
"""

from __future__ import annotations

import functools
import hashlib
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import datasets
import numpy as np
from datasketch import MinHash, MinHashLSH

from .text_rows import BATCH_ROWS

SHINGLE_WORDS = 5  # words per shingle
THRESHOLD = 0.8  # estimated Jaccard similarity of the shingle sets at which a document is a near duplicate
CANDIDATE_THRESHOLD = 0.7  # what MinHashLSH is tuned for: recall at THRESHOLD, the estimate confirms
NUM_PERM = 128  # MinHash permutations: the estimate's standard error at 0.8 is 0.035
MINHASH_SEED = 1  # the permutations: the same on every machine, so dedup removes the same documents
PREFIX_CHARS = 20_000  # characters of a document compared, at most
DEDUP_VERSION = 1  # bump when data.dedup removes other documents from the same inputs


@functools.cache
def _prototype() -> MinHash:
    """The empty MinHash every document's is copied from: its permutations are drawn once (from
    MINHASH_SEED), and the shingles' 32-bit hash is CRC-32 (C speed) rather than SHA-1, at half the time."""
    return MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED, hashfunc=zlib.crc32)


def comparison() -> list:
    """What decides which documents are copies (a cached decision with another is redone); datasketch's
    permutation scheme is "affine32" from datasketch 2, "legacy" before."""
    return [SHINGLE_WORDS, THRESHOLD, NUM_PERM, PREFIX_CHARS, getattr(_prototype(), "scheme", "legacy")]


@dataclass
class Document:
    """A document to compare: its key in its split and its first PREFIX_CHARS characters."""

    key: int  # the row of a source of documents, or the file index of a text file's rows
    text: str


def join_documents(batches: Iterable[tuple[np.ndarray, list[str | None]]]) -> Iterator[Document]:
    """Documents with text from batches of (keys, texts): consecutive rows with the same key (a text
    file's rows) are joined up to PREFIX_CHARS characters."""
    key, parts, size = None, [], 0
    for keys, texts in batches:
        for row_key, text in zip(keys.tolist(), texts, strict=True):
            if row_key != key:
                if parts:
                    yield Document(key, "".join(parts))
                key, parts, size = row_key, [], 0
            if text and size < PREFIX_CHARS:
                parts.append(text[: PREFIX_CHARS - size])
                size += len(parts[-1])
    if parts:
        yield Document(key, "".join(parts))


@dataclass
class Copy:
    """What a document copies: `kind` "exact" or "near", `of` the index's number of the original."""

    kind: str
    of: int


class DuplicateIndex:
    """Documents seen so far, to tell whether the next one is an exact or a near copy of one (memory:
    a digest, a signature and 14 MinHashLSH entries per document, about 4 KB)."""

    def __init__(self) -> None:
        self._digests: dict[bytes, int] = {}  # digest -> number of the document it was first seen in
        self._lsh = MinHashLSH(threshold=CANDIDATE_THRESHOLD, num_perm=NUM_PERM)
        self._signatures: list[np.ndarray] = []  # item i: the MinHash values of document number i
        self.size = 0  # documents remembered, numbered 0, 1, ... in the order they were added

    def match(self, document: Document, add: bool = True) -> Copy | None:
        """The document `document` copies, or None; `add`: remember a document that copies none (a
        copy is not remembered: its original stands for it)."""
        digest = hashlib.blake2b(" ".join(document.text.split()).encode(), digest_size=16).digest()  # up to whitespace
        if digest in self._digests:
            return Copy("exact", self._digests[digest])
        words = document.text.encode().split()  # its word 5-grams; fewer words: one shingle of them all
        shingles = {b" ".join(words[i : i + SHINGLE_WORDS]) for i in range(max(1, len(words) - SHINGLE_WORDS + 1))}
        signature = _prototype().copy()
        signature.update_batch(shingles if words else set())
        candidates = sorted(self._lsh.query(signature))
        if candidates:
            # MinHash.jaccard's estimate (the share of equal hash values) against each stored signature
            stored = np.stack([self._signatures[c] for c in candidates])  # (candidates, NUM_PERM)
            similar = (stored == signature.hashvalues).mean(axis=1) >= THRESHOLD
            if similar.any():
                return Copy("near", candidates[int(np.argmax(similar))])
        if add:
            self._digests[digest] = self.size
            self._signatures.append(signature.hashvalues)
            self._lsh.insert(self.size, signature, check_duplication=False)
            self.size += 1
        return None


def document_batches(dataset, picked: np.ndarray | None = None) -> Iterator[tuple[np.ndarray, list]]:
    """A split's rows as batches of (keys, texts) for `join_documents`, only the documents `picked` (sorted
    keys) when given; of a text file (keyed by its index) only the rows of its first PREFIX_CHARS."""
    by_document = "doc" in (dataset.column_names or [])
    rows = _prefix_rows(dataset, picked) if by_document else picked
    positions = None
    if rows is not None and isinstance(dataset, datasets.Dataset):
        dataset, positions = dataset.select(rows), rows
    start = 0
    columns = ["doc", "text"] if by_document else ["text"]
    for table in dataset.select_columns(columns).with_format("arrow").iter(batch_size=BATCH_ROWS):
        texts = table.column("text").to_pylist()
        index = positions[start : start + len(texts)] if positions is not None else np.arange(start, start + len(texts))
        start += len(texts)
        keys = table.column("doc").to_numpy().astype(np.int64, copy=False) if by_document else index
        if positions is None and rows is not None:  # a stream's rows, sifted
            wanted = np.isin(index, rows)
            keys, texts = keys[wanted], [text for text, keep in zip(texts, wanted, strict=True) if keep]
        yield keys, texts


def _prefix_rows(dataset, picked: np.ndarray | None) -> np.ndarray:
    """The text-file rows holding each file's first PREFIX_CHARS characters (of the files `picked`)."""
    rows, doc_seen, before, start = [], -1, 0, 0  # before: characters of the current file in rows before
    for table in dataset.select_columns(["doc", "chars"]).with_format("arrow").iter(batch_size=BATCH_ROWS):
        docs, chars = (table.column(c).to_numpy().astype(np.int64, copy=False) for c in ("doc", "chars"))
        wanted = np.isin(docs, picked) if picked is not None else np.ones(len(docs), dtype=bool)
        for offset, (doc, size, keep) in enumerate(zip(docs.tolist(), chars.tolist(), wanted.tolist(), strict=True)):
            if doc != doc_seen:
                doc_seen, before = doc, 0
            if keep and before < PREFIX_CHARS:
                rows.append(start + offset)
            before += size
        start += len(docs)
    return np.asarray(rows, dtype=np.int64)
