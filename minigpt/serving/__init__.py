"""Serving a model through existing OpenAI-compatible servers: `transformers serve` and llama.cpp's.

`exports.py` makes the files each engine reads (once per model version), `engines.py` runs the
engine on them; `scripts/serve.py` is the command line. Imports the export and hub stages.
"""
