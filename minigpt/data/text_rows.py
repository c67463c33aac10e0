"""Text files as rows of `datasets`: a file is read into rows of up to PIECE_CHARS characters cut
after a line end, each counted as it is read (docs/data.md, "Formats")."""

from __future__ import annotations

from collections.abc import Iterator

import datasets

from .sources import INVALID_CHARS

PIECE_CHARS = 1 << 16  # characters per row at most (twice that where a line runs on): bounded batches
LOADER_VERSION = 1  # bump when the rows made from the same files change (part of the cache fingerprint)
WRITER_BATCH_ROWS = 64  # rows a loading process holds before writing (datasets' 1000 x 128K characters is too many)
BATCH_ROWS = 10_000  # rows of an Arrow batch read back (memory: one batch)


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


def read_text_rows(files: list[tuple[int, str]], piece_chars: int = PIECE_CHARS) -> Iterator[dict]:
    """`Dataset.from_generator`'s generator: the rows of `files`, (document index, path) pairs, in order."""
    for doc, path in files:
        previous = None
        # text mode: universal newlines (a CRLF split across two reads is still one LF)
        with open(path, encoding="utf-8", errors="replace") as handle:
            while piece := handle.read(piece_chars):
                if not piece.endswith("\n"):
                    piece += handle.readline(piece_chars)  # finish the line (a long one only partly)
                if previous is not None:
                    yield text_row(previous, doc, end=False)
                previous = piece
        if previous is not None:  # an empty file gives no row
            yield text_row(previous, doc, end=True)


def text_row(text: str, doc: int, end: bool) -> dict:
    invalid = sum(text.count(bad) for bad in INVALID_CHARS)
    return {"text": text, "doc": doc, "end": end, "bytes": len(text.encode()), "chars": len(text), "invalid": invalid}


def load_text_files(
    paths: list[str], cache_dir: str, key: str, num_proc: int, streaming: bool = False
) -> datasets.Dataset | datasets.IterableDataset:
    """The rows of the text files `paths` (document i = paths[i]): an Arrow copy under `cache_dir`,
    made by `num_proc` processes and reused by `key` (the files' content), or a stream."""
    files = [(doc, str(path)) for doc, path in enumerate(paths)]
    kwargs = dict(features=text_features(), gen_kwargs={"files": files, "piece_chars": PIECE_CHARS})
    if streaming:
        return datasets.IterableDataset.from_generator(read_text_rows, **kwargs)
    processes = min(num_proc, len(files))
    return datasets.Dataset.from_generator(
        read_text_rows,
        cache_dir=cache_dir,
        num_proc=processes if processes > 1 else None,
        fingerprint=f"minigpt-text-{LOADER_VERSION}-{PIECE_CHARS}-{key}",
        writer_batch_size=WRITER_BATCH_ROWS,
        **kwargs,
    )
