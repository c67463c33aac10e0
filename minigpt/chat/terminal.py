"""The terminal chat of `scripts/chat.py`: read a line, stream the reply, until /quit or end of input.

Ctrl-C during a reply stops the reply and the prompt comes back; at the prompt it ends the chat.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

from .session import ChatError, ChatSession

PROMPT = "> "
HELP = "/reset forgets the conversation, /quit (or Ctrl-D) ends it, Ctrl-C stops a reply"
STOPPED_MARK = " [stopped]"


@contextmanager
def _interrupts_stop_replies(session: ChatSession) -> Iterator[None]:
    """Inside: Ctrl-C stops the reply in progress, or raises KeyboardInterrupt when none is."""
    if threading.current_thread() is not threading.main_thread():  # handlers live in the main thread
        yield
        return

    def on_interrupt(signum: int, frame: object) -> None:
        if session.is_replying:
            session.stop()  # the generation ends at its next token; the reader gets the rest
        else:
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def chat_in_terminal(
    session: ChatSession, read: Callable[[str], str] = input, out: TextIO | None = None, err: TextIO | None = None
) -> None:
    """Chat until /quit, end of input or Ctrl-C at the prompt: replies go to `out` as they are
    generated, notes to `err`."""
    out, err = out or sys.stdout, err or sys.stderr
    told_about_context = False
    with _interrupts_stop_replies(session):
        try:
            while True:
                try:
                    text = read(PROMPT).strip()
                except EOFError:
                    out.write("\n")
                    return
                if not text:
                    continue
                if text == "/quit":
                    return
                if text == "/reset":
                    session.reset()
                    print("(the conversation is reset)", file=err, flush=True)
                    continue
                try:
                    for piece in session.reply(text):
                        out.write(piece)
                        out.flush()
                except ChatError as error:
                    print(f"error: {error}", file=err, flush=True)
                    continue
                reply = session.last_reply
                out.write((STOPPED_MARK if reply.stopped else "") + "\n")
                out.flush()
                if reply.dropped_messages and not told_about_context:
                    told_about_context = True
                    note = f"the conversation outgrew the model's context of {session.context} tokens"
                    print(f"({note}: it reads the latest turns only)", file=err, flush=True)
        except KeyboardInterrupt:  # at the prompt: the chat ends, nothing to save
            out.write("\n")
            out.flush()
