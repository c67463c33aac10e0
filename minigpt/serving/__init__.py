"""Serving a model through existing OpenAI-compatible servers (`scripts/serve.py`): `exports` makes
the files each engine reads, `engines` runs the engine on them."""
