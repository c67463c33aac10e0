"""A web app to train, watch, stop and talk to a model (`python scripts/app.py`; needs the `ui` extra).

- `run_manager`: one training run at a time in a background thread, stopped through its StopController;
- `live_state`: the thread-safe record of that run and the TrainerCallback that fills it;
- `text_generator`: loads a model as scripts/generate.py does and streams its text;
- `chat_replies`: the Chat tab's replies, a `minigpt.chat.ChatSession` on that same loaded model;
- `views`: the page's text and tables from a snapshot; `ui`: the Gradio page; `server`: launching it.

Only `ui` and `server` import Gradio.
"""
