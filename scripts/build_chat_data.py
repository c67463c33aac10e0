"""Build the chat data set shipped in data/shakespeare-chat/ from Tiny Shakespeare's dialogue.

    python scripts/build_chat_data.py [--corpus data/tinyshakespeare.txt] [--output data/shakespeare-chat]

A conversation is two speakers taking turns (speech i the user's, speech i + 1 another speaker's,
the assistant's), up to `MAX_TURNS` speeches and `MAX_CHARS` characters, ending on the assistant's,
with a system line naming both; each speech is in one conversation at most. The split is the base
run's (configs/shakespeare.yaml), found by the data stage's own split code: a conversation that
straddles the cut is left out, so the base model never trained on a validation conversation, and
the same command always writes the same bytes.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from minigpt.atomic import atomic_write_file
from minigpt.errors import DataError, run_cli

MAX_TURNS = 4  # two short exchanges fit the default run's 128-token context
MAX_CHARS = 240  # with the system line and role headers, about that context: most are seen whole
SYSTEM_LINE = "A scene from Shakespeare. You are {assistant}, speaking with {user}."


@dataclass(frozen=True)
class Speech:
    speaker: str  # the name before the colon, e.g. "First Citizen"
    text: str  # the speech's lines, joined by newlines
    start: int  # character offset of the speech's first character (its name) in the play text
    end: int  # character offset just past its last character


def parse_speeches(text: str) -> list[Speech]:
    """The play's speeches in order; a paragraph whose first line is not `NAME:` is skipped."""
    speeches, offset = [], 0
    for paragraph in text.split("\n\n"):
        start, offset = offset, offset + len(paragraph) + 2
        head, _, body = paragraph.strip("\n").partition("\n")
        lead = len(paragraph) - len(paragraph.lstrip("\n"))  # blank lines before the name
        if head.endswith(":") and body.strip():
            speeches.append(Speech(head[:-1].strip(), body.strip(), start + lead, start + len(paragraph)))
    return speeches


def dialogues(speeches: list[Speech], max_turns: int = MAX_TURNS, max_chars: int = MAX_CHARS) -> list[list[Speech]]:
    """Runs of speeches alternating between two speakers, 2 to `max_turns` long, even in length
    (they end on the second speaker's: the assistant answers last), of `max_chars` characters of
    speech at most; each speech in one run at most."""
    runs, i = [], 0
    while i + 1 < len(speeches):
        user, assistant = speeches[i].speaker, speeches[i + 1].speaker
        size = len(speeches[i].text) + len(speeches[i + 1].text)
        if user == assistant or size > max_chars:
            i += 1
            continue
        run = speeches[i : i + 2]
        while len(run) + 2 <= max_turns and i + len(run) + 1 < len(speeches):
            nxt, after = speeches[i + len(run)], speeches[i + len(run) + 1]
            size += len(nxt.text) + len(after.text)
            if (nxt.speaker, after.speaker) != (user, assistant) or size > max_chars:
                break
            run += [nxt, after]
        runs.append(run)
        i += len(run)
    return runs


def conversation(run: list[Speech]) -> dict:
    """One run as `{"messages": [system, user, assistant, ...]}`."""
    user, assistant = run[0].speaker, run[1].speaker
    messages = [{"role": "system", "content": SYSTEM_LINE.format(user=user, assistant=assistant)}]
    for turn, speech in enumerate(run):
        messages.append({"role": "user" if turn % 2 == 0 else "assistant", "content": speech.text})
    return {"messages": messages}


def validation_start(corpus: Path, fraction: float, split: str) -> int:
    """Character offset where the base run's validation text starts, by the data stage's split code."""
    from minigpt.data.raw_corpus import (  # datasets: after the arguments are parsed
        iter_texts,
        load_raw_corpus,
    )
    from minigpt.data.settings import DataSettings
    from minigpt.data.sources import find_sources

    with tempfile.TemporaryDirectory() as cache:  # the split's Arrow copy: not worth keeping
        settings = DataSettings(
            train_files=[str(corpus)],
            validation_fraction=fraction,
            validation_split=split,
            cache_dir=cache,
            show_progress=False,
        )
        raw = load_raw_corpus(find_sources(settings))
        validation = "".join(iter_texts(raw.validation))
    text = corpus.read_text(encoding="utf-8")
    if not text.endswith(validation):
        raise DataError(f"{corpus}: the validation split is not a tail of the text (validation_split={split!r})")
    return len(text) - len(validation)


def build_chat_data(
    corpus: Path, output_dir: Path, fraction: float = 0.1, split: str = "tail", max_turns: int = MAX_TURNS
) -> dict[str, int]:
    """Write `train.jsonl` and `validation.jsonl` into `output_dir` (each atomically); returns the
    number of conversations per file (and of those left out for straddling the cut)."""
    text = corpus.read_text(encoding="utf-8")
    cut = validation_start(corpus, fraction, split)
    sides: dict[str, list[dict]] = {"train": [], "validation": []}
    straddling = 0
    for run in dialogues(parse_speeches(text), max_turns):
        if run[-1].end <= cut:
            sides["train"].append(conversation(run))
        elif run[0].start >= cut:
            sides["validation"].append(conversation(run))
        else:
            straddling += 1
    for name, rows in sides.items():
        with atomic_write_file(output_dir / f"{name}.jsonl", encoding="utf-8", newline="\n") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return {"train": len(sides["train"]), "validation": len(sides["validation"]), "straddling the cut, left out": straddling}


__all__ = ["build_chat_data", "conversation", "dialogues", "parse_speeches", "validation_start"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="data/tinyshakespeare.txt", help="the play text")
    parser.add_argument("--output", default="data/shakespeare-chat", help="folder for train.jsonl, validation.jsonl")
    parser.add_argument("--validation-fraction", type=float, default=0.1, help="as the base run's data.validation_fraction")
    args = parser.parse_args(argv)

    counts = build_chat_data(Path(args.corpus), Path(args.output), fraction=args.validation_fraction)
    print(", ".join(f"{name}: {count:,} conversations" for name, count in counts.items()) + f" in {args.output}")
    return 0


if __name__ == "__main__":
    run_cli(main)
