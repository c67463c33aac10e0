"""Tokenize a corpus and pack it into cached blocks of block_size tokens.

    python scripts/prepare_data.py [CONFIG] [section.key=value ...] [--data PATH ...]
        [--validation PATH ...] [--block-size N] [--vocab-size N] [--tokenizer DIR] [--streaming]

Settings come from CONFIG (default configs/shakespeare.yaml), then overrides, then flags. The
tokenizer at tokenizer.path is used if it was trained on this data with these settings (else the
script stops with one line: give another --tokenizer DIR), or trained on the training split first.
A second run with the same inputs and settings reuses the cached blocks; it prints where they live,
and the corpus report: documents, bytes and tokens per split, duplicates, validation copies of training.
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
    parser.add_argument("--block-size", type=int, help="tokens per block (<= model.max_position_embeddings)")
    parser.add_argument("--tokenizer", help="tokenizer folder (tokenizer.path); trained there if missing")
    parser.add_argument(
        "--streaming", action="store_true", help="read the sources lazily (no raw Arrow copy)"
    )
    args = parser.parse_args(argv)
    run = load_settings(args, parser)
    from minigpt.data.sources import find_sources

    sources = find_sources(run.data)  # a bad file is one line here, before anything heavy is imported

    from minigpt.data.corpus import prepare_corpus
    from minigpt.data.tokenizer import load_or_train_tokenizer

    tokenizer = load_or_train_tokenizer(run.tokenizer, sources)
    corpus = prepare_corpus(sources, tokenizer)
    print(corpus.describe())
    if corpus.report is not None:  # sizes, duplicates, validation copies of training (no plan: no run)
        print("\n".join(corpus.report.lines()))
    return 0


if __name__ == "__main__":
    run_cli(main)
