"""Serve a model over an OpenAI-compatible HTTP API with an existing engine, until Ctrl-C.

    python scripts/serve.py runs/shakespeare-chat --engine transformers
    python scripts/serve.py runs/shakespeare-chat --engine llama.cpp --port 8080 --threads 2

MODEL is what scripts/chat.py takes: a model folder, a run or checkpoint folder, or ORG/NAME in a
hub folder. What the engine reads is exported once (beside the run in <run>/serving/, else in the
per-user cache) and reused: a stock transformers folder for `transformers serve`, an f32 GGUF for
llama.cpp's server (through xllamacpp). Both stop a reply at the end of its turn (<|im_end|>) and
listen on loopback unless --host says otherwise. Clients send the model name this prints.
"""

from __future__ import annotations

import argparse
import sys

from minigpt.errors import run_cli
from minigpt.hub.model_argument import add_model_arguments

# minigpt.serving.exports.ENGINES, written out so that --help answers before torch is imported.
ENGINES = ("transformers", "llama.cpp")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    parser.add_argument("--engine", choices=ENGINES, required=True, help="the server to run")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: 8000)")
    parser.add_argument(
        "--threads", type=int, default=None, help="CPU threads for inference (default: the engine's)"
    )
    args = parser.parse_args()
    if not 1 <= args.port <= 65535:
        parser.error(f"--port must be between 1 and 65535, got {args.port}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    return args


def main() -> None:
    args = parse_args()
    # Heavy imports, only once the arguments are good.
    from minigpt.chat.session import trained_on_text
    from minigpt.hub.loading import resolve_model
    from minigpt.run_layout import read_run_config
    from minigpt.serving.engines import base_url, check_port_free, serve
    from minigpt.serving.exports import export_for_engine

    location = resolve_model(args.model, hub_dir=args.hub_dir, revision=args.revision)
    check_port_free(args.host, args.port)  # before the export, which can take a while
    files, exported = export_for_engine(location, args.engine)
    if exported:
        print(f"exported {args.model} for {args.engine}: {files.path}", file=sys.stderr)
    data_format = trained_on_text(read_run_config(location.local_dir))
    if data_format is not None:
        print(
            f"note: {args.model} is a base model (trained on text, data.format {data_format}): "
            "/v1/completions continues text; chat replies will not keep to the conversation",
            file=sys.stderr,
        )
    check_port_free(args.host, args.port)
    print(
        f"serving {files.path} with {args.engine} on {base_url(args.host, args.port)} as model "
        f"{files.name!r} (context {files.context} tokens); Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    serve(files, args.host, args.port, args.threads)


if __name__ == "__main__":
    run_cli(main)
