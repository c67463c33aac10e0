"""HTML pieces of the run page: escaped text, numbers as a reader wants them, and any JSON value
(a corpus report, a plan) drawn generically, so the page needs no change when those grow."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable
from typing import Any

from ..run_layout import is_number

MAX_LIST_ITEMS = 50  # of a list in a JSON input
MAX_DEPTH = 6  # of a JSON input drawn as nested tables; deeper parts as JSON text


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def number(value: Any) -> str:
    """A number as a reader wants it: 1,234,567 for counts, 4 significant digits otherwise."""
    if not is_number(value):
        return esc(value)
    if isinstance(value, int) or (math.isfinite(value) and value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:.4g}"


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def render_json(value: Any, key: str | None = None, depth: int = 0) -> str:
    """Any JSON value as HTML: an object as a table of its keys (objects of like objects as one
    table, a row each), a list as a list, a list under a `warnings` key highlighted."""
    if value is None or value in ({}, []):
        return '<span class="none">none</span>'
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            return f"<code>{esc(json.dumps(value)[:2000])}</code>"
        if _like_rows(list(value.values())):
            return _rows_table(list(value.items()))
        rows = (f"<tr><th>{esc(_label(k))}</th><td>{render_json(v, str(k), depth + 1)}</td></tr>" for k, v in value.items())
        return f'<table class="kv">{"".join(rows)}</table>'
    if isinstance(value, list):
        if _like_rows(value) and len(value) > 1:
            return _rows_table([(str(i + 1), row) for i, row in enumerate(value[:MAX_LIST_ITEMS])], len(value))
        items = "".join(f"<li>{render_json(v, None, depth + 1)}</li>" for v in value[:MAX_LIST_ITEMS])
        if len(value) > MAX_LIST_ITEMS:
            items += f'<li class="more">and {len(value) - MAX_LIST_ITEMS:,} more</li>'
        return f'<ul class="{"warnings" if key == "warnings" else "plain"}">{items}</ul>'
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f'<span class="num">{number(value)}</span>' if is_number(value) else esc(value)


def _label(key: Any) -> str:
    return str(key).replace("_", " ")


def _like_rows(values: list[Any]) -> bool:
    """Objects of scalars that share most keys (a split each, say): one table reads better."""
    scalar = (str, int, float, bool, type(None))
    if not values or not all(isinstance(v, dict) and v and all(isinstance(x, scalar) for x in v.values()) for v in values):
        return False
    keys = set().union(*values)
    return len(keys) <= 12 and all(len(v) * 2 >= len(keys) for v in values)


def _rows_table(rows: list[tuple[str, dict[str, Any]]], total: int | None = None) -> str:
    columns = list(dict.fromkeys(k for _, row in rows for k in row))
    head = "".join(f"<th>{esc(_label(c))}</th>" for c in columns)
    body = ""
    for name, row in rows:
        cells = "".join(f"<td>{render_json(row.get(c), depth=MAX_DEPTH)}</td>" for c in columns)
        body += f"<tr><th>{esc(_label(name))}</th>{cells}</tr>"
    more = f'<p class="note">{len(rows):,} of {total:,} shown</p>' if total and total > len(rows) else ""
    table = f'<table class="grid"><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>'
    return f'<div class="scroll">{table}</div>{more}'


def facts_list(pairs: Iterable[tuple[str, str | None]]) -> str:
    """A definition list of the pairs whose value is known (values are HTML already)."""
    items = "".join(f"<dt>{esc(name)}</dt><dd>{value}</dd>" for name, value in pairs if value)
    return f'<dl class="facts">{items}</dl>'


def empty_note(text: str) -> str:
    return f'<p class="empty">{esc(text)}</p>'
