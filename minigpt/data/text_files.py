"""Text files as rows of `datasets`: a file's text in pieces of at most about PIECE_CHARS characters.

One row per line (`datasets`' "text" loader, sample_by="line") makes millions of rows for a few
hundred MB and tokenizes every line apart; one row per file (sample_by="document") reads a 10 GB
file into one string; "paragraph" drops the blank lines between paragraphs. So text files are read
here, by a generator that `Dataset.from_generator` runs (in `num_proc` processes, cached in Arrow,
or lazily for streaming): a file up to PIECE_CHARS characters is one row, a longer one several rows
cut after a line end (a line longer than PIECE_CHARS is cut inside). Joined in order, the rows give
back each file (universal newlines: CRLF and CR become LF, as a text-mode read and `datasets`' text
loader make them; undecodable bytes become U+FFFD).

Each row also carries the counts the checks and the split need, taken as the text is read (no
second pass over the text): its document (file index), whether it ends that document, its UTF-8
bytes, characters and undecodable or NUL characters.
"""

from __future__ import annotations

from collections.abc import Iterator

import datasets

PIECE_CHARS = 1 << 16  # characters per row at most (twice that where a line runs on): bounded batches
INVALID_CHARS = ("\ufffd", "\x00")  # what undecodable bytes become (errors="replace") and binary's NULs
LOADER_VERSION = 1  # bump when the rows made from the same files change (part of the cache fingerprint)
# Rows a loading process holds before writing them to Arrow (datasets' default is 1000): at most
# 64 x 2 x PIECE_CHARS characters, so a folder of large files does not grow its batches.
WRITER_BATCH_ROWS = 64


def text_features() -> datasets.Features:
    """The columns of a text file's rows."""
    return datasets.Features(
        {
            "text": datasets.Value("string"),
            "doc": datasets.Value("int64"),  # index of the file among the source's files
            "end": datasets.Value("bool"),  # the last row of its file: an EOS follows it
            "bytes": datasets.Value("int64"),  # UTF-8 bytes of `text`
            "chars": datasets.Value("int64"),
            "invalid": datasets.Value("int64"),  # U+FFFD and NUL characters in `text`
        }
    )


def _pieces(path: str, piece_chars: int) -> Iterator[str]:
    """The text of `path` in pieces of about `piece_chars` characters, each ending a line when it can."""
    # Text mode: universal newlines, the same as datasets' text loader (and a CRLF split across
    # two reads is still one LF); errors="replace" keeps a file with a few bad bytes readable.
    with open(path, encoding="utf-8", errors="replace") as handle:
        while piece := handle.read(piece_chars):
            if not piece.endswith("\n"):
                piece += handle.readline(piece_chars)  # finish the line (a long one only partly)
            yield piece


def read_text_rows(files: list[tuple[int, str]], piece_chars: int = PIECE_CHARS) -> Iterator[dict]:
    """`Dataset.from_generator`'s generator: the rows of `files`, (document index, path) pairs, in order."""
    for doc, path in files:
        previous = None
        for piece in _pieces(path, piece_chars):
            if previous is not None:
                yield _row(previous, doc, end=False)
            previous = piece
        if previous is not None:  # an empty file gives no row
            yield _row(previous, doc, end=True)


def _row(text: str, doc: int, end: bool) -> dict:
    invalid = sum(text.count(bad) for bad in INVALID_CHARS)
    return {"text": text, "doc": doc, "end": end, "bytes": len(text.encode("utf-8")), "chars": len(text), "invalid": invalid}


def load_text_files(
    paths: list[str],
    cache_dir: str,
    fingerprint: str,
    num_proc: int,
    streaming: bool = False,
) -> datasets.Dataset | datasets.IterableDataset:
    """The rows of the text files `paths` (document i = paths[i]): an Arrow copy under `cache_dir`,
    made by `num_proc` processes and reused by `fingerprint` (the files' content), or a stream."""
    files = [(doc, str(path)) for doc, path in enumerate(paths)]
    kwargs = dict(features=text_features(), gen_kwargs={"files": files, "piece_chars": PIECE_CHARS})
    if streaming:
        return datasets.IterableDataset.from_generator(read_text_rows, **kwargs)
    processes = min(num_proc, len(files))
    return datasets.Dataset.from_generator(
        read_text_rows,
        cache_dir=cache_dir,
        num_proc=processes if processes > 1 else None,
        fingerprint=f"minigpt-text-{LOADER_VERSION}-{PIECE_CHARS}-{fingerprint}",
        writer_batch_size=WRITER_BATCH_ROWS,
        **kwargs,
    )


__all__ = ["INVALID_CHARS", "PIECE_CHARS", "load_text_files", "read_text_rows", "text_features"]
