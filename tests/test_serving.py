"""scripts/serve.py: `transformers serve` and llama.cpp's server on a tiny trained chat model, through
the `openai` client, give the project's own greedy reply and stop at the end of the turn.

The model (the default run's block: rotary, RMSNorm, SwiGLU, QK-norm) is trained for a few seconds to
answer one conversation, so its reply ends with `<|im_end|>` on its own, as a chat model's does.
Each engine is started as a user starts it, in a child process on a free loopback port.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest
import torch
from conftest import PYTHON, QWEN3_BLOCK, REPO_ROOT, child_env, free_port, load_script, tiny_model
from talk_fixtures import build_chat_tokenizer, save_model

from minigpt.chat.session import ChatSession
from minigpt.errors import INTERRUPTED_EXIT_CODE, INTERRUPTED_LINE, run_cli
from minigpt.generation import SamplingSettings
from minigpt.hub.loading import load_model, resolve_model
from minigpt.serving.engines import check_port_free
from minigpt.serving.exports import export_for_engine

SERVE = REPO_ROOT / "scripts" / "serve.py"
ENGINES = ["transformers", "llama.cpp"]
SYSTEM, QUESTION, ANSWER = "You are Juliet.", "Who art thou?", "A maid of Verona, sir."
MAX_TOKENS = 24  # room for the answer and its <|im_end|> (18 tokens), and a few more
START_TIMEOUT_S = 180.0  # a child Python importing torch on two busy cores, then the export


def train_to_answer(tokenizer) -> torch.nn.Module:
    """A tiny model that has learnt the one conversation by heart (a few seconds of AdamW)."""
    conversation = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": ANSWER},
    ]
    ids = torch.tensor([tokenizer.apply_chat_template(conversation, tokenize=True, return_dict=False)])
    model = tiny_model(seed=0, vocab_size=len(tokenizer), max_position_embeddings=128, **QWEN3_BLOCK).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    return model.eval()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """This process trains and replies on one thread, as the servers run: a second thread spinning on
    a core another job holds made training 70 times slower here (0.5 s against 34)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer():
    return build_chat_tokenizer()


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory, tokenizer) -> tuple[Path, torch.nn.Module]:
    """A run folder whose final/ model answers the conversation; the model itself."""
    run = tmp_path_factory.mktemp("serving") / "chat-run"
    model = train_to_answer(tokenizer)
    model.generation_config.eos_token_id = [
        tokenizer.eos_token_id,
        tokenizer.convert_tokens_to_ids("<|im_end|>"),
    ]
    save_model(run / "final", model, tokenizer)
    return run, model


def projects_reply(model, tokenizer, max_new_tokens: int = MAX_TOKENS):
    """scripts/chat.py's greedy reply to the question: its text and how it went."""
    session = ChatSession(
        model, tokenizer, SamplingSettings(temperature=0.0, max_new_tokens=max_new_tokens), SYSTEM
    )
    text = "".join(session.reply(QUESTION))
    return text, session.last_reply


@dataclass
class Served:
    process: subprocess.Popen
    url: str  # the API's base URL
    log: Path  # everything the server printed

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 60.0) -> int:
        """Ctrl-C, as a terminal sends it; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise


def get(url: str) -> dict:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
    with opener.open(url, timeout=10) as reply:
        return json.loads(reply.read())


@contextlib.contextmanager
def serving(run: Path, engine: str, folder: Path) -> Iterator[Served]:
    """`python scripts/serve.py RUN --engine ENGINE` on a free port, once it answers /v1/models."""
    port, log = free_port(), folder / f"{engine}-{time.monotonic_ns()}.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [PYTHON, str(SERVE), str(run), "--engine", engine, "--port", str(port), "--threads", "1"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env(folder),
            cwd=folder,
        )
    served = Served(process, f"http://127.0.0.1:{port}/v1", log)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None, (
                f"the server exited ({process.returncode}):\n{served.output()[-3000:]}"
            )
            assert time.monotonic() < deadline, (
                f"no answer after {START_TIMEOUT_S} s:\n{served.output()[-3000:]}"
            )
            with contextlib.suppress(OSError):
                get(served.url + "/models")
                break
            time.sleep(0.2)
        yield served
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="module", params=ENGINES)
def served(request, chat_run, tmp_path_factory) -> Iterator[tuple[str, Served]]:
    run, _ = chat_run
    with serving(run, request.param, tmp_path_factory.mktemp("served")) as server:
        yield request.param, server


def client(served: Served) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=served.url,
        api_key="unused",
        max_retries=0,
        http_client=httpx.Client(trust_env=False, timeout=60),
    )


MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_engines_files_are_exported_beside_the_run_once_per_version_of_the_model(
    engine, chat_run, tmp_path
):
    run = tmp_path / "run"
    shutil.copytree(chat_run[0] / "final", run / "final")
    location = resolve_model(run)
    files, exported = export_for_engine(location, engine)
    assert exported and files.ready and files.path.is_relative_to(run / "serving")
    assert (files.name, files.context) == ("run", 128)
    assert export_for_engine(location, engine) == (files, False)  # found, not made again
    model = load_model(location)
    with torch.no_grad():
        model.lm_head.weight.mul_(1.5)  # tied: the embeddings too
    model.save_pretrained(run / "final")  # the run trained again
    again, exported = export_for_engine(resolve_model(run), engine)
    assert exported and again.path != files.path and again.path.is_relative_to(run / "serving")
    if engine == "transformers":  # a stock folder: the chat template and the end-of-turn stop in it
        assert (files.path / "chat_template.jinja").is_file() and not (
            files.path / "modeling_minigpt.py"
        ).exists()
        stops = json.loads((files.path / "generation_config.json").read_text())["eos_token_id"]
        assert stops == [0, 3]  # <|endoftext|>, <|im_end|>


def test_the_server_lists_the_model_by_its_runs_name(served):
    _, server = served
    assert [model["id"] for model in get(server.url + "/models")["data"]] == ["chat-run"]


def test_a_chat_completion_is_the_projects_greedy_reply_and_stops_at_the_end_of_turn(
    served, chat_run, tokenizer
):
    _, server = served
    expected, how = projects_reply(chat_run[1], tokenizer)
    assert expected == ANSWER and how.ended  # it learnt to end its turn
    reply = client(server).chat.completions.create(
        model="chat-run", messages=MESSAGES, temperature=0, max_tokens=MAX_TOKENS
    )
    choice = reply.choices[0]
    assert (choice.message.content, choice.finish_reason) == (expected, "stop")
    assert reply.usage.completion_tokens == how.new_tokens  # the reply's tokens and its <|im_end|>
    # Cut short by max_tokens: the same first tokens, and finish_reason says why it ended.
    cut, how_cut = projects_reply(chat_run[1], tokenizer, max_new_tokens=5)
    reply = client(server).chat.completions.create(
        model="chat-run", messages=MESSAGES, temperature=0, max_tokens=5
    )
    assert (reply.choices[0].message.content, reply.choices[0].finish_reason) == (cut, "length")
    assert not how_cut.ended and expected.startswith(cut)


def test_a_streamed_chat_completion_is_the_same_reply_in_pieces(served, chat_run, tokenizer):
    _, server = served
    expected, _ = projects_reply(chat_run[1], tokenizer)
    stream = client(server).chat.completions.create(
        model="chat-run", messages=MESSAGES, temperature=0, max_tokens=MAX_TOKENS, stream=True
    )
    pieces, finish = [], []
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    assert "".join(pieces) == expected and len(pieces) > 1
    assert finish == ["stop"] and not any("<|im_end|>" in piece for piece in pieces)


def test_a_completion_of_the_rendered_conversation_stops_at_the_end_of_turn(served, chat_run, tokenizer):
    _, server = served
    expected, _ = projects_reply(chat_run[1], tokenizer)
    prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert prompt.endswith("<|im_start|>assistant\n")
    reply = client(server).completions.create(
        model="chat-run", prompt=prompt, temperature=0, max_tokens=MAX_TOKENS
    )
    assert (reply.choices[0].text, reply.choices[0].finish_reason) == (expected, "stop")


def test_sampling_requests_sample_and_temperature_0_is_the_projects_greedy_text(served, chat_run, tokenizer):
    """Outside the one conversation it learnt, the model is unsure: four seeded temperature=1.0 requests
    give different texts (each seed its own, the same again), temperature=0 the project's greedy text.
    transformers serve took do_sample from the export's generation config, which had none: greedy."""
    _, server = served
    ids = tokenizer("ROMEO:", return_tensors="pt").input_ids
    greedy = chat_run[1].generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1] :]

    def complete(**settings) -> str:
        return client(server).completions.create(model="chat-run", prompt="ROMEO:", max_tokens=12, **settings).choices[0].text

    assert complete(temperature=0) == tokenizer.decode(greedy, skip_special_tokens=True)
    sampled = [complete(temperature=1.0, seed=seed) for seed in (1, 2, 3, 4)]
    assert len(set(sampled)) >= 2, sampled
    assert complete(temperature=1.0, seed=3) == sampled[2]


def test_a_stop_string_ends_the_text(served, chat_run, tokenizer):
    """llama.cpp leaves the stop string out, as OpenAI does; transformers serve keeps it (docs/serving.md)."""
    engine, server = served
    prompt = "First Citizen:\nBefore we proceed any further, hear me speak"
    full = client(server).completions.create(model="chat-run", prompt=prompt, max_tokens=16, temperature=0)
    cut = client(server).completions.create(model="chat-run", prompt=prompt, max_tokens=16, temperature=0, stop=["\n"])
    before = full.choices[0].text.split("\n")[0]
    assert before and before != full.choices[0].text and cut.choices[0].finish_reason == "stop"
    if engine == "llama.cpp":
        assert cut.choices[0].text == before
    else:
        assert cut.choices[0].text.startswith(before + "\n") and full.choices[0].text.startswith(cut.choices[0].text)


@pytest.mark.parametrize("engine", ENGINES)
def test_ctrl_c_stops_the_server_cleanly(engine, chat_run, tmp_path):
    run, _ = chat_run
    with serving(run, engine, tmp_path) as server:
        port = int(server.url.rsplit(":", 1)[1].split("/")[0])
        code = server.stop()
    output = server.output()
    assert code == INTERRUPTED_EXIT_CODE, output[-3000:]
    # The line is said, and nothing went wrong: no traceback, no semaphore of transformers serve's model
    # process left for multiprocessing's resource tracker to warn about, no "Loading weights" bar.
    assert INTERRUPTED_LINE in output.splitlines() and "Traceback" not in output, output[-3000:]
    assert "leaked semaphore" not in output and "Loading weights" not in output, output[-3000:]
    check_port_free("127.0.0.1", port)  # the socket is closed


def run_serve(args: list[str], monkeypatch, capsys) -> tuple[int, str]:
    """`python scripts/serve.py args` in this process, as run_cli runs it: exit code, stderr."""
    monkeypatch.setattr(sys, "argv", ["serve.py", *map(str, args)])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        run_cli(load_script("serve").main)
    return exit_.value.code, capsys.readouterr().err


def test_serve_script_lists_the_engines_of_the_package():
    import runpy

    from minigpt.serving.exports import ENGINES as PACKAGE_ENGINES

    assert runpy.run_path(str(SERVE))["ENGINES"] == PACKAGE_ENGINES == tuple(ENGINES)


def test_a_bad_model_path_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "runs" / "nothere"
    code, err = run_serve([missing, "--engine", "llama.cpp"], monkeypatch, capsys)
    assert code == 2
    assert err.splitlines() == [f"error: no model at {missing}: no such folder"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_busy_port_is_one_line_and_exit_2(engine, chat_run, monkeypatch, capsys):
    run, _ = chat_run
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run_serve([run, "--engine", engine, "--port", port], monkeypatch, capsys)
    assert code == 2
    assert err.splitlines() == [
        f"error: port {port} on 127.0.0.1 is in use (another server?): pass a free one with --port"
    ]
