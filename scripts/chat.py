"""Chat with a model fine-tuned on conversations, in the terminal; replies stream as they are written.

    python scripts/chat.py runs/chat --system "You are Juliet."
    python scripts/chat.py me/shakespeare-chat --hub-dir hub --revision v1 --temperature 0

MODEL is a model folder, a run or checkpoint folder, or ORG/NAME in a hub folder, as for
scripts/generate.py; it must be a chat model, fine-tuned on conversations (configs/chat.yaml): a base
model (its run trained on text) is refused in one line. /reset forgets the conversation, /quit or
Ctrl-D ends it, Ctrl-C stops a reply (at the prompt: ends the chat). Settings not given default to
the run's sample settings, then to the model's generation_config.json; with --seed, reply n of a
conversation is drawn with seed + n.
"""

from __future__ import annotations

import argparse
import sys

from minigpt.errors import run_cli
from minigpt.hub.model_argument import add_model_arguments

# minigpt.generation.DECODINGS, written out (as in scripts/generate.py) so that --help answers
# before torch and transformers are imported.
DECODINGS = ("dynamic", "static", "compiled")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_model_arguments(parser)
    parser.add_argument("--system", default=None, help="system prompt: who the model is, how it answers")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="reply limit in tokens")
    parser.add_argument("--temperature", type=float, default=None, help="0 for greedy decoding")
    parser.add_argument(
        "--top-k", type=int, default=None, help="sample from the k most likely tokens (0: all)"
    )
    parser.add_argument("--top-p", type=float, default=None)
    parser.add_argument("--seed", type=int, default=None, help="reply n uses seed + n (default: random)")
    parser.add_argument(
        "--decoding", choices=DECODINGS, default="dynamic", help="KV cache, as scripts/generate.py"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # Heavy imports, only once the arguments are good.
    from minigpt.chat.session import ChatSession, require_chat_model
    from minigpt.chat.terminal import HELP, chat_in_terminal
    from minigpt.generation import SamplingSettings
    from minigpt.hub.loading import load_model, load_tokenizer, resolve_model
    from minigpt.model import register_auto_classes
    from minigpt.run_layout import read_run_config

    settings = SamplingSettings(
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        decoding=args.decoding,
    )
    settings.validate()
    location = resolve_model(args.model, hub_dir=args.hub_dir, revision=args.revision)
    # AutoTokenizer reads the model's config: with MiniGPT registered it neither asks "run the custom
    # code? [y/N]" (which would eat the chat's input lines) nor warns of a config of type "" (#48).
    register_auto_classes()
    tokenizer = load_tokenizer(location)
    run_config = read_run_config(location.local_dir)
    require_chat_model(tokenizer, run_config, args.model)  # a base model is refused before its weights load
    session = ChatSession(  # a reply limit that leaves no room for a message is refused here, once
        load_model(location),
        tokenizer,
        settings,
        system_prompt=args.system,
        run_config=run_config,
        name=args.model,
    )
    print(
        f"chat with {args.model} (context {session.context} tokens, replies up to {session.reply_limit}): {HELP}",
        file=sys.stderr,
        flush=True,
    )
    if sys.stdin.isatty():
        import readline  # noqa: F401  (line editing and history for input())
    chat_in_terminal(session)


if __name__ == "__main__":
    run_cli(main)
