"""Export a trained model to a stock transformers architecture (no remote code) and/or to GGUF.

    python scripts/export.py runs/shakespeare --output exported/shakespeare-llama
    python scripts/export.py runs/shakespeare --to gpt_neox --output exported/neox --gguf shakespeare.gguf
    python scripts/export.py me/shakespeare-gpt --hub-dir hub --revision v1 --gguf model-q8.gguf --dtype q8_0

MODEL is what scripts/generate.py takes: a model folder, a run or checkpoint folder, or ORG/NAME
in a hub folder. `--to auto` picks the most widely supported stock architecture that computes the
model exactly (Llama, then GPT-2, GPT-NeoX, Qwen3, Starcoder2); an option none has is one error
line, and nothing is written. Outputs appear whole or not at all.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from minigpt.errors import run_cli
from minigpt.export.targets import GGUF_DTYPES, TARGETS
from minigpt.hub.model_argument import add_model_arguments


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    parser.add_argument("--to", choices=TARGETS, default="auto", help="stock architecture (default: auto)")
    parser.add_argument("--output", default=None, help="folder to write the stock transformers model to")
    parser.add_argument("--gguf", default=None, help="GGUF file to write for llama.cpp")
    parser.add_argument("--dtype", choices=GGUF_DTYPES, default="f32", help="GGUF weight type (default: f32)")
    parser.add_argument(
        "--force", action="store_true", help="replace an existing --output folder or --gguf file"
    )
    args = parser.parse_args()
    if args.output is None and args.gguf is None:
        parser.error("nothing to write: pass --output DIR, --gguf FILE or both")
    return args


def main() -> None:
    args = parse_args()
    from minigpt.export.errors import ExportError

    for target in (args.output, args.gguf):
        if target is not None and Path(target).exists() and not args.force:
            raise ExportError(f"{target} exists; pass --force to replace it")

    from minigpt.export.exporting import to_stock_model, write_stock_folder
    from minigpt.hub.loading import load_model, load_tokenizer, resolve_model

    location = resolve_model(args.model, hub_dir=args.hub_dir, revision=args.revision)
    model, tokenizer = load_model(location, attn_implementation="eager"), load_tokenizer(location)
    # Every refusal comes before --output is written: the stock conversion (checked on a batch) first,
    # then the GGUF file, whose writer refuses before it writes (atomically) and so stops --output too.
    export = to_stock_model(model, args.to) if args.output is not None else None
    if args.gguf is not None:
        from minigpt.export.gguf_export import write_gguf

        arch = write_gguf(model, tokenizer, args.gguf, dtype=args.dtype)
        print(f"wrote {args.gguf}: GGUF arch {arch}, {args.dtype}")
    if export is not None:
        source_name = location.name_or_path if location.is_repo else Path(location.name_or_path).name
        write_stock_folder(export, tokenizer, args.output, model.generation_config, source_name)
        print(
            f"wrote {args.output}: {type(export.model).__name__}, loads without remote code "
            f"(max logit difference {export.max_logit_difference:.1e})"
        )


if __name__ == "__main__":
    run_cli(main)
