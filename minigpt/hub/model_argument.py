"""The MODEL argument of every script that loads a model, with --revision and --hub-dir: argparse
only, so `--help` answers at once; `loading.resolve_model` turns it into a model."""

from __future__ import annotations

import argparse


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """MODEL (a model, run or checkpoint folder, or ORG/NAME), --revision and --hub-dir."""
    parser.add_argument("model", help="model folder, run or checkpoint folder, or ORG/NAME in --hub-dir")
    parser.add_argument("--revision", default=None, help="branch, tag or commit of a repo id (default: main)")
    parser.add_argument("--hub-dir", default=None, help="hub folder for repo ids (default: $HF_HUB_CACHE, else ./hub)")
