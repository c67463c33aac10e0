"""Chat sessions (minigpt/chat/session.py) and the terminal chat (scripts/chat.py) on tiny models."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import select
import shutil
import subprocess
import sys
import termios
import time

import pytest
import torch
import yaml
from conftest import PYTHON, REPO_ROOT, build_tiny_tokenizer, load_script, tiny_model
from hub_fixtures import make_run
from talk_fixtures import at_once_ending_model, build_chat_tokenizer, never_ending_model, save_model

from minigpt.chat.session import ChatError, ChatSession, NotAChatModelError
from minigpt.chat.terminal import chat_in_terminal
from minigpt.errors import run_cli
from minigpt.generation import SamplingSettings
from minigpt.hub.loading import load_tokenizer, resolve_model

CHAT = REPO_ROOT / "scripts" / "chat.py"
GREEDY = dict(temperature=0.0)


@pytest.fixture(scope="module")
def tokenizer():
    return build_chat_tokenizer()


@pytest.fixture(scope="module")
def model(tokenizer):
    return never_ending_model(tokenizer)


def turns(count: int) -> list[dict[str, str]]:
    """`count` user/assistant exchanges of distinct text."""
    out = []
    for i in range(count):
        out += [
            {"role": "user", "content": f"Speak, {i}!"},
            {"role": "assistant", "content": f"I will, {i}."},
        ]
    return out


def render(tokenizer, messages, system=None) -> list[int]:
    if system:
        messages = [{"role": "system", "content": system}, *messages]
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )


def test_history_is_cut_to_the_context_by_whole_turns(tokenizer):
    """The model reads the system prompt, as many of the latest turns as fit with the reply's room,
    and the new message; one more turn would not fit; the history itself keeps everything."""
    model = never_ending_model(tokenizer, max_position_embeddings=128)
    system = "You are Romeo."
    history = turns(6)
    session = ChatSession(model, tokenizer, SamplingSettings(max_new_tokens=12), system, history)
    ids, dropped = session.prompt_ids("Hark!")
    new = {"role": "user", "content": "Hark!"}
    assert ids[0].tolist() == render(tokenizer, history[dropped:] + [new], system)
    budget = 128 - 12  # the model's context, less the reply limit
    assert 0 < dropped < len(history) and dropped % 2 == 0  # whole user/assistant pairs
    assert ids.shape[1] <= budget < len(render(tokenizer, history[dropped - 2 :] + [new], system))
    text = tokenizer.decode(ids[0])
    assert text.startswith("<|im_start|>system\nYou are Romeo.<|im_end|>\n")
    assert text.endswith("<|im_start|>user\nHark!<|im_end|>\n<|im_start|>assistant\n")
    assert session.messages == history

    # With nothing to drop, the whole history is read.
    short = ChatSession(model, tokenizer, SamplingSettings(max_new_tokens=12), system, history[:2])
    assert short.prompt_ids("Hark!")[1] == 0


def test_a_message_with_no_room_left_for_the_reply_is_refused(model, tokenizer):
    session = ChatSession(model, tokenizer, SamplingSettings(max_new_tokens=12))
    with pytest.raises(
        ChatError, match=r"^the message is too long: .* context of 64 tokens keeps 12 for the reply"
    ):
        next(session.reply("Romeo, Romeo, wherefore art thou Romeo? " * 4))
    assert session.messages == [] and not session.is_replying
    with pytest.raises(Exception, match="reply limit .64 tokens. leaves no room"):
        ChatSession(model, tokenizer, SamplingSettings(max_new_tokens=64))


def test_a_reply_streams_the_greedy_tokens_up_to_its_limit(model, tokenizer):
    session = ChatSession(model, tokenizer, SamplingSettings(max_new_tokens=10, **GREEDY), "Be brief.")
    pieces = list(session.reply("Good morrow"))
    reply = session.last_reply
    assert len(pieces) > 1 and "".join(pieces) == reply.text
    assert (reply.new_tokens, reply.ended, reply.stopped, reply.dropped_messages) == (10, False, False, 0)

    prompt = torch.tensor([render(tokenizer, [{"role": "user", "content": "Good morrow"}], "Be brief.")])
    expected = model.generate(
        prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=10
    )
    assert reply.text == tokenizer.decode(expected[0, prompt.shape[1] :])
    assert session.messages == [
        {"role": "user", "content": "Good morrow"},
        {"role": "assistant", "content": reply.text},
    ]


def test_the_reply_limit_holds_whatever_length_the_models_generation_config_sets(tokenizer, caplog):
    """A training run's model bounds length with max_length (its context), a stock export's with
    max_new_tokens: either way a reply runs to the session's limit, and transformers warns of nothing."""
    for bound in ({"max_length": 64}, {"max_new_tokens": 3}):
        model = never_ending_model(tokenizer)
        model.generation_config.update(**bound)
        session = ChatSession(model, tokenizer, SamplingSettings(max_new_tokens=10, **GREEDY))
        with caplog.at_level("WARNING"):
            list(session.reply("Hello"))
        assert session.last_reply.new_tokens == 10, bound
    assert "seem to have been set" not in caplog.text


def test_a_reply_ends_at_the_end_of_turn_token(tokenizer):
    session = ChatSession(
        at_once_ending_model(tokenizer), tokenizer, SamplingSettings(max_new_tokens=10, **GREEDY)
    )
    assert list(session.reply("Hello")) == []
    assert (session.last_reply.new_tokens, session.last_reply.ended, session.last_reply.text) == (1, True, "")


def test_stop_ends_a_reply_midway_and_the_chat_goes_on(model, tokenizer):
    session = ChatSession(model, tokenizer, SamplingSettings(max_new_tokens=40, **GREEDY))
    shown = ""
    for piece in session.reply("Speak"):
        shown += piece
        session.stop()  # as Ctrl-C or the Stop button, at the first piece
    reply = session.last_reply
    assert reply.stopped and not reply.ended and reply.new_tokens < 40
    assert session.messages[-1] == {"role": "assistant", "content": reply.text} and reply.text.startswith(
        shown
    )
    assert not session.is_replying

    list(session.reply("Again"))  # the next reply is whole
    assert (session.last_reply.new_tokens, session.last_reply.stopped) == (40, False)
    assert len(session.messages) == 4

    # A caller that stops reading (a closed page) ends the generation too; the turn is kept.
    replies = session.reply("Once more")
    next(replies)
    replies.close()
    assert session.last_reply.stopped and not session.is_replying and len(session.messages) == 6


def test_reset_forgets_the_conversation_and_seeds_count_per_reply(model, tokenizer):
    settings = SamplingSettings(max_new_tokens=8, temperature=1.0, top_k=50, seed=5)
    session = ChatSession(model, tokenizer, settings)
    first = "".join(session.reply("Hello"))
    second = "".join(session.reply("Hello"))
    assert [r["role"] for r in session.messages] == ["user", "assistant"] * 2
    assert session.last_reply.seed == 6  # reply n of a conversation draws with seed + n
    session.reset()
    assert session.messages == [] and session.last_reply is None
    assert "".join(session.reply("Hello")) == first and session.last_reply.seed == 5
    assert first != second


def test_a_base_model_is_no_chat_model(model):
    with pytest.raises(
        NotAChatModelError, match=r"^base has no chat template .*configs/chat.yaml model.init_from=base$"
    ):
        ChatSession(model, build_tiny_tokenizer(), name="base")


# ---- scripts/chat.py ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_model_dir(tmp_path_factory, model, tokenizer):
    return save_model(tmp_path_factory.mktemp("chat") / "model", model, tokenizer)


def run_chat(args, stdin: str, monkeypatch, capsys) -> tuple[int, str, str]:
    """`python scripts/chat.py args` with `stdin` as its input, in this process (as run_cli runs it,
    without the seconds a fresh Python spends importing torch): exit code, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["chat.py", *map(str, args)])
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        run_cli(load_script("chat").main)
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def test_cli_chats_from_stdin_resets_and_quits(chat_model_dir, model, tokenizer, monkeypatch, capsys):
    code, out, err = run_chat(
        [chat_model_dir, "--system", "Be brief.", "--temperature", "0", "--max-new-tokens", "6"],
        "Hello\nHow now?\n/reset\nHello\n/quit\nnever read\n",
        monkeypatch,
        capsys,
    )
    assert code == 0, err
    session = ChatSession(model, tokenizer, SamplingSettings(max_new_tokens=6, **GREEDY), "Be brief.")
    first = "".join(session.reply("Hello"))
    second = "".join(session.reply("How now?"))
    assert first != second
    assert out == f"> {first}\n> {second}\n> > {first}\n> "  # "Hello" again after /reset
    assert f"chat with {chat_model_dir} (context 64 tokens, replies up to 6): /reset" in err
    assert "(the conversation is reset)" in err


def test_terminal_chat_ends_at_end_of_input_and_says_when_the_context_is_full(tokenizer):
    """In-process, lines from a list: replies printed, the context note once, EOF ends the chat."""
    model = never_ending_model(tokenizer, seed=1)
    session = ChatSession(model, tokenizer, SamplingSettings(max_new_tokens=12, **GREEDY))
    lines = iter(["Hello, good sir!", "", "And what of thee, good sir?", "Speak again, good sir!"])

    def read(prompt: str) -> str:
        line = next(lines, None)
        if line is None:
            raise EOFError
        return line

    out, err = io.StringIO(), io.StringIO()
    chat_in_terminal(session, read, out, err)
    replies = [m["content"] for m in session.messages if m["role"] == "assistant"]
    assert out.getvalue() == "".join(f"{r}\n" for r in replies) + "\n" and len(replies) == 3
    assert err.getvalue().count("(the conversation outgrew the model's context of 64 tokens") == 1
    assert session.last_reply.dropped_messages > 0


def test_chat_script_lists_the_decodings_of_the_package():
    import runpy

    from minigpt.generation import DECODINGS

    assert runpy.run_path(str(CHAT))["DECODINGS"] == DECODINGS


def test_cli_on_a_base_model_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    base = save_model(tmp_path / "base", tiny_model(), build_tiny_tokenizer())
    code, out, err = run_chat([base], "Hello\n", monkeypatch, capsys)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"error: {base} has no chat template (a base model): fine-tune it on conversations first: "
        f"python scripts/train.py configs/chat.yaml model.init_from={base}"
    ]


def piped(script, args, stdin: str, env) -> subprocess.CompletedProcess:
    """`python scripts/<script> args` in a fresh process (MiniGPT not yet registered with transformers),
    `stdin` piped in."""
    return subprocess.run(
        [PYTHON, str(REPO_ROOT / "scripts" / script), *map(str, args)],
        input=stdin, env=env, capture_output=True, text=True, timeout=300,
    )


def test_piped_chat_asks_nothing_and_answers_and_a_base_model_is_one_line(
    chat_model_dir, model, tokenizer, tmp_path, subprocess_env
):
    """#48: loading the project's own model folder never asks transformers' "Do you wish to run the
    custom code? [y/N]", which read the piped lines as answers (and the chat answered nothing)."""
    result = piped("chat.py", [chat_model_dir, "--temperature", "0", "--max-new-tokens", "6"], "Hello\n/quit\n", subprocess_env)
    assert result.returncode == 0, result.stderr[-3000:]
    session = ChatSession(model, tokenizer, SamplingSettings(max_new_tokens=6, **GREEDY))
    assert result.stdout == f"> {''.join(session.reply('Hello'))}\n> "
    assert "custom code" not in result.stderr

    base = save_model(tmp_path / "base", tiny_model(), build_tiny_tokenizer())
    result = piped("chat.py", [base], "Hello\n", subprocess_env)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [  # no question, no "model of type `minigpt` ..." warning
        f"error: {base} has no chat template (a base model): fine-tune it on conversations first: "
        f"python scripts/train.py configs/chat.yaml model.init_from={base}"
    ]


def text_and_chat_runs(root, tokenizer) -> tuple:
    """A base run as training leaves it (its final/ carries the chat tokenizer, as every MiniGPT
    tokenizer does) and the same run recorded as a chat run (`data.format: chat`)."""
    base = make_run(root, tokenizer=tokenizer)
    chat = root / "chat-run"
    shutil.copytree(base, chat)
    for config_path in (chat / "resolved_config.yaml", chat / "final" / "resolved_config.yaml"):
        config = yaml.safe_load(config_path.read_text())
        config["data"].update(format="chat", shift_blocks=False)
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    return base, chat


def test_cli_refuses_a_base_run_that_carries_the_chat_template_and_opens_a_chat_run(
    tmp_path, tokenizer, monkeypatch, capsys
):
    base, chat = text_and_chat_runs(tmp_path, tokenizer)
    assert load_tokenizer(resolve_model(base)).chat_template  # the template alone does not tell
    code, out, err = run_chat([base], "Hello\n", monkeypatch, capsys)
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        f"error: {base} was trained on text, not conversations (a base model: data.format auto in its "
        f"resolved_config.yaml): fine-tune it on conversations first: python scripts/train.py "
        f"configs/chat.yaml model.init_from={base}"
    ]
    code, out, err = run_chat([chat, "--max-new-tokens", "4"], "", monkeypatch, capsys)
    assert (code, out) == (0, "> \n"), err  # the prompt, then end of input: the chat opened
    assert f"chat with {chat} (context 64 tokens, replies up to 4)" in err


def test_a_reply_limit_that_leaves_no_room_for_a_message_is_refused_once_at_the_start(
    chat_model_dir, tokenizer, monkeypatch, capsys
):
    fixed = len(render(tokenizer, [{"role": "user", "content": ""}], "Be brief."))  # all but the message
    most = 64 - fixed - 1  # beside a one-token message
    code, out, err = run_chat(
        [chat_model_dir, "--system", "Be brief.", "--max-new-tokens", str(most + 1)],
        "Hello\nHi\n",
        monkeypatch,
        capsys,
    )
    assert (code, out) == (2, "")
    errors = [line for line in err.splitlines() if "error" in line]  # (before it, the weights' loading bar)
    assert errors == err.splitlines()[-1:] == [
        f"error: the reply limit ({most + 1} tokens) leaves no room for a message in the model's context "
        f"of 64 tokens (the system prompt and the turn's headers take {fixed}): lower it to at most {most}"
    ]
    code, out, err = run_chat(  # the largest limit allowed: a one-token message is answered
        [chat_model_dir, "--system", "Be brief.", "--max-new-tokens", str(most), "--temperature", "0"],
        "a\n",
        monkeypatch,
        capsys,
    )
    assert code == 0 and "error" not in err, err
    assert out.startswith("> ") and len(out) > len("> \n> \n")


def read_until(fd: int, wanted: str, timeout: float = 60.0) -> str:
    """Terminal output up to and including `wanted`."""
    seen, deadline = "", time.monotonic() + timeout
    while wanted not in seen:
        assert time.monotonic() < deadline, f"no {wanted!r} in {seen!r}"
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen += os.read(fd, 4096).decode(errors="replace")
            except OSError:  # the child closed the terminal
                break
    assert wanted in seen, f"no {wanted!r} in {seen!r}"
    return seen


def test_ctrl_c_stops_a_reply_then_quits_at_the_prompt(tmp_path, tokenizer, subprocess_env):
    """In a terminal: Ctrl-C during a reply ends the reply and the chat goes on; at the prompt it quits (0)."""
    # A longer context, so a reply lasts long enough to be interrupted.
    folder = save_model(
        tmp_path / "long", never_ending_model(tokenizer, max_position_embeddings=1024), tokenizer
    )
    main, child = pty.openpty()
    process = subprocess.Popen(
        [PYTHON, str(CHAT), str(folder), "--temperature", "0", "--max-new-tokens", "960"],
        stdin=child,
        stdout=child,
        stderr=child,
        env=subprocess_env,
        start_new_session=True,  # a session of its own whose terminal is the pty: ^C reaches it alone
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )
    os.close(child)
    try:
        read_until(main, "> ")
        os.write(main, b"Speak\r")
        read_until(main, "Speak\r\n")  # the terminal's echo (then perhaps a line editor's escapes)
        reply = read_until(main, " ")  # a word of the reply: it is being written
        assert "error" not in reply, reply
        os.write(main, b"\x03")  # Ctrl-C, as the terminal sends it
        seen = read_until(main, "[stopped]")
        if "> " not in seen.partition("[stopped]")[2]:  # the prompt again, perhaps in the same read
            seen += read_until(main, "> ")
        # At the prompt; not within the instant after it is shown, when a line editor has printed it
        # but not yet started waiting for the keyboard (a signal then waits for the next key).
        time.sleep(0.5)
        os.write(main, b"\x03")
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
        os.close(main)
    assert "Traceback" not in seen and "interrupted" not in seen
