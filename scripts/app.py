"""A web page to train a model, watch it learn, stop and resume it, generate text from it and chat with it.

    pip install -e ".[ui]"
    python scripts/app.py                       # http://127.0.0.1:7860, this machine only
    python scripts/app.py --host 0.0.0.0        # other machines too (a warning: the app has no login)

Ctrl-C stops a training run with a checkpoint (as in scripts/train.py), then quits.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from minigpt.errors import run_cli


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from minigpt.app.server import DEFAULT_HOST, DEFAULT_PORT

    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}: this machine only)",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=Path("runs"),
        help="folder whose runs the Generate and Chat tabs list (default runs)",
    )
    parser.add_argument(
        "--config-dir",
        type=Path,
        default=None,
        help="folder of run configs to offer (default: the repository's configs/)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    from minigpt.app.server import serve

    serve(host=args.host, port=args.port, config_dir=args.config_dir, runs_dir=args.runs_dir)


if __name__ == "__main__":
    run_cli(main)
