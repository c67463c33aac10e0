"""Publish a trained model to a local hub folder, or list a repo's history.

    python scripts/push.py runs/shakespeare --repo-id me/shakespeare-gpt --hub-dir hub --tag v1
    python scripts/push.py --log --repo-id me/shakespeare-gpt --hub-dir hub

SOURCE is a run folder (its final/ model), a checkpoint folder or a model folder. The hub folder
is laid out like huggingface_hub's cache, so with HF_HUB_CACHE=<hub folder> HF_HUB_OFFLINE=1,
`from_pretrained("me/shakespeare-gpt", revision="v1")` loads it anywhere. The printed snapshot
folder is what `huggingface_hub.upload_folder` sends to the real hub.

--format auto (the default) publishes the stock transformers architecture that computes the model
exactly (GPT-2, Llama, ...: it loads everywhere, no remote code), or MiniGPT's own form with its
source files (trust_remote_code=True) when no stock one does; --format stock|minigpt forces one.
--gguf DTYPE puts a GGUF file for llama.cpp beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from minigpt.errors import run_cli
from minigpt.export.targets import GGUF_DTYPES

PUBLISH_FORMS = ("auto", "stock", "minigpt")  # what minigpt.hub.publishing.collect_files takes


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("source", nargs="?", help="run folder, checkpoint folder or model folder")
    parser.add_argument("--repo-id", required=True, help="ORG/NAME")
    parser.add_argument("--hub-dir", default=None, help="hub folder (default: $HF_HUB_CACHE, else ./hub)")
    parser.add_argument("--tag", default=None, help="tag the new commit (tags never move)")
    parser.add_argument("--message", default=None, help="commit message")
    parser.add_argument("--license", default="apache-2.0", help="license id for the model card")
    parser.add_argument(
        "--format", choices=PUBLISH_FORMS, default="auto", help="stock architecture or MiniGPT's (default: auto)"
    )
    parser.add_argument("--gguf", choices=GGUF_DTYPES, default=None, help="also publish a GGUF of this type")
    parser.add_argument("--log", action="store_true", help="list the repo's commits instead of pushing")
    args = parser.parse_args()
    if args.source is None and not args.log:
        parser.error("SOURCE is required (or pass --log)")
    return args


def main() -> None:
    args = parse_args()
    from minigpt.hub import store as hub  # heavy: only once the arguments are good
    from minigpt.hub.publishing import publish

    hub_dir = args.hub_dir or hub.default_hub_dir()
    if args.log:
        for commit in hub.history(hub_dir, args.repo_id):
            refs = f" ({', '.join(commit.refs)})" if commit.refs else ""
            print(f"{commit.commit_id}{refs}  {commit.created_at}  {commit.message}")
        return
    commit = publish(
        args.source,
        args.repo_id,
        hub_dir,
        tag=args.tag,
        message=args.message,
        license=args.license,
        form=args.format,
        gguf_dtype=args.gguf,
    )
    remote_code = any(name.endswith(".py") for name in commit.files)
    form = "MiniGPT's own form, remote code" if remote_code else "stock architecture, no remote code"
    if commit.created:
        print(f"committed {commit.commit_id} to {args.repo_id} ({len(commit.files)} files; {form})")
    else:
        print(f"no changes since {commit.commit_id}; main not moved")
    source = Path(args.source)
    if commit.created and source.name.startswith("checkpoint-"):
        final = source.parent / "final"
        newer = f", not the run's final model in {final}" if final.is_dir() else ""
        print(f"note: main now points to {source.name}, a checkpoint{newer}", file=sys.stderr)
    if commit.refs:
        print(f"refs: {', '.join(commit.refs)}")
    print(f"snapshot: {commit.snapshot_dir(hub_dir, args.repo_id)}")


if __name__ == "__main__":
    run_cli(main)
