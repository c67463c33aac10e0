"""A chat with a model whose tokenizer carries a chat template: history cut to the context (oldest
whole turns first), streamed replies, `stop()` from any thread; with a seed, reply n uses seed + n."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from ..data.chat_template import IM_END, ROLES, end_of_turn_id
from ..errors import ConfigError, MiniGPTUserError
from ..generation import SamplingSettings, build_generation_config, random_seed, stream_pieces, with_length
from ..run_layout import RESOLVED_CONFIG_NAME

DEFAULT_REPLY_SHARE = 4  # no reply limit set anywhere: a quarter of the context
HOW_TO_GET_A_TEMPLATE = (
    "fine-tune it on conversations first: python scripts/train.py configs/chat.yaml model.init_from={}"
)


class NotAChatModelError(MiniGPTUserError):
    """A base model: trained on text, or its tokenizer has no chat template or end-of-turn token."""


class ChatError(MiniGPTUserError):
    """A message the session cannot take (too long for the context, a reply already running)."""


def trained_on_text(run_config: dict[str, Any] | None) -> str | None:
    """The `data.format` of the run that made a base model; None for a chat run or no run config
    (every tokenizer MiniGPT trains carries the chat template, so the template alone cannot tell)."""
    data = (run_config or {}).get("data")
    if not isinstance(data, dict) or data.get("format", "auto") == "chat":
        return None
    return str(data.get("format", "auto"))


def require_chat_model(tokenizer, run_config: dict[str, Any] | None = None, name: str = "the model") -> list[int]:
    """The ids a reply ends at (`<|im_end|>`, then end of text), after refusing a base model in one
    line: trained on text (`trained_on_text`), or a tokenizer without the template or `<|im_end|>`."""
    data_format = trained_on_text(run_config)
    if data_format is not None:
        raise NotAChatModelError(
            f"{name} was trained on text, not conversations (a base model: data.format {data_format} in "
            f"its {RESOLVED_CONFIG_NAME}): {HOW_TO_GET_A_TEMPLATE.format(name)}"
        )
    if not getattr(tokenizer, "chat_template", None):
        raise NotAChatModelError(f"{name} has no chat template (a base model): {HOW_TO_GET_A_TEMPLATE.format(name)}")
    im_end = end_of_turn_id(tokenizer)
    if im_end is None:
        raise NotAChatModelError(f"{name}'s tokenizer has no {IM_END} token: {HOW_TO_GET_A_TEMPLATE.format(name)}")
    return [im_end] + [tokenizer.eos_token_id] * (tokenizer.eos_token_id not in (None, im_end))


@dataclass
class Reply:
    """How the last reply went."""

    text: str  # the reply as kept in the history (special tokens left out)
    new_tokens: int  # tokens generated, the end-of-turn token included when there was one
    ended: bool  # the model ended its turn (end-of-turn or end-of-text token)
    stopped: bool  # stop() cut it short
    seed: int
    dropped_messages: int  # oldest messages left out to fit the context


class ChatSession:
    """A conversation with `model`, one reply at a time. `messages` (user and assistant turns, no
    system prompt) may continue an earlier conversation; `run_config` is the resolved training
    config beside the model (its `training.sample_*` settings are defaults), or None."""

    def __init__(
        self, model, tokenizer, settings: SamplingSettings | None = None, system_prompt: str | None = None,
        messages: list[dict[str, str]] | None = None, run_config: dict[str, Any] | None = None,
        name: str = "the model",
    ) -> None:  # fmt: skip
        self.model, self.tokenizer = model, tokenizer
        self.settings = settings or SamplingSettings()
        self.settings.validate()
        self.end_ids = require_chat_model(tokenizer, run_config, name)
        self.system_prompt = system_prompt or None
        self.messages: list[dict[str, str]] = []
        for message in messages or []:
            if message.get("role") not in ROLES[1:] or not isinstance(message.get("content"), str):
                raise ChatError(f"a chat history holds user and assistant messages with text, got {message!r}")
            self.messages.append({"role": message["role"], "content": message["content"]})
        config = build_generation_config(self.model.generation_config, self.settings, run_config)
        config.max_new_tokens = config.max_new_tokens or max(1, self.context // DEFAULT_REPLY_SHARE)
        config.eos_token_id = self.end_ids
        if config.pad_token_id is None:
            pad = self.tokenizer.pad_token_id
            config.pad_token_id = pad if pad is not None else self.end_ids[-1]
        self.generation_config = config
        self._check_room_for_a_message()
        self.last_reply: Reply | None = None
        self._stop = threading.Event()
        self._replying = threading.Lock()

    @property
    def context(self) -> int:
        return self.model.config.max_position_embeddings

    @property
    def reply_limit(self) -> int:
        return self.generation_config.max_new_tokens

    @property
    def is_replying(self) -> bool:
        return self._replying.locked()

    def reset(self) -> None:
        """Forget the conversation (the system prompt stays); reply seeds count from the start again."""
        if self.is_replying:
            raise ChatError("a reply is in progress: stop it first")
        self.messages, self.last_reply = [], None

    def stop(self) -> None:
        """End the reply in progress at its next token (from any thread); nothing when none runs."""
        if self.is_replying:
            self._stop.set()

    def prompt_ids(self, user_text: str) -> tuple[torch.Tensor, int]:
        """(1, T) ids the model reads before replying to `user_text`, and how many of the oldest
        messages were left out (whole turns) so that T + the reply limit fits the context."""
        history = self.messages + [{"role": "user", "content": user_text}]
        budget = self.context - self.reply_limit
        for start in (i for i, m in enumerate(history) if m["role"] == "user"):  # the last: the new message
            ids = self._render(history[start:])
            if len(ids) <= budget:
                return torch.tensor([ids]), start
        raise ChatError(
            f"the message is too long: with the system prompt it takes {len(ids)} tokens, and the "
            f"model's context of {self.context} tokens keeps {self.reply_limit} for the reply "
            f"(shorten it, or lower the reply limit)"
        )

    def reply(self, user_text: str) -> Iterator[str]:
        """Yield the reply to `user_text` in pieces as it is generated. The message and the reply (as
        far as it got) join the history when it ends, is stopped or the caller stops iterating."""
        if not self._replying.acquire(blocking=False):
            raise ChatError("a reply is in progress: stop it first")
        try:
            self._stop.clear()
            input_ids, dropped = self.prompt_ids(user_text)
            input_ids = input_ids.to(self.model.device)  # (1, T)
            seed = self.settings.seed
            if seed is None:
                seed = random_seed()
            else:  # reply n of the conversation
                seed += sum(m["role"] == "assistant" for m in self.messages)
            config = with_length(self.model, self.generation_config, input_ids.shape[1], self.reply_limit)
            output: list[torch.Tensor] = []
            pieces = stream_pieces(self.model, self.tokenizer, input_ids, config, seed, True, self._stop, output)
            try:
                yield from pieces
            except GeneratorExit:  # the caller stopped reading (a closed page): the turn is kept
                self._record(user_text, input_ids.shape[1], output, dropped, seed)
                raise
            self._record(user_text, input_ids.shape[1], output, dropped, seed)
        finally:
            self._stop.clear()
            self._replying.release()

    def _render(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of the system prompt, `messages` and the assistant header the reply follows."""
        if self.system_prompt:
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        # verbose=False: a history longer than the context is rendered only to be cut
        return list(
            self.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False, tokenizer_kwargs={"verbose": False}
            )
        )

    def _check_room_for_a_message(self) -> None:
        """Refuse at the start a reply limit that would refuse every message: the system prompt, the
        turn's headers, a one-token message and the reply must fit the context."""
        fixed = len(self._render([{"role": "user", "content": ""}]))  # everything but the message
        most = self.context - fixed - 1  # the longest reply beside a one-token message
        if most < 1:
            raise ConfigError(
                f"the system prompt and the turn's headers take {fixed} of the model's {self.context} "
                "context tokens: no room is left for a message and its reply; shorten the system prompt"
            )
        if self.reply_limit > most:
            raise ConfigError(
                f"the reply limit ({self.reply_limit} tokens) leaves no room for a message in the model's "
                f"context of {self.context} tokens (the system prompt and the turn's headers take {fixed}): "
                f"lower it to at most {most}"
            )

    def _record(self, user_text: str, prompt_tokens: int, output: list[torch.Tensor], dropped: int, seed: int) -> None:
        new_ids = output[0][0, prompt_tokens:].tolist() if output else []
        ended = bool(new_ids) and new_ids[-1] in self.end_ids
        text = self.tokenizer.decode(new_ids[:-1] if ended else new_ids, skip_special_tokens=True)
        self.messages += [{"role": "user", "content": user_text}, {"role": "assistant", "content": text}]
        self.last_reply = Reply(
            text=text,
            new_tokens=len(new_ids),
            ended=ended,
            stopped=self._stop.is_set() and not ended and len(new_ids) < self.reply_limit,
            seed=seed,
            dropped_messages=dropped,
        )
