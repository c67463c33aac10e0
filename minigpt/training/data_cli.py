"""Command-line options shared by scripts/train_tokenizer.py and scripts/prepare_data.py: a run config
(default configs/shakespeare.yaml), then `section.key=value` overrides, then the direct flags."""

from __future__ import annotations

import argparse
from pathlib import Path

from .run_config import REPO_CONFIG_DIR, load_run_config
from .settings import RunConfig

DEFAULT_CONFIG = REPO_CONFIG_DIR / "shakespeare.yaml"

# flag -> dotted key: scalar flags become overrides, typed and checked by the config schema
SCALAR_FLAGS = {
    "vocab_size": "tokenizer.vocab_size", "min_frequency": "tokenizer.min_frequency", "out": "tokenizer.path",
    "tokenizer": "tokenizer.path", "block_size": "data.block_size", "format": "data.format",
    "text_field": "data.text_field", "validation_fraction": "data.validation_fraction",
    "num_proc": "data.num_proc", "cache_dir": "data.cache_dir",
}


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """CONFIG, overrides and the data flags both scripts take."""
    parser.add_argument("items", nargs="*", metavar="[CONFIG] [section.key=value ...]",
                        help="run config YAML (default configs/shakespeare.yaml), then overrides")
    parser.add_argument("--data", nargs="+", metavar="PATH", help="training text: files, folders or globs")
    parser.add_argument("--validation", nargs="+", metavar="PATH", help="validation text (default: split off --data)")
    parser.add_argument("--format", help="text, json, parquet or arrow (default: from the file names)")
    parser.add_argument("--text-field", help="field holding the text in json/parquet/arrow data")
    parser.add_argument("--validation-fraction", type=float, help="share of the text held out (default 0.1)")
    parser.add_argument("--vocab-size", type=int, help="tokenizer vocabulary size")
    parser.add_argument("--cache-dir", help="where datasets' Arrow files and prepared blocks are cached")
    parser.add_argument("--num-proc", type=int, help="tokenizing processes (0 = one per CPU core)")


def load_settings(args: argparse.Namespace, parser: argparse.ArgumentParser) -> RunConfig:
    """The run config named by `args`, with overrides and direct flags applied and validated."""
    configs = [item for item in args.items if "=" not in item]
    if len(configs) > 1:
        parser.error(f"one config file at most, got {', '.join(configs)}")
    overrides = [item for item in args.items if "=" in item]
    for name, dotted in SCALAR_FLAGS.items():
        value = getattr(args, name, None)
        if value is not None:
            overrides.append(f"{dotted}={value}")
    if getattr(args, "streaming", False):
        overrides.append("data.streaming=true")
    run = load_run_config(Path(configs[0]) if configs else DEFAULT_CONFIG, overrides)
    # Paths are set directly (a path may hold characters YAML would read otherwise).
    if args.data:
        run.data.train_files = list(args.data)
    if args.validation:
        run.data.validation_files = list(args.validation)
    run.data.validate()
    return run
