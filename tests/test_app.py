"""The web app (scripts/app.py) in a real browser: headless Chromium driven by Playwright.

One server process for the module, on a free loopback port, with every outbound HTTP(S) request
sent to a local recorder (HTTP(S)_PROXY), which must see none. One smoke run is trained, watched,
refused a second start, stopped, resumed, stopped again and then talked to, in the page; a
tiny chat model is chatted with in the Chat tab.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from conftest import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PYTHON,
    REPO_ROOT,
    browser_missing,
    build_tiny_tokenizer,
    free_port,
)

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the browser tests skip; the others still run
    expect = sync_playwright = None

SERVER_START_TIMEOUT_S = 120
# The text of a Markdown component, without the (hidden) progress timer Gradio keeps beside it.
TRAIN_ERROR = "#train-error [data-testid=markdown]"
STATUS = "#run-status [data-testid=markdown]"
GENERATE_MESSAGE = "#generate-message [data-testid=markdown]"
CHAT_MESSAGE = "#chat-message [data-testid=markdown]"
CHAT_USER = "#chat-history [data-testid=user]"  # the conversation's messages, by role
CHAT_BOT = "#chat-history [data-testid=bot]"
LONG_REPLY = 4000  # tokens: the chat replies that Stop and Reset cut short
FILL_TRIES, FILL_SETTLE_MS = 5, 300  # a lost fill was undone within 10 ms of typing
UI_TIMEOUT_MS = 60_000  # the longest a page waits for the run (2 busy cores, shared with other tests)


# ---- no browser needed -------------------------------------------------------------------------


def test_exposure_warning_only_off_loopback():
    from minigpt.app.server import exposure_warning, is_loopback

    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert is_loopback(host) and exposure_warning(host, 7860) is None
    for host in ("0.0.0.0", "192.168.1.5", "::", "my-host.example"):
        warning = exposure_warning(host, 7860)
        assert warning is not None and warning.startswith(f"warning: serving on {host}:7860")


def test_overrides_parse_like_a_command_line():
    from minigpt.app.training_run import parse_overrides
    from minigpt.errors import ConfigError

    text = "training.max_steps=5\nmodel.hidden_size=64  training.sample_prompts='[ROMEO:, JULIET:]'"
    assert parse_overrides(text) == [
        "training.max_steps=5",
        "model.hidden_size=64",
        "training.sample_prompts=[ROMEO:, JULIET:]",
    ]
    with pytest.raises(ConfigError, match="^overrides: No closing quotation"):
        parse_overrides("training.sample_prompts='[ROMEO:")


def test_samples_file_parses_into_blocks(tmp_path):
    from minigpt.run_layout import read_samples

    path = tmp_path / "samples.txt"
    path.write_text("--- step 4, prompt 'ROMEO:' ---\nROMEO: a\nb\n--- step 8, prompt '\\n' ---\n\nthee\n")
    samples = read_samples(path)
    assert [(s.step, s.prompt, s.text) for s in samples] == [
        (4, "'ROMEO:'", "ROMEO: a\nb"),
        (8, "'\\n'", "\nthee"),
    ]
    assert read_samples(tmp_path / "missing.txt") == []


def test_curve_frame_names_both_curves_from_the_first_point():
    """The plot colours only the curves its first frame names: validation must be there before its
    first point (as a row without a loss), and typed columns keep the axes numeric."""
    import math

    from minigpt.app.training_run import RunSnapshot, curve_frame

    assert curve_frame(RunSnapshot()) is None
    frame = curve_frame(RunSnapshot(train_curve=[(1, 6.0), (2, 5.5)]))
    assert list(frame.itertuples(index=False))[:2] == [(1, 6.0, "training"), (2, 5.5, "training")]
    ((step, loss, curve),) = frame.iloc[2:].itertuples(index=False)
    assert (step, curve) == (1, "validation") and math.isnan(loss)
    assert {str(t) for t in frame.dtypes[:2]} == {"int64", "float64"}
    frame = curve_frame(RunSnapshot(train_curve=[(1, 6.0)], eval_curve=[(1, 6.2)]))
    assert list(frame.itertuples(index=False)) == [(1, 6.0, "training"), (1, 6.2, "validation")]


def test_a_resumed_run_shows_its_past(tmp_path):
    """On resume the page starts from metrics.jsonl up to the checkpoint: curves and the last numbers."""
    import json

    from minigpt.app.training_run import LiveRunState
    from minigpt.run_layout import read_log_records

    records = [
        {"step": 1, "loss": 6.0, "learning_rate": 1e-3, "tokens_per_second": 900.0},
        {"step": 2, "eval_loss": 5.9, "eval_bpb": 4.1},
        {"step": 2, "loss": 5.5, "learning_rate": 2e-3, "tokens_per_second": 1000.0},
        {"step": 3, "loss": 5.0},  # written after the checkpoint by the stopped run: not its past
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 4, "lo')  # cut by a kill
    state = LiveRunState()
    state.replay(2, 30, read_log_records(path, up_to_step=2))
    snap = state.snapshot()
    assert (snap.train_curve, snap.eval_curve) == ([(1, 6.0), (2, 5.5)], [(2, 5.9)])
    assert (snap.step, snap.max_steps, snap.loss, snap.learning_rate) == (2, 30, 5.5, 2e-3)
    assert (snap.tokens_per_second, snap.eval_loss, snap.eval_bpb) == (1000.0, 5.9, 4.1)


def test_text_generator_streams_a_hub_repo_and_lists_runs(tmp_path):
    """The Generate tab's loader: ORG/NAME at a tag in a hub folder, streamed piece by piece, the
    same text as generate_samples; the model stays loaded; runs and checkpoints are offered."""
    from hub_fixtures import make_run

    from minigpt.app.models import Models, list_model_choices
    from minigpt.generation import SamplingSettings, generate_samples
    from minigpt.hub.loading import load_model, load_tokenizer, resolve_model
    from minigpt.hub.publishing import publish
    from minigpt.run_layout import read_run_config

    run = make_run(tmp_path, seed=0)
    publish(run, "org/app", tmp_path / "hub", tag="v1")
    settings = SamplingSettings(max_new_tokens=8, temperature=1.0, top_k=50, seed=5)
    generator = Models()
    streamed = list(
        generator.stream("org/app", "ROMEO:", settings, revision="v1", hub_dir=str(tmp_path / "hub"))
    )
    texts = [text for text, _ in streamed]
    assert {seed for _, seed in streamed} == {5} and len(texts) > 1
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))  # it grows as it streams

    location = resolve_model(run)
    expected = generate_samples(
        load_model(location),
        load_tokenizer(location),
        "ROMEO:",
        settings,
        read_run_config(run / "final"),
        stream=False,
    )[0]
    assert texts[-1] == expected
    loaded = generator.load("org/app", "v1", str(tmp_path / "hub"))
    assert generator.load("org/app", "v1", str(tmp_path / "hub")) is loaded  # not loaded again
    assert set(list_model_choices([tmp_path])) == {str(run), str(run / "checkpoint-10")}


def test_chat_replies_continue_a_conversation_and_stop_only_their_page(tmp_path):
    """The Chat tab's replies: streamed into the page's conversation, stopped by that page's Stop
    alone, then a next message continues the conversation, the same as a ChatSession's."""
    from talk_fixtures import build_chat_tokenizer, never_ending_model, save_model

    from minigpt.app.models import Models
    from minigpt.chat.session import ChatSession
    from minigpt.generation import SamplingSettings

    tokenizer = build_chat_tokenizer()
    model = never_ending_model(tokenizer, max_position_embeddings=128)
    folder = str(save_model(tmp_path / "chat", model, tokenizer))
    settings = SamplingSettings(max_new_tokens=30, temperature=0.0)
    replies = Models()
    stream = replies.chat("page-a", folder, [], "Hello", settings, system_prompt="Be brief.")
    shown, reply = next(stream)
    assert shown[0] == {"role": "user", "content": "Hello"} and shown[1]["role"] == "assistant"
    assert reply is None
    assert not replies.stop("page-b") and replies.stop("page-a")
    *_, (conversation, reply) = stream
    assert reply.stopped and reply.new_tokens < 30 and conversation[-1]["content"] == reply.text
    assert not replies.stop("page-a")  # nothing in progress any more

    *_, (conversation, reply) = replies.chat("page-a", folder, conversation, "Again", settings, "Be brief.")
    session = ChatSession(model, tokenizer, settings, "Be brief.", conversation[:2])
    assert "".join(session.reply("Again")) == reply.text and session.messages == conversation
    assert (len(conversation), reply.new_tokens, reply.stopped) == (4, 30, False)


def test_resume_without_a_checkpoint_is_refused(tmp_path):
    from minigpt.app.training_run import RunManager
    from minigpt.errors import ConfigError

    manager = RunManager()
    with pytest.raises(ConfigError, match="^nothing to resume: .* has no complete checkpoint"):
        manager.start(REPO_ROOT / "configs" / "smoke.yaml", f"training.output_dir={tmp_path}", resume=True)
    assert not manager.is_running and manager.snapshot().status == "idle"


def test_a_start_from_a_model_that_is_not_there_is_refused(tmp_path):
    from minigpt.app.training_run import RunManager
    from minigpt.errors import ConfigError

    manager = RunManager()
    with pytest.raises(ConfigError, match="^model.init_from: no model at .*nothere"):
        manager.start(
            REPO_ROOT / "configs" / "smoke.yaml",
            f"training.output_dir={tmp_path / 'run'}",
            init_from=str(tmp_path / "nothere"),
        )
    assert not manager.is_running and not (tmp_path / "run").exists()


# ---- the server and the browser ----------------------------------------------------------------


class ConnectionRecorder:
    """A proxy that answers nothing: it records the first line of every connection made to it."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.requests: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:  # closed
                return
            with connection:
                connection.settimeout(2)
                try:
                    self.requests.append(connection.recv(200).split(b"\r\n")[0].decode(errors="replace"))
                except OSError:
                    self.requests.append("<no request line>")

    def close(self) -> None:
        self.socket.close()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("app")


@pytest.fixture(scope="module")
def recorder() -> Iterator[ConnectionRecorder]:
    recorder = ConnectionRecorder()
    yield recorder
    recorder.close()


@pytest.fixture(scope="module")
def server(workdir, recorder) -> Iterator[tuple[str, subprocess.Popen]]:
    """scripts/app.py with its defaults (no --host), from the repo root (smoke.yaml names data/ there)."""
    port = free_port()
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO_ROOT),
        HF_HOME=str(workdir / "hf_home"),
        HTTP_PROXY=recorder.url,
        HTTPS_PROXY=recorder.url,
        NO_PROXY="127.0.0.1,localhost",
        GRADIO_ANALYTICS_ENABLED="True",  # the app must turn it off itself
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",  # the log holds every line as it is written
    )
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy", "ALL_PROXY", "HF_HUB_OFFLINE"):
        env.pop(name, None)
    log = (workdir / "server.log").open("w")
    process = subprocess.Popen(
        [PYTHON, "scripts/app.py", "--port", str(port), "--runs-dir", str(workdir / "runs")],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,  # transformers' "run the custom code? [y/N]" would print to the log (#48)
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + SERVER_START_TIMEOUT_S
    while "MiniGPT app on" not in (workdir / "server.log").read_text():
        assert process.poll() is None, (workdir / "server.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/", process
    process.send_signal(signal.SIGTERM)  # as Ctrl-C: a run still training would be stopped first
    try:
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
        log.close()


@pytest.fixture(scope="module")
def outside_requests() -> list[str]:
    """URLs the page asked of any host other than the app's server."""
    return []


@pytest.fixture(scope="module")
def page(server, outside_requests):
    if reason := browser_missing():
        pytest.skip(reason)
    url, _ = server
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(UI_TIMEOUT_MS)
        expect.set_options(timeout=UI_TIMEOUT_MS)
        page.on("request", lambda r: None if r.url.startswith(url) else outside_requests.append(r.url))
        page.goto(url)
        expect(page.locator(STATUS)).to_be_visible()
        yield page
        browser.close()


def press(page, button: str, config: str, overrides: str) -> None:
    """Fill the Train form and press a button (the run's status line answers, or an error line)."""
    page.locator("#config input").fill(config)
    page.locator("#config input").press("Enter")
    page.fill("#overrides textarea", overrides)
    page.click(button)


def fill_until_kept(page, selector: str, value: str, commit: str | None = None) -> None:
    """Fill a field of a tab or accordion that was just drawn, commit it (press `commit`, or leave the
    field), and fill it again until it keeps the value. Gradio can give such a field its value a few
    milliseconds after the test typed into it, which undoes the typing: seen beside two busy cores,
    never by a person, who cannot type that fast. The pause lets the tab finish drawing too."""
    box = page.locator(selector)
    for _ in range(FILL_TRIES):
        box.fill(value)
        box.press(commit) if commit else box.blur()
        page.wait_for_timeout(FILL_SETTLE_MS)
        if box.input_value() == value:
            return
    expect(box).to_have_value(value)


def shown_step(page) -> int:
    """The step in the status line ("running · step 12/5000 · ...")."""
    return int(re.search(r"step (\d+)/", page.inner_text(STATUS)).group(1))


def wait_for_step(page, step: int) -> None:
    """Until the status line shows `step` or later (it redraws once a second: steps go by unseen)."""
    page.wait_for_function(
        "([selector, step]) => +(document.querySelector(selector).innerText.match(/step (\\d+)\\//) || [0, -1])[1] >= step",
        arg=[STATUS, step],
    )


def test_server_listens_on_loopback_only(server):
    _, process = server
    listening = [c for c in psutil.Process(process.pid).net_connections(kind="inet") if c.status == "LISTEN"]
    assert listening and {c.laddr.ip for c in listening} == {"127.0.0.1"}


def test_bad_override_and_bad_data_are_one_line_in_the_page(page, workdir):
    press(page, "#start", "configs/smoke.yaml", "training.max_step=10")
    expect(page.locator(TRAIN_ERROR)).to_have_text(
        "error: unknown key training.max_step; did you mean 'training.max_steps'?"
    )
    expect(page.locator(STATUS)).to_contain_text("No run yet")

    empty = workdir / "empty.txt"
    empty.write_text("")
    overrides = (
        f"data.train_files=[{empty}] training.output_dir={workdir / 'bad'} tokenizer.path={workdir / 'tok0'}"
    )
    press(page, "#start", "configs/smoke.yaml", overrides)
    expect(page.locator(TRAIN_ERROR)).to_have_text("")  # it started: the data is read in the run
    expect(page.locator(STATUS)).to_contain_text("failed")
    assert page.inner_text(STATUS).strip().splitlines()[-1] == f"error: train file {empty} is empty"


def test_a_model_to_start_from_that_is_not_there_is_one_line_in_the_page(page, workdir):
    missing = workdir / "nothere"
    page.locator("#init-from input").fill(str(missing))
    page.locator("#init-from input").press("Enter")
    press(page, "#start", "configs/smoke.yaml", f"training.output_dir={workdir / 'from-base'}")
    expect(page.locator(TRAIN_ERROR)).to_contain_text(f"error: model.init_from: no model at {missing}")
    assert not (workdir / "from-base").exists()
    page.locator("#init-from input").fill("")  # the next runs start from random weights
    page.locator("#init-from input").press("Enter")


def test_train_watch_stop_resume_then_generate(page, workdir):
    from minigpt.app.training_run import CURVE_COLOURS

    output_dir = workdir / "runs" / "smoke"
    overrides = " ".join(
        [
            f"training.output_dir={output_dir}",
            f"tokenizer.path={workdir / 'tokenizer'}",
            "training.max_steps=5000",  # far more than the test waits for: it stops the run itself
            *("training.logging_steps=1", "training.eval_steps=3", "training.sample_steps=3"),
            "training.save_steps=10000",  # the only checkpoints are the ones Stop writes
            *("data.show_progress=false", "tokenizer.show_progress=false"),
        ]
    )
    press(page, "#start", "configs/smoke.yaml", overrides)
    expect(page.locator(STATUS)).to_contain_text(f"started: configs/smoke.yaml -> {output_dir}")

    # The samples box shows a sample; the plot draws two lines, training and validation loss.
    expect(page.locator("#samples textarea")).to_have_value(
        re.compile(r"^\[step \d+, prompt 'ROMEO:'\]\nROMEO:")
    )
    page.wait_for_function(  # two lines drawn, in the two curves' colours (a line without one is invisible)
        "colours => colours.every(c => document.querySelector("
        "`#loss-curve path[aria-roledescription='line mark'][stroke='${c}']`))",
        arg=list(CURVE_COLOURS.values()),
    )
    expect(page.locator("#loss-curve")).to_contain_text("validation")
    status = page.inner_text(STATUS)
    for shown in ("running", "loss ", "lr ", "tokens/s", "ETA "):
        assert shown in status, status

    # A second start is refused; a reload shows the live run and the form it was started from.
    press(page, "#start", "configs/smoke.yaml", overrides)
    expect(page.locator(TRAIN_ERROR)).to_contain_text("error: a run is already training")
    expect(page.locator(STATUS)).to_contain_text("running")
    page.reload()
    expect(page.locator(STATUS)).to_contain_text("running")
    wait_for_step(page, shown_step(page) + 2)
    expect(page.locator("#overrides textarea")).to_have_value(overrides)

    # Stop saves a checkpoint and says where.
    page.click("#stop")
    expect(page.locator(STATUS)).to_contain_text("checkpoint saved to")
    stopped_at = shown_step(page)
    checkpoint = output_dir / f"checkpoint-{stopped_at}"
    assert f"stopped at step {stopped_at}: checkpoint saved to {checkpoint}" in page.inner_text(STATUS)
    assert (checkpoint / "model.safetensors").is_file() and not (output_dir / "final").exists()

    # Resume continues from it, then stop again.
    press(page, "#resume", "configs/smoke.yaml", overrides)
    expect(page.locator(STATUS)).to_contain_text(f"resuming {output_dir} from {checkpoint}")
    expect(page.locator(TRAIN_ERROR)).to_have_text("")
    wait_for_step(page, stopped_at + 2)
    page.click("#stop")
    expect(page.locator(STATUS)).to_contain_text(f"checkpoint saved to {output_dir}/checkpoint-")
    latest = output_dir / f"checkpoint-{shown_step(page)}"
    assert shown_step(page) >= stopped_at + 2 and latest.is_dir()

    # A new run into this folder is refused: it holds a run (continue it, or overwrite it on purpose).
    press(page, "#start", "configs/smoke.yaml", overrides)
    expect(page.locator(TRAIN_ERROR)).to_contain_text(f"error: {output_dir} already holds a run")
    expect(page.locator(TRAIN_ERROR)).to_contain_text("continue it with Resume")

    # Generate from the newest checkpoint (the page offers it), streamed; same text as generate_samples.
    page.get_by_role("tab", name="Generate").click()
    expect(page.locator("#model input")).to_have_value(str(latest))
    page.fill("#prompt textarea", "ROMEO:")
    page.fill("#max-new-tokens input", "12")
    page.fill("#temperature input", "1")
    page.fill("#seed input", "3")
    page.click("#generate")
    expect(page.locator(GENERATE_MESSAGE)).to_have_text("done (seed 3)")
    shown = page.input_value("#generated textarea")

    from minigpt.generation import SamplingSettings, generate_samples
    from minigpt.hub.loading import load_model, load_tokenizer, resolve_model
    from minigpt.run_layout import read_run_config

    location = resolve_model(latest)
    settings = SamplingSettings(max_new_tokens=12, temperature=1.0, top_k=50, top_p=1.0, seed=3)
    model, tokenizer = load_model(location), load_tokenizer(location)
    expected = generate_samples(model, tokenizer, "ROMEO:", settings, read_run_config(latest), stream=False)[
        0
    ]
    assert shown == expected and shown.startswith("ROMEO:") and len(shown) > len("ROMEO:")

    # A missing model is one line too, and the server still answers.
    page.fill("#model input", str(workdir / "no-such-model"))
    page.click("#generate")
    expect(page.locator(GENERATE_MESSAGE)).to_have_text(
        f"error: no model at {workdir / 'no-such-model'}: no such folder"
    )


def test_chat_tab_streams_a_reply_stops_continues_and_resets(page, workdir):
    """The Chat tab on a tiny chat model: the reply streams in, Stop ends it midway, the chat goes
    on with the same text as a ChatSession's, Reset clears it; a base model is one line."""
    import inspect

    from talk_fixtures import build_chat_tokenizer, never_ending_model, save_model

    from minigpt.chat.session import ChatSession
    from minigpt.generation import SamplingSettings

    tokenizer = build_chat_tokenizer()
    # Replies of seconds even on a fast machine (4000 tokens: about 8 s on one Xeon core), so that
    # Stop and Reset land midway however late the page shows the reply (960 tokens, about 1 s,
    # ended before a Stop under CI's load once).
    model = never_ending_model(tokenizer, max_position_embeddings=LONG_REPLY + 96)
    folder = save_model(workdir / "chat-model", model, tokenizer)
    page.get_by_role("tab", name="Chat").click()
    fill_until_kept(page, "#chat-model input", str(folder), commit="Enter")  # in the tab just drawn
    page.get_by_text("Sampling").click()
    fill_until_kept(page, "#chat-temperature input", "0")  # in the accordion just drawn
    fill_until_kept(page, "#chat-max-new-tokens input", str(LONG_REPLY))
    page.fill("#chat-system textarea", "You are Juliet.")
    page.fill("#chat-input textarea", "Good morrow")
    expect(page.locator("#chat-temperature input")).to_have_value("0")  # greedy: the reply is checked below
    page.locator("#chat-input textarea").press("Enter")

    # Streamed: the reply shows while it is being written; Stop ends it there.
    expect(page.locator(CHAT_USER)).to_have_text(["Good morrow"])
    page.wait_for_function(
        "([bot, status]) => document.querySelector(bot)?.innerText.trim().length > 0"
        " && document.querySelector(status).innerText.startsWith('replying')",
        arg=[CHAT_BOT, CHAT_MESSAGE],
    )
    page.click("#chat-stop")
    expect(page.locator(CHAT_MESSAGE)).to_contain_text("stopped: ")
    written = int(re.search(r"stopped: (\d+) tokens", page.inner_text(CHAT_MESSAGE)).group(1))
    assert 0 < written < LONG_REPLY
    session = ChatSession(
        model, tokenizer, SamplingSettings(max_new_tokens=written, temperature=0.0), "You are Juliet."
    )
    first = "".join(session.reply("Good morrow"))
    expect(page.locator(CHAT_BOT)).to_have_text([inspect.cleandoc(first)])  # as the Chatbot shows text
    page.screenshot(path=str(workdir / "chat.png"))

    # The chat goes on from the stopped reply.
    page.fill("#chat-max-new-tokens input", "8")
    page.fill("#chat-input textarea", "Speak again")
    page.click("#chat-send")
    expect(page.locator(CHAT_MESSAGE)).to_contain_text("reply limit reached: 8 tokens")
    settings = SamplingSettings(max_new_tokens=8, temperature=0.0)
    session = ChatSession(model, tokenizer, settings, "You are Juliet.", session.messages)
    second = "".join(session.reply("Speak again"))
    expect(page.locator(CHAT_USER)).to_have_text(["Good morrow", "Speak again"])
    expect(page.locator(CHAT_BOT)).to_have_text([inspect.cleandoc(first), inspect.cleandoc(second)])
    expect(page.locator("#chat-input textarea")).to_have_value("")

    # Reset during a reply stops it and clears the conversation, which the reply's end leaves cleared.
    page.fill("#chat-max-new-tokens input", str(LONG_REPLY))
    page.fill("#chat-input textarea", "Once more")
    page.click("#chat-send")
    expect(page.locator(CHAT_USER)).to_have_count(3)
    expect(page.locator(CHAT_MESSAGE)).to_contain_text("replying")
    page.click("#chat-reset")
    expect(page.locator(CHAT_MESSAGE)).to_have_text("the conversation is reset")
    page.wait_for_timeout(1000)  # a late update of the stopped reply would show in this time
    expect(page.locator(CHAT_BOT)).to_have_count(0)
    expect(page.locator(CHAT_MESSAGE)).to_have_text("the conversation is reset")

    # A base model (no chat template) is one line; the message stays to be sent elsewhere.
    base = save_model(
        workdir / "base-model", never_ending_model(build_tiny_tokenizer()), build_tiny_tokenizer()
    )
    page.locator("#chat-model input").fill(str(base))
    page.locator("#chat-model input").press("Enter")
    page.fill("#chat-input textarea", "Hello")
    page.click("#chat-send")
    expect(page.locator(CHAT_MESSAGE)).to_have_text(
        f"error: {base} has no chat template (a base model): fine-tune it on conversations first: "
        f"python scripts/train.py configs/chat.yaml model.init_from={base}"
    )
    expect(page.locator("#chat-input textarea")).to_have_value("Hello")
    expect(page.locator(CHAT_USER)).to_have_count(0)


def test_nothing_went_to_the_network(page, outside_requests, recorder, server, workdir):
    """Neither the server (Gradio's analytics and version check, hub telemetry) nor the page; and
    loading the models above neither asked on stdin nor fell back to a bare config (#48)."""
    log = (workdir / "server.log").read_text()
    assert "custom code" not in log and "instantiate a model of type" not in log
    assert outside_requests == []
    assert recorder.requests == []
    _, process = server
    assert process.poll() is None  # every error above left it running
