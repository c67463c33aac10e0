"""A chat with a model whose tokenizer carries a chat template: history, streaming replies, stop.

`ChatSession` keeps the conversation (an optional system prompt, then user and assistant
messages), renders it with the tokenizer's chat template and streams the assistant's reply as it
is generated, until the end-of-turn token (`<|im_end|>`), the end-of-text token or the reply
limit. The history the model reads is cut to its context: the oldest whole turns (a user message
and the replies to it) are left out, the system prompt and the new message stay, and the reply
keeps its room. The whole history stays in `messages`, so nothing is lost from what was said.

`stop()` (any thread: a Ctrl-C handler, a Stop button) ends the reply in progress at its next
token; what was written so far is kept as the reply, and the chat goes on. Sampling is
`scripts/generate.py`'s (`SamplingSettings`, the run's sample settings, the generation config);
with a seed, reply n of a conversation (counted from its start) is drawn with seed + n, so a
conversation repeats by seed. The terminal chat (`scripts/chat.py`) and the app's Chat tab run on it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from transformers import GenerationConfig, StoppingCriteria, StoppingCriteriaList, TextIteratorStreamer

from ..data.chat_template import IM_END, ROLES
from ..errors import ConfigError, MiniGPTUserError
from ..generation.sampling import (
    SamplingSettings,
    build_generation_config,
    decoding_cache,
    decoding_options,
    random_seed,
    seeded_eval_mode,
)
from ..run_layout import RESOLVED_CONFIG_NAME

# Reply limit when neither the caller, the run's samples nor the generation config set one:
# a quarter of the context, so the history keeps most of it.
DEFAULT_REPLY_SHARE = 4
HOW_TO_GET_A_TEMPLATE = (
    "fine-tune it on conversations first: python scripts/train.py configs/chat.yaml model.init_from={}"
)


class NotAChatModelError(MiniGPTUserError):
    """A base model, not a chat one: trained on text, or its tokenizer has no chat template or no
    end-of-turn token."""


class ChatError(MiniGPTUserError):
    """A message the session cannot take (too long for the context, a reply already running)."""


def end_of_turn_ids(tokenizer, name: str = "the model") -> list[int]:
    """The token ids a reply ends at: `<|im_end|>`, then the end-of-text token.

    Raises NotAChatModelError (one line, naming `name`) when the tokenizer has no chat template
    or no `<|im_end|>` token.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise NotAChatModelError(
            f"{name} has no chat template (a base model): {HOW_TO_GET_A_TEMPLATE.format(name)}"
        )
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    if im_end is None or im_end == tokenizer.unk_token_id:
        raise NotAChatModelError(
            f"{name}'s tokenizer has no {IM_END} token: {HOW_TO_GET_A_TEMPLATE.format(name)}"
        )
    ids = [im_end]
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id != im_end:
        ids.append(tokenizer.eos_token_id)
    return ids


def trained_on_text(run_config: dict[str, Any] | None) -> str | None:
    """The `data.format` of the training that made a base model, or None for a chat model or a model
    with no training config beside it.

    Every tokenizer MiniGPT trains carries the chat template and role tokens (a chat run needs them
    in its base), so the template alone cannot tell a base model from a chat one: the training does.
    A model's last run trained on conversations when its resolved config (beside every final model,
    checkpoint and published model) says `data.format: chat`; any other format is text. A model with
    no such config (a stock export, another project's model) is left to its tokenizer.
    """
    data = (run_config or {}).get("data")
    if not isinstance(data, dict):
        return None
    data_format = data.get("format", "auto")
    return None if data_format == "chat" else str(data_format)


def require_chat_model(
    tokenizer, run_config: dict[str, Any] | None = None, name: str = "the model"
) -> list[int]:
    """`end_of_turn_ids`, after refusing a base model: one trained on text by its run config
    (`trained_on_text`), or one whose tokenizer has no chat template or `<|im_end|>` token.

    Raises NotAChatModelError, one line that names `name` and says how to make a chat model of it.
    """
    data_format = trained_on_text(run_config)
    if data_format is not None:
        raise NotAChatModelError(
            f"{name} was trained on text, not conversations (a base model: data.format {data_format} in "
            f"its {RESOLVED_CONFIG_NAME}): {HOW_TO_GET_A_TEMPLATE.format(name)}"
        )
    return end_of_turn_ids(tokenizer, name)


@dataclass
class Reply:
    """How the last reply went."""

    text: str  # the reply as kept in the history (special tokens left out)
    new_tokens: int  # tokens generated, the end-of-turn token included when there was one
    ended: bool  # the model ended its turn (end-of-turn or end-of-text token)
    stopped: bool  # stop() cut it short
    seed: int
    prompt_tokens: int  # tokens the model read: system prompt, kept history, the new message, header
    dropped_messages: int  # oldest messages left out to fit the context


class _StopFlag(StoppingCriteria):
    """Ends generation at the next token once `event` is set (checked after every token)."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        # input_ids: (B, T); one flag per sequence
        return torch.full(
            (input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device
        )


class ChatSession:
    """A conversation with `model`; one reply at a time.

    `messages` (user and assistant turns, without the system prompt) may start from an earlier
    conversation (the app keeps it in the page). `run_config` is the resolved training config
    beside the model (its `training.sample_*` settings are defaults), or None.
    """

    def __init__(
        self,
        model,
        tokenizer,
        settings: SamplingSettings | None = None,
        system_prompt: str | None = None,
        messages: list[dict[str, str]] | None = None,
        run_config: dict[str, Any] | None = None,
        name: str = "the model",
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.settings = settings or SamplingSettings()
        self.settings.validate()
        self.end_ids = require_chat_model(tokenizer, run_config, name)
        self.system_prompt = system_prompt or None
        self.messages: list[dict[str, str]] = []
        for message in messages or []:
            self._check_message(message)
            self.messages.append({"role": message["role"], "content": message["content"]})
        self.generation_config = self._generation_config(run_config)
        self._check_room_for_a_message()
        self.last_reply: Reply | None = None
        self._stop = threading.Event()
        self._replying = threading.Lock()

    # ---- the conversation ----------------------------------------------------------------

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
        self.messages = []
        self.last_reply = None

    def stop(self) -> None:
        """End the reply in progress at its next token (from any thread); nothing when none runs."""
        if self.is_replying:
            self._stop.set()

    def prompt_ids(self, user_text: str) -> tuple[torch.Tensor, int]:
        """(1, T) ids of what the model reads before replying to `user_text`, and how many of the
        oldest messages were left out so that T + the reply limit fits the context.

        Whole turns go, oldest first: a user message with the replies that followed it. Raises
        ChatError when the system prompt and `user_text` alone leave no room for the reply.
        """
        history = self.messages + [{"role": "user", "content": user_text}]
        budget = self.context - self.reply_limit
        starts = [i for i, m in enumerate(history) if m["role"] == "user"]  # where a turn begins
        for start in starts:  # the last start is the new message itself: never dropped
            ids = self._render(history[start:])
            if len(ids) <= budget:
                return torch.tensor([ids]), start
        raise ChatError(
            f"the message is too long: with the system prompt it takes {len(ids)} tokens, and the "
            f"model's context of {self.context} tokens keeps {self.reply_limit} for the reply "
            f"(shorten it, or lower the reply limit)"
        )

    def reply(self, user_text: str) -> Iterator[str]:
        """Answer `user_text`: yields the reply's text in pieces as it is generated.

        The message and the reply (as far as it got) join the history when the reply ends, is
        stopped (`stop()`) or the caller stops iterating; `last_reply` says how it went.
        """
        if not self._replying.acquire(blocking=False):
            raise ChatError("a reply is in progress: stop it first")
        try:
            self._stop.clear()
            input_ids, dropped = self.prompt_ids(user_text)
            input_ids = input_ids.to(self.model.device)  # (1, T)
            seed = self._seed()
            yield from self._generate(user_text, input_ids, dropped, seed)
        finally:
            self._stop.clear()
            self._replying.release()

    # ---- inside ----------------------------------------------------------------------------

    def _check_message(self, message: dict[str, str]) -> None:
        if message.get("role") not in ROLES[1:] or not isinstance(message.get("content"), str):
            raise ChatError(f"a chat history holds user and assistant messages with text, got {message!r}")

    def _seed(self) -> int:
        if self.settings.seed is None:
            return random_seed()
        return self.settings.seed + sum(m["role"] == "assistant" for m in self.messages)

    def _render(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of the system prompt, `messages` and the assistant header the reply follows."""
        if self.system_prompt:
            messages = [{"role": "system", "content": self.system_prompt}, *messages]
        # verbose=False: a whole history longer than the context is rendered only to be cut, and
        # the tokenizer would warn about its length.
        ids = self.tokenizer.apply_chat_template(
            messages,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
            tokenizer_kwargs={"verbose": False},
        )
        return list(ids)

    def _check_room_for_a_message(self) -> None:
        """Refuse at the start, in one line, a reply limit that would refuse every message: the
        system prompt, the turn's headers, a one-token message and the reply must fit the context."""
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

    def _generation_config(self, run_config: dict[str, Any] | None) -> GenerationConfig:
        """The reply's sampling, as `scripts/generate.py` builds it, ending at the end-of-turn ids."""
        config = build_generation_config(self.model.generation_config, self.settings, run_config)
        if config.max_new_tokens is None:  # nothing set it
            config.max_new_tokens = max(1, self.context // DEFAULT_REPLY_SHARE)
        if config.max_new_tokens >= self.context:
            raise ConfigError(
                f"the reply limit ({config.max_new_tokens} tokens) leaves no room in the model's "
                f"context of {self.context} tokens for the conversation"
            )
        config.eos_token_id = self.end_ids
        if config.pad_token_id is None:
            pad = self.tokenizer.pad_token_id
            config.pad_token_id = pad if pad is not None else self.end_ids[-1]
        config.update(**decoding_options(self.settings.decoding))
        return config

    def _generate(self, user_text: str, input_ids: torch.Tensor, dropped: int, seed: int) -> Iterator[str]:
        """Generate in a worker thread that feeds a streamer; record the turn however it ends."""
        config = GenerationConfig.from_dict(self.generation_config.to_dict())
        # generate() fills the settings left None from the model's generation config, and warns at
        # every call that sets max_new_tokens when that config sets max_length: the reply limit goes
        # the way the model's config bounds length (a training run's: max_length, the context; a
        # stock export's: max_new_tokens).
        total_length = input_ids.shape[1] + config.max_new_tokens  # prompt + reply
        if self.model.generation_config.max_new_tokens is None:
            config.max_length, config.max_new_tokens = total_length, None
        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=True)
        output: list[torch.Tensor] = []
        failure: list[BaseException] = []

        def work() -> None:
            try:
                with seeded_eval_mode(self.model, seed):
                    output.append(
                        self.model.generate(
                            input_ids,
                            attention_mask=torch.ones_like(input_ids),
                            generation_config=config,
                            streamer=streamer,
                            stopping_criteria=StoppingCriteriaList([_StopFlag(self._stop)]),
                            cache=decoding_cache(self.model, self.settings.decoding, total_length),
                        )
                    )
            except BaseException as err:  # handed to the reader below, which re-raises it
                failure.append(err)
                streamer.end()  # unblocks the reader

        worker = threading.Thread(target=work, name="minigpt-chat-reply", daemon=True)
        worker.start()
        streamed = False
        try:
            for piece in streamer:
                if piece:
                    yield piece
            streamed = True
        finally:  # also when the caller stops iterating (a closed generator): end the worker first
            if not streamed:
                self._stop.set()
            worker.join()
            if not failure:
                self._record(user_text, input_ids.shape[1], output, dropped, seed)
        if failure:
            raise failure[0]

    def _record(
        self, user_text: str, prompt_tokens: int, output: list[torch.Tensor], dropped: int, seed: int
    ) -> None:
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
            prompt_tokens=prompt_tokens,
            dropped_messages=dropped,
        )


__all__ = [
    "ChatError",
    "ChatSession",
    "NotAChatModelError",
    "Reply",
    "end_of_turn_ids",
    "require_chat_model",
    "trained_on_text",
]
