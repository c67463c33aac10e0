"""First-token latency and decoding speed of a chat model served by each engine, beside scripts/chat.py.

Contenders, each at every thread count asked for:
  chat.py        the project's `ChatSession` in this process (what scripts/chat.py and the app run)
  transformers   `python scripts/serve.py RUN --engine transformers --threads N`, a server process
  llama.cpp      `python scripts/serve.py RUN --engine llama.cpp --threads N`, a server process

All servers are started first and wait idle; then every repeat sends the same greedy conversation
to each contender in turn (interleaved, so a shared machine's load falls on all alike), streamed:
  first token  seconds from sending the request to the reply's first piece of text
  tokens/s     the reply's tokens after the first over the seconds after the first piece
The reply's tokens are counted with the model's tokenizer (the same for every engine: greedy
replies are equal, `tests/test_serving.py` checks so), the end-of-turn token included when the
reply ended its turn. A warm-up request per contender is not timed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.spread import spread

REPO_ROOT = Path(__file__).resolve().parents[1]
SERVE_SCRIPT = REPO_ROOT / "scripts" / "serve.py"
START_TIMEOUT_S = 600  # an export on the first start, then the server's own start
SYSTEM = "A scene from Shakespeare. You are JULIET, speaking with ROMEO."
QUESTION = "Lady, by yonder blessed moon I swear."


@dataclass
class Timing:
    first_token_s: float
    tokens: int  # the reply's tokens, its end of turn included when it ended
    after_first_s: float  # seconds from the first piece to the end

    @property
    def tokens_per_second(self) -> float:
        return (self.tokens - 1) / self.after_first_s if self.after_first_s > 0 and self.tokens > 1 else 0.0


def timed_stream(pieces: Iterator[str], count_tokens: Callable[[str], int], started: float) -> Timing:
    """Consume a stream of reply pieces started at `started` (perf_counter); time its first piece."""
    first = None
    text = []
    for piece in pieces:
        if piece and first is None:
            first = time.perf_counter()
        text.append(piece)
    end = time.perf_counter()
    first = first if first is not None else end
    return Timing(first - started, count_tokens("".join(text)), end - first)


@contextlib.contextmanager
def server(run: str, engine: str, port: int, threads: int, log: Path) -> Iterator[str]:
    """scripts/serve.py on loopback `port`; yields its base URL once /v1/models answers; Ctrl-C at the end."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO_ROOT))
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, str(SERVE_SCRIPT), run, "--engine", engine, "--port", str(port), "--threads", str(threads)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )
    url = f"http://127.0.0.1:{port}/v1"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{engine} server exited ({process.returncode}): see {log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{engine} server did not answer within {START_TIMEOUT_S} s: see {log}")
            with contextlib.suppress(OSError):
                opener.open(url + "/models", timeout=5).read()
                break
            time.sleep(0.25)
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()


def openai_contender(url: str, model: str, max_tokens: int) -> Callable[[Callable[[str], int]], Timing]:
    """One streamed, greedy chat completion through the `openai` client, timed."""
    import httpx
    import openai

    client = openai.OpenAI(
        base_url=url, api_key="unused", max_retries=0, http_client=httpx.Client(trust_env=False, timeout=120)
    )
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]

    def once(count_tokens: Callable[[str], int]) -> Timing:
        started = time.perf_counter()
        stream = client.chat.completions.create(
            model=model, messages=messages, temperature=0, max_tokens=max_tokens, stream=True
        )
        pieces = (c.choices[0].delta.content or "" for c in stream if c.choices)
        return timed_stream(pieces, count_tokens, started)

    return once


def session_contender(model, tokenizer, threads: int, max_tokens: int) -> Callable[[Callable[[str], int]], Timing]:
    """scripts/chat.py's reply (a `ChatSession`, greedy) at `threads` torch threads, timed."""
    import torch

    from minigpt.chat.session import ChatSession
    from minigpt.generation import SamplingSettings

    def once(count_tokens: Callable[[str], int]) -> Timing:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            session = ChatSession(
                model, tokenizer, SamplingSettings(temperature=0.0, max_new_tokens=max_tokens), SYSTEM
            )
            started = time.perf_counter()
            return timed_stream(session.reply(QUESTION), count_tokens, started)
        finally:
            torch.set_num_threads(before)

    return once


def compare_serving(
    run: str, threads: list[int], repeats: int, max_tokens: int, workdir: Path, first_port: int = 18700
) -> dict[str, Any]:
    """Every contender at every thread count, `repeats` interleaved rounds; the spread of each figure."""
    from minigpt.hub.loading import load_model, load_tokenizer, resolve_model
    from minigpt.serving.exports import export_for_engine

    location = resolve_model(run)
    model, tokenizer = load_model(location).eval(), load_tokenizer(location)
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def count_tokens(text: str) -> int:  # + the end of turn: every reply here ends its turn or hits max_tokens
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return len(ids) + (1 if len(ids) < max_tokens and end_of_turn is not None else 0)

    names = {engine: export_for_engine(location, engine)[0].name for engine in ("transformers", "llama.cpp")}
    contenders: dict[str, Callable] = {}
    with contextlib.ExitStack() as stack:
        port = first_port
        for engine in ("transformers", "llama.cpp"):
            for n in threads:
                url = stack.enter_context(server(run, engine, port, n, workdir / f"{engine}-{n}.log"))
                contenders[f"{engine}, {n} thread{'s' * (n > 1)}"] = openai_contender(url, names[engine], max_tokens)
                port += 1
        for n in threads:
            contenders[f"chat.py, {n} thread{'s' * (n > 1)}"] = session_contender(model, tokenizer, n, max_tokens)
        for once in contenders.values():  # warm-up, not timed
            once(count_tokens)
        timings: dict[str, list[Timing]] = {name: [] for name in contenders}
        for _ in range(repeats):
            for name, once in contenders.items():
                timings[name].append(once(count_tokens))
    return {
        name: {
            "first_token_ms": spread(t.first_token_s * 1000 for t in rows),
            "tokens_per_second": spread(t.tokens_per_second for t in rows),
            "reply_tokens": sorted({t.tokens for t in rows}),
        }
        for name, rows in timings.items()
    }


def serving_report(rows: dict[str, Any], machine: dict[str, Any]) -> str:
    """A Markdown table of the rows: median (min-max) of each figure."""
    from benchmarks.machine import describe_flags

    lines = [
        f"CPU: {machine['cpu']}; flags: {describe_flags(machine['cpu_flags'])}; {machine['cores']} cores; "
        f"torch {machine['torch']}, transformers {machine['transformers']}",
        "",
        "| contender | first token, ms | tokens/s | reply tokens |",
        "|---|---|---|---|",
    ]
    for name, row in rows.items():
        first, speed = row["first_token_ms"], row["tokens_per_second"]
        lines.append(
            f"| {name} | {first['median']:.1f} ({first['min']:.1f}-{first['max']:.1f}) | "
            f"{speed['median']:.0f} ({speed['min']:.0f}-{speed['max']:.0f}) | {', '.join(map(str, row['reply_tokens']))} |"
        )
    return "\n".join(lines)


__all__ = ["Timing", "compare_serving", "serving_report", "timed_stream"]
