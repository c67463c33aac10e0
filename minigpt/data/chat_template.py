"""The chat format every MiniGPT tokenizer carries: ChatML role tokens and its Jinja template, the
assistant's turns inside `{% generation %}` markers so `return_assistant_tokens_mask` marks them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for annotations: run configs load without transformers
    from transformers import PreTrainedTokenizerBase

IM_START = "<|im_start|>"  # opens a turn, followed by the role and a newline
IM_END = "<|im_end|>"  # ends a turn: the end-of-turn token generation stops at
CHAT_TOKENS = (IM_START, IM_END)
ROLES = ("system", "user", "assistant")

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] not in ['system', 'user', 'assistant'] -%}"
    "{{- raise_exception('unknown role ' + message['role'] + ': use system, user or assistant') -}}"
    "{%- endif -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\n' -}}"
    "{%- generation -%}"
    "{{- message['content'] + '<|im_end|>' -}}"
    "{%- endgeneration -%}"
    "{{- '\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\n' -}}"
    "{%- endif -%}"
)

_GENERATION_MARKER = re.compile(r"\{%-?\s*(end)?generation\s*-?%\}")


def template_without_generation_markers(template: str = CHAT_TEMPLATE) -> str:
    """`template` without its `{% generation %}` tags, for runtimes that do not know them (llama.cpp)."""
    return _GENERATION_MARKER.sub("", template)


def end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int | None:
    """The id of `IM_END` in `tokenizer`, or None when it has no chat tokens."""
    return tokenizer.get_vocab().get(IM_END)


def stop_token_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The ids generation stops at: the end-of-text token, and `IM_END` when the tokenizer has it."""
    ids = [tokenizer.eos_token_id, end_of_turn_id(tokenizer)]
    return list(dict.fromkeys(i for i in ids if i is not None))


def add_chat_tokens(tokenizer: PreTrainedTokenizerBase) -> tuple[str | None, list[int]]:
    """Give `tokenizer` ChatML's role tokens (as TRL's `setup_chat_format`) and `CHAT_TEMPLATE` where it
    lacks them, in place: (the line saying what was added or None, the ids added)."""
    before = len(tokenizer)
    missing = [token for token in CHAT_TOKENS if token not in tokenizer.get_vocab()]
    done = []
    if missing:
        tokenizer.add_special_tokens({"extra_special_tokens": missing}, replace_extra_special_tokens=False)
        done.append(f"the base's tokenizer had no chat tokens: added {', '.join(missing)} (vocab {before} -> {len(tokenizer)})")
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
        if not missing:
            done.append("the base's tokenizer had no chat template: installed ChatML's")
    return "; ".join(done) or None, tokenizer.convert_tokens_to_ids(missing) if missing else []
