"""The Generate and Chat tabs' work: one loaded model (the last named, loaded again when its weights
changed on disk), text streamed from it, chat replies; a page's Stop ends that page's reply only."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from minigpt.chat.session import ChatSession, Reply
from minigpt.generation import SamplingSettings, random_seed, stream_text
from minigpt.hub.loading import load_model, load_tokenizer, resolve_model
from minigpt.run_layout import FINAL_DIR, RESOLVED_CONFIG_NAME, list_checkpoints, read_run_config

Messages = list[dict[str, str]]


@dataclass
class LoadedModel:
    key: tuple[Any, ...]  # the folder, revision and weights' mtime it was loaded from
    model: Any
    tokenizer: Any
    run_config: dict[str, Any]  # the resolved training config beside the model ({} if none)


class Models:
    """Loads one model at a time; generations and replies run one after another on it (they share
    the model and torch's RNG)."""

    def __init__(self) -> None:
        self._loaded: LoadedModel | None = None
        self._lock = threading.Lock()  # one generation at a time
        self._replying: dict[str, ChatSession] = {}  # page id -> the session answering it
        self._resets: dict[str, int] = {}  # page id -> how many times its conversation was reset
        self._pages = threading.Lock()

    def load(self, model: str, revision: str | None = None, hub_dir: str | None = None) -> LoadedModel:
        """The named model, from memory when it is the one loaded last and unchanged on disk.
        Raises MiniGPTUserError (ModelNotFoundError, HubError) when nothing is found."""
        location = resolve_model(model.strip(), hub_dir=hub_dir or None, revision=revision or None)
        weights = location.local_dir / "model.safetensors"
        key = (str(location.local_dir.resolve()), location.revision, weights.exists() and weights.stat().st_mtime_ns)
        if self._loaded is None or self._loaded.key != key:
            self._loaded = None  # free the old weights before loading the new ones
            model = load_model(location)  # first: it registers MiniGPT, whose config the tokenizer reads (#48)
            tokenizer = load_tokenizer(location)
            self._loaded = LoadedModel(key, model, tokenizer, read_run_config(location.local_dir))
        return self._loaded

    def stream(
        self, model: str, prompt: str, settings: SamplingSettings, revision: str | None = None, hub_dir: str | None = None
    ) -> Iterator[tuple[str, int]]:
        """Yield (text so far, seed) while the continuation of `prompt` is produced."""
        settings = replace(settings, seed=random_seed() if settings.seed is None else settings.seed, num_samples=1)
        settings.validate()  # before loading: a bad setting should not wait for a model
        with self._lock:
            loaded = self.load(model, revision, hub_dir)
            for text in stream_text(loaded.model, loaded.tokenizer, prompt, settings, loaded.run_config):
                yield text, settings.seed

    def chat(
        self, page: str, model: str, messages: Messages, text: str, settings: SamplingSettings,
        system_prompt: str | None = None, revision: str | None = None, hub_dir: str | None = None,
    ) -> Iterator[tuple[Messages, Reply | None]]:  # fmt: skip
        """Yield (the conversation with the reply so far, None) as the reply to `text` is written, then
        (the conversation, how the reply went). Raises MiniGPTUserError (one line) for a model that is
        not there or no chat model, a bad setting, a message too long for the context."""
        settings.validate()
        with self._lock:
            loaded = self.load(model, revision, hub_dir)
            session = ChatSession(
                loaded.model, loaded.tokenizer, settings, system_prompt, messages, loaded.run_config, model.strip()
            )
            asked = [*session.messages, {"role": "user", "content": text}]
            with self._pages:
                self._replying[page] = session
            try:
                reply = ""
                for piece in session.reply(text):
                    reply += piece
                    yield [*asked, {"role": "assistant", "content": reply}], None
            finally:
                with self._pages:
                    self._replying.pop(page, None)
            yield session.messages, session.last_reply

    def resets(self, page: str) -> int:
        """How many times `page`'s conversation was reset: a reply started before the last reset must
        not show its text any more (its updates may reach the page after the reset's)."""
        with self._pages:
            return self._resets.get(page, 0)

    def reset(self, page: str) -> None:
        """Count a reset of `page`'s conversation and end its reply at the next token."""
        with self._pages:
            self._resets[page] = self._resets.get(page, 0) + 1
        self.stop(page)

    def stop(self, page: str) -> bool:
        """End `page`'s reply at its next token; False when it has none in progress."""
        with self._pages:
            session = self._replying.get(page)
        if session is not None:
            session.stop()
        return session is not None


def list_model_choices(roots: list[Path]) -> list[str]:
    """Run folders (holding resolved_config.yaml) with a final/ model, and their checkpoints, under
    `roots` (one level deep), newest first."""
    runs = {root for root in roots if (root / RESOLVED_CONFIG_NAME).is_file()}
    for root in roots:
        if root.is_dir():
            runs.update(p.parent for p in root.glob(f"*/{RESOLVED_CONFIG_NAME}"))
    folders = [folder for run in runs for folder in (run / FINAL_DIR, *list_checkpoints(run))]
    choices = [(f.stat().st_mtime, str(f.parent if f.name == FINAL_DIR else f)) for f in folders if (f / "config.json").is_file()]
    return [name for _, name in sorted(choices, reverse=True)]
