"""The export stage's one error: a model, option or folder no stock architecture or GGUF expresses."""

from __future__ import annotations

from ..errors import MiniGPTUserError


class ExportError(MiniGPTUserError):
    """The model cannot be written in (or read from) the asked format exactly: one line saying why."""
