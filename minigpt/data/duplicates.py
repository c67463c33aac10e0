"""Exact and near-duplicate documents: what the corpus report counts and `data.dedup` removes.

Exact: the same text once its whitespace is normalised (runs of spaces, tabs and newlines made one
space), by a BLAKE2b digest. Near: datasketch's MinHash of the set of the document's word 5-grams,
Jaccard similarity >= 0.8, the shingles and threshold of Lee et al. 2022 ("Deduplicating Training
Data Makes Language Models Better"). One changed word removes up to five shingles: a 60-word
document with a word changed in its middle is at Jaccard 0.84, with its last word changed at 0.97,
with three changed apart at 0.58 (no near copy); a 400-word document with three changed is at 0.93.

Candidates come from datasketch's MinHashLSH built for Jaccard 0.7 (14 bands of 9 values), and each
is confirmed by the MinHash estimate of its Jaccard similarity (datasketch's own advice: "filter
again with MinHash.jaccard"); LSH alone tuned for 0.8 (9 bands of 13) finds only about 60% of the
pairs at 0.84. The estimate has a standard error of 0.035 at 0.8, so the threshold is soft: a copy
at 0.84 is found about 85% of the time, at 0.81 half the time, from 0.9 always, at 0.7 never. A
document is compared by its first PREFIX_CHARS characters (two that share them are exact copies),
so one huge file costs what a short one does.

Only what is needed is written by hand: the digest, and the shingles fed to datasketch.
"""

from __future__ import annotations

import functools
import hashlib
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
from datasketch import MinHash, MinHashLSH

SHINGLE_WORDS = 5  # words per shingle
THRESHOLD = 0.8  # estimated Jaccard similarity of the shingle sets at which a document is a near duplicate
CANDIDATE_THRESHOLD = 0.7  # what MinHashLSH is tuned for: recall at THRESHOLD, the estimate confirms
NUM_PERM = 128  # MinHash permutations: the estimate's standard error at 0.8 is 0.035
MINHASH_SEED = 1  # the permutations: the same on every machine, so dedup removes the same documents
PREFIX_CHARS = 20_000  # characters of a document compared, at most


def normalized_digest(text: str) -> bytes:
    """16 bytes identifying `text` up to its whitespace."""
    return hashlib.blake2b(" ".join(text.split()).encode("utf-8"), digest_size=16).digest()


def word_shingles(text: str) -> set[bytes]:
    """The document's word 5-grams (UTF-8, words split at ASCII whitespace); a document of fewer
    words is one shingle of them all, an empty one has none."""
    words = text.encode("utf-8").split()
    if len(words) < SHINGLE_WORDS:
        return {b" ".join(words)} if words else set()
    # the i-th word of each shingle; the shorter lists end the zip where the last shingle ends
    return set(map(b" ".join, zip(*(words[i:] for i in range(SHINGLE_WORDS)), strict=False)))


@functools.cache
def _prototype() -> MinHash:
    """An empty MinHash whose copies every document gets: its permutations, drawn from MINHASH_SEED,
    are drawn once rather than per document. The shingles' 32-bit hash is CRC-32 (C speed; datasketch
    2 premixes it with MurmurHash3's finalizer before permuting) instead of SHA-1, at half the time."""
    return MinHash(num_perm=NUM_PERM, seed=MINHASH_SEED, hashfunc=zlib.crc32)


def minhash(text: str) -> MinHash:
    """datasketch's MinHash of `text`'s word 5-grams."""
    signature = _prototype().copy()
    signature.update_batch(word_shingles(text))
    return signature


def minhash_scheme() -> str:
    """datasketch's permutation scheme ("affine32" from datasketch 2, "legacy" before): signatures
    of one scheme differ from the other's, so what dedup removed is cached per scheme."""
    return getattr(_prototype(), "scheme", "legacy")


@dataclass
class Document:
    """A document to compare: its key in its split and its first PREFIX_CHARS characters."""

    key: int  # the row of a source of documents, or the file index of a text file's rows
    text: str


def join_documents(batches: Iterable[tuple[np.ndarray, list[str | None]]]) -> Iterator[Document]:
    """Documents from batches of (keys, texts) of a split's rows in order: consecutive rows with the
    same key are pieces of one document (a text file's rows), joined up to PREFIX_CHARS characters.
    Documents without text are left out."""
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
    """Documents seen so far, to tell whether the next one is an exact or a near copy of one.

    Memory: a digest per document, and for each one that is not an exact copy its signature
    (NUM_PERM x 4 bytes) and its 14 entries in MinHashLSH's in-memory tables (about 4 KB in all).
    """

    def __init__(self) -> None:
        self._digests: dict[bytes, int] = {}  # digest -> number of the document it was first seen in
        self._lsh = MinHashLSH(threshold=CANDIDATE_THRESHOLD, num_perm=NUM_PERM)
        dtype = _prototype().hashvalues.dtype  # uint32 (datasketch 2), uint64 before
        self._signatures = np.empty((1024, NUM_PERM), dtype=dtype)  # row i: document number i
        self.size = 0  # documents remembered, numbered 0, 1, ... in the order they were added

    def match(self, document: Document, add: bool = True) -> Copy | None:
        """The document `document` copies, or None; `add`: remember a document that copies none (a
        copy is not remembered: its original stands for it)."""
        digest = normalized_digest(document.text)
        if digest in self._digests:
            return Copy("exact", self._digests[digest])
        signature = minhash(document.text)
        original = self._near(signature)
        if original is not None:
            return Copy("near", original)
        if add:
            self._digests[digest] = self.size
            self._insert(signature)
        return None

    def _near(self, signature: MinHash) -> int | None:
        candidates = sorted(self._lsh.query(signature))
        if not candidates:
            return None
        # MinHash.jaccard's estimate (the share of equal hash values) against each stored signature
        similar = (self._signatures[candidates] == signature.hashvalues).mean(axis=1) >= THRESHOLD
        return candidates[int(np.argmax(similar))] if similar.any() else None

    def _insert(self, signature: MinHash) -> None:
        if self.size == len(self._signatures):
            self._signatures = np.concatenate([self._signatures, np.empty_like(self._signatures)])
        self._signatures[self.size] = signature.hashvalues
        self._lsh.insert(self.size, signature, check_duplication=False)
        self.size += 1


__all__ = ["Copy", "Document", "DuplicateIndex", "join_documents", "minhash", "minhash_scheme", "normalized_digest", "word_shingles"]
