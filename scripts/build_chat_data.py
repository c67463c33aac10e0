"""Build the chat data set shipped in data/shakespeare-chat/ from Tiny Shakespeare's dialogue.

    python scripts/build_chat_data.py [--corpus data/tinyshakespeare.txt] [--output data/shakespeare-chat]

One speech answered by the next speaker's (up to two exchanges), the speakers named in a system
line; the validation file holds the conversations from the base run's validation text (its last
10%), so the same command always writes the same bytes.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from minigpt.errors import run_cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default="data/tinyshakespeare.txt", help="the play text")
    parser.add_argument("--output", default="data/shakespeare-chat", help="folder for train.jsonl, validation.jsonl")
    parser.add_argument("--validation-fraction", type=float, default=0.1, help="as the base run's data.validation_fraction")
    args = parser.parse_args(argv)

    from minigpt.chat.shakespeare_dialogue import build_chat_data

    counts = build_chat_data(Path(args.corpus), Path(args.output), fraction=args.validation_fraction)
    print(", ".join(f"{name}: {count:,} conversations" for name, count in counts.items()) + f" in {args.output}")
    return 0


if __name__ == "__main__":
    run_cli(main)
