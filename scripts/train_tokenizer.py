"""Train the byte-level BPE tokenizer of a run on its training split and save it.

    python scripts/train_tokenizer.py [CONFIG] [section.key=value ...] [--data PATH ...]
        [--vocab-size N] [--min-frequency N] [--out DIR] [--retrain]

Settings come from CONFIG (default configs/shakespeare.yaml), then overrides, then flags. An
existing tokenizer at the output folder is kept: it is used if it was trained on this data with
these settings, else the script stops with one line (train a new one elsewhere with --out DIR).
--retrain replaces it, atomically; runs trained with the old one then no longer match it.
"""

from __future__ import annotations

import argparse

from minigpt.errors import run_cli


def main(argv: list[str] | None = None) -> int:
    from minigpt.training.data_cli import add_common_arguments, load_settings

    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser)
    parser.add_argument("--min-frequency", type=int, help="a pair must occur this often to be merged")
    parser.add_argument("--out", help="folder to save the tokenizer in (tokenizer.path)")
    parser.add_argument(
        "--retrain",
        action="store_true",
        help="replace the tokenizer at --out (runs trained with it no longer match it)",
    )
    args = parser.parse_args(argv)
    run = load_settings(args, parser)
    from minigpt.data.sources import find_sources

    sources = find_sources(run.data)  # a bad file is one line here, before anything heavy is imported

    from minigpt.data.tokenizer import load_or_train_tokenizer

    load_or_train_tokenizer(run.tokenizer, sources, retrain=args.retrain)  # prints what it trained or found
    return 0


if __name__ == "__main__":
    run_cli(main)
