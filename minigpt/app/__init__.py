"""A web app to train, watch, stop and talk to a model (`python scripts/app.py`; needs the `ui` extra):
`training_run` (the one run and what the page shows of it), `models` (the loaded model: text and chat
replies), `ui` (the Gradio page), `server` (launching it). Only `ui` and `server` import Gradio."""
