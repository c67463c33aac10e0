"""MiniGPT's per-user cache folder, for what is rebuilt when missing (measured peaks, served exports)."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """`$MINIGPT_CACHE_DIR`, else `$XDG_CACHE_HOME/minigpt`, else `~/.cache/minigpt`."""
    if os.environ.get("MINIGPT_CACHE_DIR"):
        return Path(os.environ["MINIGPT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "minigpt"

