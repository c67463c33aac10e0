"""The Chat tab's work: each message answered by a `ChatSession` on the generator's loaded model.

The conversation lives in the page (its exact text, in a Gradio State), so any number of pages
chat at once on the one loaded model, one reply at a time. The reply in progress is remembered
under the page's id, so that page's Stop button ends it (at its next token) and no other page's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from minigpt.chat.session import ChatSession, Reply
from minigpt.generation import SamplingSettings

from .text_generator import TextGenerator

Messages = list[dict[str, str]]


class ChatReplies:
    """Answers chat messages with the model `generator` holds; stops a page's reply on request."""

    def __init__(self, generator: TextGenerator) -> None:
        self.generator = generator
        self._replying: dict[str, ChatSession] = {}  # page id -> the session answering it
        self._resets: dict[str, int] = {}  # page id -> how many times its conversation was reset
        self._lock = threading.Lock()

    def stream(
        self,
        page: str,
        model: str,
        messages: Messages,
        text: str,
        settings: SamplingSettings,
        system_prompt: str | None = None,
        revision: str | None = None,
        hub_dir: str | None = None,
    ) -> Iterator[tuple[Messages, Reply | None]]:
        """Yield (the conversation with the reply so far, None) as the reply to `text` is written,
        then (the conversation, how the reply went).

        Raises MiniGPTUserError (one line) for a model that is not there or is no chat model, a
        bad setting, a message too long for the context.
        """
        settings.validate()  # before loading: a bad setting should not wait for a model
        with self.generator.using(model.strip(), revision or None, hub_dir or None) as loaded:
            session = ChatSession(
                loaded.model,
                loaded.tokenizer,
                settings,
                system_prompt=system_prompt,
                messages=messages,
                run_config=loaded.run_config,
                name=model.strip(),
            )
            asked = [*session.messages, {"role": "user", "content": text}]
            with self._lock:
                self._replying[page] = session
            try:
                reply = ""
                for piece in session.reply(text):
                    reply += piece
                    yield [*asked, {"role": "assistant", "content": reply}], None
            finally:
                with self._lock:
                    self._replying.pop(page, None)
            yield session.messages, session.last_reply

    def resets(self, page: str) -> int:
        """How many times `page`'s conversation was reset: a reply started before the last reset
        must not show its text any more (its updates may reach the page after the reset's)."""
        with self._lock:
            return self._resets.get(page, 0)

    def reset(self, page: str) -> None:
        """Count a reset of `page`'s conversation and end its reply at the next token."""
        with self._lock:
            self._resets[page] = self._resets.get(page, 0) + 1
        self.stop(page)

    def stop(self, page: str) -> bool:
        """End `page`'s reply at its next token; False when it has none in progress."""
        with self._lock:
            session = self._replying.get(page)
        if session is None:
            return False
        session.stop()
        return True


__all__ = ["ChatReplies", "Messages"]
