"""A web app to train, watch, stop and talk to a model (`python scripts/app.py`, docs/app.md); only
`ui` and `server` import Gradio."""
