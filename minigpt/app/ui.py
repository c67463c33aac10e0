"""The page, in Gradio: a Train tab (start, stop, resume, watch), a Generate tab and a Chat tab.

Every page polls the server's one `RunManager` once a second and redraws only what changed, so any
number of pages show the same live run. Actions answer as one line; errors never pop up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gradio as gr

from minigpt.chat.session import Reply
from minigpt.generation import SamplingSettings

from .models import Messages, Models, list_model_choices
from .training_run import (
    CURVE_COLOURS,
    FINISHED,
    IDLE,
    STOPPED,
    RunManager,
    config_choices,
    curve_frame,
    display_path,
    error_line,
    samples_text,
    status_markdown,
)

POLL_SECONDS = 1.0
TITLE = "MiniGPT"
CSS = """
#run-status p { margin: 0.2em 0; }
#train-error p { color: var(--error-text-color); }
#chat-history .message-content { white-space: pre-wrap; }
.message p { margin: 0; }
"""


def errors_of(action: Callable[[], object]) -> str:
    """Run a button's action; "" when it worked (the run's status line says what it did, on every
    page), else its error as one line."""
    try:
        action()
    except Exception as err:  # the server keeps running whatever the action raised
        return error_line(err)
    return ""


def build_app(manager: RunManager, models: Models, config_dir: Path | None, runs_dir: Path) -> gr.Blocks:
    """The Gradio Blocks of the app (not launched); `config_dir` None: the repository's configs/."""
    configs = config_choices(config_dir)
    default_config = next((c for c in configs if c.endswith("shakespeare.yaml")), configs[0] if configs else "")

    def models_list() -> list[str]:
        roots = [runs_dir]
        output_dir = manager.snapshot().output_dir
        if output_dir:  # the current run may write outside runs_dir
            roots += [Path(output_dir), Path(output_dir).parent]
        return list(dict.fromkeys(display_path(Path(c)) for c in list_model_choices(roots)))

    with gr.Blocks(title=TITLE, analytics_enabled=False) as app:
        gr.Markdown(f"# {TITLE}\nTrain a small GPT, watch it learn, stop it, talk to it.")
        seen = gr.State((-1, -1))  # this page's last drawn (version, curve_version)
        with gr.Tab("Train"):
            with gr.Row():
                config = gr.Dropdown(
                    configs, value=default_config, allow_custom_value=True, label="Run config",
                    info="a config in configs/, or the path of your own", elem_id="config", scale=1,
                )
                overrides = gr.Textbox(
                    label="Overrides", info="section.key=value, separated by spaces or new lines, as on the command line",
                    placeholder="training.max_steps=200 model.hidden_size=64", lines=2, elem_id="overrides", scale=2,
                )
            with gr.Row():
                init_from = gr.Dropdown(
                    [""] + models_list(), value="", allow_custom_value=True, label="Start from a model",
                    info="empty: random weights; a run, checkpoint or model folder, or ORG/NAME in the hub "
                    "folder (a tag: model.init_revision=... in the overrides)", elem_id="init-from",
                )
            with gr.Row():
                start = gr.Button("Start", variant="primary", elem_id="start")
                stop = gr.Button("Stop", variant="stop", elem_id="stop")
                resume = gr.Button("Resume", elem_id="resume")
            train_error = gr.Markdown(elem_id="train-error", elem_classes="message")
            status = gr.Markdown(status_markdown(manager.snapshot()), elem_id="run-status")
            with gr.Row():
                curve = gr.LinePlot(
                    curve_frame(manager.snapshot()), x="step", y="loss", color="curve", color_map=CURVE_COLOURS,
                    title="Loss (nats per token)", height=320, elem_id="loss-curve", scale=3,
                )
                samples = gr.Textbox(
                    label="Latest samples", lines=12, max_lines=12, interactive=False, autoscroll=False,
                    elem_id="samples", scale=2,
                )

        with gr.Tab("Generate"):
            model, revision, hub_dir, refresh = model_picker("", "a run, checkpoint or model folder, or ORG/NAME in the hub folder", models_list())
            prompt = gr.Textbox(label="Prompt", lines=3, placeholder="ROMEO:", elem_id="prompt")
            with gr.Row():
                max_new_tokens, temperature, top_k, top_p, seed = sampling_numbers("", "Max new tokens", "-1: a new random seed")
            generate = gr.Button("Generate", variant="primary", elem_id="generate")
            generate_message = gr.Markdown(elem_id="generate-message", elem_classes="message")
            output = gr.Textbox(label="Text", lines=10, interactive=False, elem_id="generated")

        with gr.Tab("Chat"):
            chat_model, chat_revision, chat_hub_dir, chat_refresh = model_picker(
                "chat-",
                "a chat model (fine-tuned on conversations): a run, checkpoint or model folder, "
                "or ORG/NAME in the hub folder",
                models_list(),
            )
            system_prompt = gr.Textbox(
                label="System prompt", placeholder="who the model is, how it answers (optional)", elem_id="chat-system"
            )
            chatbot = gr.Chatbot(  # the model's text as it wrote it; no "share" button: it posts to the hub
                label="Conversation", height=420, render_markdown=False, buttons=["copy", "copy_all"], elem_id="chat-history"
            )
            chat_input = gr.Textbox(label="Message", placeholder="Enter sends", elem_id="chat-input", autofocus=False)
            with gr.Row():
                chat_send = gr.Button("Send", variant="primary", elem_id="chat-send")
                chat_stop = gr.Button("Stop", variant="stop", elem_id="chat-stop")
                chat_reset = gr.Button("Reset", elem_id="chat-reset")
            chat_status = gr.Markdown(elem_id="chat-message", elem_classes="message")
            with gr.Accordion("Sampling", open=False):
                with gr.Row():
                    chat_max_new_tokens, chat_temperature, chat_top_k, chat_top_p, chat_seed = sampling_numbers(
                        "chat-", "Reply limit (tokens)", "-1: new random seeds"
                    )
            conversation = gr.State([])  # this page's conversation, exactly as said (the Chatbot reformats it)

        # ---- Train tab ---------------------------------------------------------------------
        def draw(seen_versions: tuple[int, int], model_value: str | None, list_models: bool = False) -> tuple[Any, ...]:
            """Everything that changed since this page last drew: status, curve, samples, models
            (`list_models`: list them even when no run has just ended, as a page opens)."""
            snap = manager.snapshot()
            if (snap.version, snap.curve_version) == tuple(seen_versions):
                return gr.skip(), gr.skip(), gr.skip(), gr.skip(), seen_versions
            plot = curve_frame(snap) if snap.curve_version != seen_versions[1] else gr.skip()
            listed = gr.update(choices=models_list()) if list_models else gr.skip()
            if snap.status in (STOPPED, FINISHED):  # a new checkpoint or final/ to try
                produced = snap.final_dir or snap.checkpoint
                listed = gr.update(choices=models_list(), value=display_path(Path(produced)) if produced else model_value)
            return status_markdown(snap), plot, samples_text(snap), listed, (snap.version, snap.curve_version)

        drawn = [status, curve, samples, model, seen]
        timer = gr.Timer(POLL_SECONDS)
        timer.tick(draw, [seen, model], drawn, show_progress="hidden", concurrency_limit=None, queue=False)

        def on_load(seen_versions: tuple[int, int], model_value: str | None) -> tuple[Any, ...]:
            """A page opened or reloaded: draw the run as it is, with the form it was started from."""
            snap = manager.snapshot()
            form = (gr.skip(), gr.skip())
            if snap.status != IDLE:
                form = (snap.config, " ".join(snap.overrides))
            return (*form, *draw((-1, -1), model_value, list_models=True))

        app.load(on_load, [seen, model], [config, overrides, *drawn], show_progress="hidden")

        for button, again in ((start, False), (resume, True)):  # both answer at once: no spinner
            button.click(
                lambda c, o, b, again=again: errors_of(lambda: manager.start(c, o, resume=again, init_from=b)),
                [config, overrides, init_from],
                train_error,
                show_progress="hidden",
                concurrency_limit=None,
            )
        stop.click(lambda: errors_of(manager.stop), None, train_error, show_progress="hidden", concurrency_limit=None)

        # ---- Generate tab ------------------------------------------------------------------
        refresh.click(lambda: gr.update(choices=models_list()), None, model)

        def run_generation(name: str | None, rev: str, hub: str, prompt_text: str, *numbers) -> Iterator[tuple[str, str]]:
            if not (name or "").strip():
                yield "", "error: choose a model: a run, checkpoint or model folder, or ORG/NAME"
                return
            text, used_seed = "", None
            try:
                yield "", f"loading {name} ..."
                for text, used_seed in models.stream(name, prompt_text, sampling_settings(*numbers), rev, hub):
                    yield text, f"generating (seed {used_seed}) ..."
            except Exception as err:  # the server keeps running whatever generation raised
                yield text, error_line(err)
                return
            yield text, f"done (seed {used_seed})" if used_seed is not None else "done"

        generate.click(
            run_generation,
            [model, revision, hub_dir, prompt, max_new_tokens, temperature, top_k, top_p, seed],
            [output, generate_message],
            concurrency_limit=1,  # one model in memory, one generation at a time
        )

        # ---- Chat tab ----------------------------------------------------------------------
        chat_refresh.click(lambda: gr.update(choices=models_list()), None, chat_model)

        def run_chat(
            request: gr.Request, name: str | None, rev: str, hub: str, system_text: str, messages: Messages, text: str, *numbers
        ) -> Iterator[tuple[Any, ...]]:
            """Stream the reply to `text` into the conversation; (chatbot, conversation, input, status).
            (`request` first: Gradio passes it by position, and only before *numbers.)"""
            if not (name or "").strip():
                yield messages, messages, text, "error: choose a chat model: a run, checkpoint or model folder, or ORG/NAME"
                return
            if not (text or "").strip():
                yield gr.skip(), gr.skip(), gr.skip(), "write a message first"
                return
            page = request.session_hash or ""
            resets = models.resets(page)  # a Reset after this point: the reply shows nothing more
            yield [*messages, {"role": "user", "content": text}], messages, "", f"loading {name} ..."
            try:
                for shown, reply in models.chat(page, name, messages, text, sampling_settings(*numbers), system_text, rev, hub):
                    if models.resets(page) != resets:  # reset while replying: the page is cleared
                        yield gr.skip(), gr.skip(), gr.skip(), gr.skip()
                        continue  # the stopped reply ends at its next token
                    if reply is None:
                        yield shown, messages, "", "replying ... (Stop ends the reply)"
                    else:
                        yield shown, shown, "", chat_status_line(reply)
            except Exception as err:  # the server keeps running whatever the reply raised
                yield messages, messages, text, error_line(err)

        chat_inputs = [chat_model, chat_revision, chat_hub_dir, system_prompt, conversation, chat_input]
        chat_inputs += [chat_max_new_tokens, chat_temperature, chat_top_k, chat_top_p, chat_seed]
        chat_outputs = [chatbot, conversation, chat_input, chat_status]
        for trigger in (chat_send.click, chat_input.submit):
            trigger(run_chat, chat_inputs, chat_outputs, concurrency_limit=1, concurrency_id="chat")

        def stop_reply(request: gr.Request) -> Any:
            stopped = models.stop(request.session_hash or "")
            return gr.skip() if stopped else "no reply in progress"

        chat_stop.click(stop_reply, None, chat_status, queue=False, show_progress="hidden")

        def reset_quietly(request: gr.Request) -> None:
            models.reset(request.session_hash or "")

        def clear_chat() -> tuple[Any, ...]:
            return [], [], "the conversation is reset"

        # Reset stops the page's reply at once and counts a reset, so that reply sends no more
        # text (under load its updates could reach the page after the clearing), then clears the
        # conversation once that reply has ended (the same concurrency group).
        for trigger in (chat_reset.click, chatbot.clear):  # the Chatbot's own bin resets it too
            trigger(reset_quietly, None, None, queue=False).then(
                clear_chat, None, [chatbot, conversation, chat_status], concurrency_limit=1, concurrency_id="chat", show_progress="hidden"
            )
    return app


def model_picker(prefix: str, info: str, choices: list[str]) -> tuple[Any, Any, Any, Any]:
    """A row of model (among `choices`), revision and hub-folder fields and a "Refresh list" button;
    element ids start with `prefix` (one picker per tab)."""
    with gr.Row():
        model = gr.Dropdown(choices, value="", allow_custom_value=True, label="Model", info=info, elem_id=f"{prefix}model", scale=3)
        revision = gr.Textbox(label="Revision", placeholder="main", elem_id=f"{prefix}revision", scale=1)
        hub_dir = gr.Textbox(label="Hub folder", placeholder="$HF_HUB_CACHE or ./hub", elem_id=f"{prefix}hub-dir", scale=1)
        refresh = gr.Button("Refresh list", scale=0, elem_id=f"{prefix}refresh-models")
    return model, revision, hub_dir, refresh


def sampling_numbers(prefix: str, limit_label: str, seed_info: str) -> tuple[Any, ...]:
    """The length limit, temperature, top-k, top-p and seed fields (in the current row), with the
    sampling defaults of scripts/generate.py; element ids start with `prefix`."""
    return (
        gr.Number(
            0, label=limit_label, precision=0, minimum=0, info="0: as the run's samples", elem_id=f"{prefix}max-new-tokens"
        ),
        gr.Number(0.8, label="Temperature", minimum=0, step=0.1, info="0: greedy", elem_id=f"{prefix}temperature"),
        gr.Number(50, label="Top-k", precision=0, minimum=0, info="0: off", elem_id=f"{prefix}top-k"),
        gr.Number(1.0, label="Top-p", minimum=0, maximum=1, step=0.05, info="1: off", elem_id=f"{prefix}top-p"),
        gr.Number(-1, label="Seed", precision=0, info=seed_info, elem_id=f"{prefix}seed"),
    )


def sampling_settings(max_tokens: float | None, temp: float | None, k: float | None, p: float | None, seed: float | None) -> SamplingSettings:
    """The sampling fields' values: 0 new tokens ("as the run") and a negative seed (random) are None."""
    return SamplingSettings(
        max_new_tokens=int(max_tokens) if max_tokens else None,
        temperature=temp,
        top_k=None if k is None else int(k),
        top_p=p,
        seed=None if seed is None or seed < 0 else int(seed),
    )


def chat_status_line(reply: Reply) -> str:
    """How a reply ended, in one line: its tokens, why it ended, its seed, what the model read."""
    how = "stopped" if reply.stopped else "done" if reply.ended else "reply limit reached"
    line = f"{how}: {reply.new_tokens} tokens (seed {reply.seed})"
    if reply.dropped_messages:
        line += f"; the model read the latest turns only ({reply.dropped_messages} earlier messages outgrew its context)"
    return line
