"""The names `scripts/export.py` takes, importable without torch so `--help` answers at once."""

from __future__ import annotations

STOCK_TARGETS = ("llama", "gpt2", "gpt_neox", "qwen3", "starcoder2")  # in the order `auto` prefers
TARGETS = ("auto", *STOCK_TARGETS)
GGUF_DTYPES = ("f32", "f16", "q8_0")
