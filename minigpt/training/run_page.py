"""One self-contained HTML page per run (`run.html`): what was trained on what, and how it went.

`write_run_page(output_dir)` reads only the files in the run folder (resolved_config.yaml,
metrics.jsonl, samples.txt, summary.json, the model's config.json and safetensors headers, and
corpus_report.json and plan.json when the run has them), so it also rebuilds the page of an old
run folder (`python scripts/run_page.py RUN_DIR`). The page needs nothing beside it: CSS inline,
curves as inline SVG drawn with matplotlib's object API, no script, and a content security policy
that forbids every request. Training writes it last, after summary.json (run.py's `_finish`).

Optional JSON inputs (a corpus report, a plan) are drawn generically: an object as a table of its
keys, a list as a list, a `warnings` list highlighted; so the page needs no change when they grow.
"""

from __future__ import annotations

import html
import io
import json
import math
import os
import re
import statistics
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib
import yaml
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from ..atomic import atomic_write_file
from ..errors import ConfigError
from ..run_layout import (
    CORPUS_REPORT_FILE,
    FINAL_DIR,
    METRICS_FILE,
    PLAN_FILE,
    RESOLVED_CONFIG_NAME,
    RUN_PAGE_FILE,
    SAMPLES_FILE,
    SUMMARY_FILE,
    Sample,
    is_number,
    list_checkpoints,
    read_log_records,
    read_samples,
)

# Bounds that keep the page small whatever the run's length: a 100k-step run is a few hundred KB.
MAX_CURVE_POINTS = 2000  # per curve; longer ones keep each span's lowest and highest point
MAX_EVALUATION_ROWS = 200  # the first, the last, the best and evenly spaced others
MAX_SAMPLE_CHARS = 20_000  # per sample shown (samples.txt keeps it whole)
MAX_PROMPTS = 20
MAX_LIST_ITEMS = 50  # of a list in a JSON input
MAX_DEPTH = 6  # of a JSON input drawn as nested tables; deeper parts as JSON text

# The page's sections, in order: (id, heading). Tests and links find them by id.
SECTIONS = (
    ("overview", "Overview"),
    ("corpus", "Corpus"),
    ("plan", "Plan"),
    ("curves", "Curves"),
    ("evaluations", "Evaluations"),
    ("samples", "Samples"),
    ("config", "Config"),
)


# ---- reading the run folder ------------------------------------------------------------------------


@dataclass
class RunFolder:
    """What a run folder holds; a part is empty (None, {}, []) when its file is missing."""

    path: Path
    config: dict[str, Any] = field(default_factory=dict)  # resolved_config.yaml
    config_text: str | None = None
    summary: dict[str, Any] | None = None  # summary.json: written at the end of a run only
    records: list[dict[str, Any]] = field(default_factory=list)  # metrics.jsonl
    samples: list[Sample] = field(default_factory=list)  # samples.txt, this run's (`run_samples`)
    model_config: dict[str, Any] = field(default_factory=dict)  # config.json of final/ or the newest checkpoint
    model_folder: str | None = None  # which of the two it came from
    parameters: int | None = None
    corpus_report: Any = None  # corpus_report.json, any JSON value
    plan: Any = None  # plan.json, any JSON value
    problems: list[str] = field(default_factory=list)  # files there that could not be read


def read_run_folder(output_dir: str | os.PathLike) -> RunFolder:
    """Everything the page shows, read from `output_dir` alone."""
    path = Path(output_dir)
    found = RunFolder(path)
    config_path = path / RESOLVED_CONFIG_NAME
    if config_path.is_file():
        found.config_text = config_path.read_text(encoding="utf-8", errors="replace")
        try:
            loaded = yaml.safe_load(found.config_text)
            found.config = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError as error:
            found.problems.append(f"{RESOLVED_CONFIG_NAME}: {error}")
    summary = _read_json(path / SUMMARY_FILE, found.problems)
    found.summary = summary if isinstance(summary, dict) else None
    found.records = read_log_records(path / METRICS_FILE)
    found.samples = run_samples(read_samples(path / SAMPLES_FILE))
    # The model as saved: final/ once the run finished, else its newest checkpoint.
    for folder in [path / FINAL_DIR, *list_checkpoints(path)]:
        config = _read_json(folder / "config.json", found.problems)
        if isinstance(config, dict):
            found.model_config, found.model_folder = config, folder.name
            found.parameters = count_parameters(folder)
            break
    found.corpus_report = _read_json(path / CORPUS_REPORT_FILE, found.problems)
    found.plan = _read_json(path / PLAN_FILE, found.problems)
    return found


def _read_json(path: Path, problems: list[str]) -> Any:
    """The JSON value in `path`, None when there is no such file; a file that does not parse is
    said in `problems` (the page still shows the rest)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        problems.append(f"{path.parent.name}/{path.name}: {error}")
        return None


def run_samples(samples: Iterable[Sample]) -> list[Sample]:
    """The samples of the run that wrote the folder last, oldest first.

    samples.txt is only appended to: a resume samples the steps after its checkpoint again, and a
    new run in a folder without checkpoints appends to the old run's file. So a step sampled again
    replaces the earlier sample, and a step lower than the one before starts over from there.
    """
    kept: dict[tuple[int, str], Sample] = {}
    previous = -1
    for sample in samples:
        if sample.step < previous:
            kept = {key: s for key, s in kept.items() if key[0] < sample.step}
        kept.pop((sample.step, sample.prompt), None)
        kept[(sample.step, sample.prompt)] = sample
        previous = sample.step
    return list(kept.values())


def count_parameters(model_dir: Path) -> int | None:
    """The parameters saved in `model_dir`'s safetensors files, from their headers (the tensors'
    shapes: no weight read, no torch imported); None when there are none or one cannot be read."""
    total, files = 0, sorted(model_dir.glob("*.safetensors"))
    for path in files:
        try:
            with path.open("rb") as handle:
                (length,) = struct.unpack("<Q", handle.read(8))  # the format: a u64 header size, then JSON
                if length > 100_000_000:
                    return None
                header = json.loads(handle.read(length))
            total += sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
        except (OSError, ValueError, struct.error, KeyError, TypeError, AttributeError):
            return None
    return total if files else None


# ---- the numbers ----------------------------------------------------------------------------------


def series(records: Iterable[Mapping[str, Any]], key: str) -> list[tuple[int, float]]:
    """(step, value) of every record with a finite `key`, by step; a step logged twice keeps its last."""
    points: dict[int, float] = {}
    for record in records:
        value = record.get(key)
        if is_number(value) and math.isfinite(value):  # NaN and infinity arrive as strings
            points[int(record["step"])] = float(value)
    return sorted(points.items())


def thin(points: Sequence[tuple[int, float]], limit: int = MAX_CURVE_POINTS) -> list[tuple[int, float]]:
    """At most `limit` of `points`: each of limit/2 spans keeps its lowest and highest, so a spike
    or a dip still shows (every n-th point would miss them); the first and last are kept."""
    if len(points) <= limit:
        return list(points)
    span = math.ceil(len(points) / (limit // 2))
    kept = []
    for start in range(0, len(points), span):
        chunk = points[start : start + span]
        low = min(range(len(chunk)), key=lambda i: chunk[i][1])
        high = max(range(len(chunk)), key=lambda i: chunk[i][1])
        kept.extend(chunk[i] for i in sorted({low, high}))
    if kept[0] != points[0]:
        kept[0] = points[0]
    if kept[-1] != points[-1]:
        kept[-1] = points[-1]
    return kept


@dataclass
class Evaluation:
    step: int
    loss: float | None
    perplexity: float | None
    bpb: float | None


def evaluations(records: Iterable[Mapping[str, Any]]) -> list[Evaluation]:
    """The run's evaluations by step (an evaluation redone at a step keeps the last)."""
    by_step = {}
    for record in records:
        if "eval_loss" in record:
            by_step[int(record["step"])] = Evaluation(
                int(record["step"]),
                *(_finite(record.get(key)) for key in ("eval_loss", "eval_perplexity", "eval_bpb")),
            )
    return [by_step[step] for step in sorted(by_step)]


def _finite(value: Any) -> float | None:
    return float(value) if is_number(value) and math.isfinite(value) else None


def _pick_rows(rows: list[Evaluation], limit: int = MAX_EVALUATION_ROWS) -> list[Evaluation]:
    """At most `limit` rows: the first, the last, the best bits/byte and evenly spaced others."""
    if len(rows) <= limit:
        return rows
    chosen = {round(i * (len(rows) - 1) / (limit - 2)) for i in range(limit - 1)}
    scored = [i for i, row in enumerate(rows) if row.bpb is not None]
    if scored:
        chosen.add(min(scored, key=lambda i: rows[i].bpb))
    return [rows[i] for i in sorted(chosen)]


# ---- drawing --------------------------------------------------------------------------------------


def _figure_svg(figure: Figure, prefix: str) -> str:
    """`figure` as an inline <svg> element whose ids start with `prefix` (three drawings share the
    page's id space), text as text (smaller, and the browser's own font)."""
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "minigpt-run-page"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None})
    svg = buffer.getvalue().decode("utf-8")
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}-\1)", svg)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}-\1"', svg)


def _axes(size: tuple[float, float], ylabel: str):
    # The object API: no pyplot, no global backend. Sized so that the page shows the axes' text at
    # about the page's own size; the constrained layout keeps each drawing at exactly `size`.
    figure = Figure(figsize=size, layout="constrained")
    axes = figure.subplots()
    axes.set_xlabel("optimizer step")
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    return figure, axes


def _plot(axes, points: Sequence[tuple[int, float]], **style) -> None:
    axes.plot([p[0] for p in points], [p[1] for p in points], **style)


def loss_svg(train: Sequence[tuple[int, float]], validation: Sequence[tuple[int, float]]) -> str:
    figure, axes = _axes((11, 3.8), "loss (nats per token)")
    if train:
        _plot(axes, train, label="training", color="tab:blue", linewidth=1.0)
    if validation:
        _plot(axes, validation, label="validation", color="tab:orange", marker="o", markersize=4, linewidth=1.5)
    axes.legend(frameon=False)
    return _figure_svg(figure, "loss")


def line_svg(points: Sequence[tuple[int, float]], ylabel: str, color: str, prefix: str, eng: bool = False) -> str:
    figure, axes = _axes((5.5, 3.2), ylabel)
    _plot(axes, points, color=color, linewidth=1.2)
    if eng:  # 52k, not 52000 or 5.2e4
        axes.yaxis.set_major_formatter(EngFormatter(sep=""))
    axes.ticklabel_format(axis="x", style="plain")
    return _figure_svg(figure, prefix)


# ---- HTML pieces ----------------------------------------------------------------------------------


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def number(value: Any, digits: int = 4) -> str:
    """A number as a reader wants it: 1,234,567 for counts, 4 significant digits otherwise."""
    if isinstance(value, bool) or not is_number(value):
        return esc(value)
    if isinstance(value, int) or (math.isfinite(value) and value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:.{digits}g}"


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def render_json(value: Any, key: str | None = None, depth: int = 0) -> str:
    """Any JSON value as HTML: an object as a table of its keys (objects of like objects as one
    table, a row each), a list as a list, a list under a `warnings` key highlighted."""
    if isinstance(value, dict):
        if not value:
            return '<span class="none">none</span>'
        if depth >= MAX_DEPTH:
            return f"<code>{esc(json.dumps(value)[:2000])}</code>"
        if _like_rows(list(value.values())):
            return _rows_table(list(value.items()))
        rows = "".join(
            f"<tr><th>{esc(_label(k))}</th><td>{render_json(v, str(k), depth + 1)}</td></tr>" for k, v in value.items()
        )
        return f'<table class="kv">{rows}</table>'
    if isinstance(value, list):
        if not value:
            return '<span class="none">none</span>'
        if _like_rows(value) and len(value) > 1:
            return _rows_table([(str(i + 1), row) for i, row in enumerate(value[:MAX_LIST_ITEMS])], len(value))
        items = "".join(f"<li>{render_json(v, None, depth + 1)}</li>" for v in value[:MAX_LIST_ITEMS])
        if len(value) > MAX_LIST_ITEMS:
            items += f'<li class="more">and {len(value) - MAX_LIST_ITEMS:,} more</li>'
        return f'<ul class="{"warnings" if key == "warnings" else "plain"}">{items}</ul>'
    if value is None:
        return '<span class="none">none</span>'
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f'<span class="num">{number(value)}</span>' if is_number(value) else esc(value)


def _label(key: Any) -> str:
    return str(key).replace("_", " ")


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _like_rows(values: list[Any]) -> bool:
    """Objects of scalars that share most keys (a split each, say): one table reads better."""
    if not values or not all(isinstance(v, dict) and v and all(map(_is_scalar, v.values())) for v in values):
        return False
    keys = set().union(*values)
    return len(keys) <= 12 and all(len(v) * 2 >= len(keys) for v in values)


def _rows_table(rows: list[tuple[str, dict[str, Any]]], total: int | None = None) -> str:
    columns = list(dict.fromkeys(k for _, row in rows for k in row))
    head = "".join(f"<th>{esc(_label(c))}</th>" for c in columns)
    body = "".join(
        f"<tr><th>{esc(_label(name))}</th>" + "".join(f"<td>{render_json(row.get(c), depth=MAX_DEPTH)}</td>" for c in columns) + "</tr>"
        for name, row in rows
    )
    more = f'<p class="note">{len(rows):,} of {total:,} shown</p>' if total and total > len(rows) else ""
    table = f'<table class="grid"><thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>'
    return f'<div class="scroll">{table}</div>{more}'


def _facts(pairs: Iterable[tuple[str, str | None]]) -> str:
    """A definition list of the pairs whose value is known (values are HTML already)."""
    items = "".join(f"<dt>{esc(name)}</dt><dd>{value}</dd>" for name, value in pairs if value)
    return f'<dl class="facts">{items}</dl>'


def _empty(text: str) -> str:
    return f'<p class="empty">{esc(text)}</p>'


def _section(section_id: str, body: str, note: str = "") -> str:
    heading = dict(SECTIONS)[section_id]
    return f'<section id="{section_id}"><h2>{esc(heading)}{note}</h2>{body}</section>'


# ---- the sections ---------------------------------------------------------------------------------


def _model_shape(run: RunFolder) -> str | None:
    """Layers, width, heads, context and vocabulary of the model as saved (its config.json; the run
    config's model section before anything was saved), and its parameters."""
    saved, planned = run.model_config, run.config.get("model") or {}

    def pick(*keys: str) -> Any:  # MiniGPT's and Llama-style names, then GPT-2's
        for source in (saved, planned):
            for key in keys:
                if is_number(source.get(key)):
                    return source[key]
        return None

    parts = [
        (pick("num_hidden_layers", "n_layer"), "layers"),
        (pick("hidden_size", "n_embd"), "hidden"),
        (pick("num_attention_heads", "n_head"), "heads"),
        (pick("num_key_value_heads"), "key/value heads"),
        (pick("max_position_embeddings", "n_positions"), "context"),
        (pick("vocab_size"), "vocab"),
    ]
    text = ", ".join(f"{number(value)} {name}" for value, name in parts if value is not None)
    if run.parameters is not None:
        count = f"{run.parameters / 1e6:.2f}M" if run.parameters >= 1e6 else f"{run.parameters:,}"
        text = f"{count} parameters ({text})" if text else f"{count} parameters"
    kind = saved.get("model_type")
    if text and kind and kind != "minigpt":
        text += f", {esc(kind)}"
    return text or None


def _status(run: RunFolder) -> tuple[str, str]:
    """(css class, words): finished, stopped, or no summary yet."""
    if run.summary is None:
        return "unfinished", "unfinished: no summary.json (stopped before its end, or still training)"
    step = run.summary.get("global_step")
    if run.summary.get("stopped"):
        return "stopped", f"stopped at step {number(step)} (a checkpoint was saved; --resume continues it)"
    return "finished", f"finished at step {number(step)}"


def _listing(items: Any, limit: int = 6) -> str | None:
    if not isinstance(items, list):
        items = [items] if items else []
    if not items:
        return None
    shown = ", ".join(f"<code>{esc(item)}</code>" for item in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def overview_section(run: RunFolder) -> str:
    summary = run.summary or {}
    training, data = run.config.get("training") or {}, run.config.get("data") or {}
    css, status = _status(run)
    train_records = [r for r in run.records if "loss" in r]
    last_train = train_records[-1] if train_records else {}
    steps = summary.get("global_step", last_train.get("step"))
    max_steps = training.get("max_steps")
    steps_text = None
    if steps is not None:
        steps_text = number(steps) + (f" of {number(max_steps)}" if max_steps is not None else "")
    tokens = summary.get("tokens_seen", last_train.get("tokens_seen"))
    runtime = summary.get("runtime_seconds")
    if runtime is None:  # no summary: Trainer's own time, training only
        runtime = next((r["train_runtime"] for r in reversed(run.records) if is_number(r.get("train_runtime"))), None)
    final = summary.get("eval_bpb")
    rows = evaluations(run.records)
    scored = [e for e in rows if e.bpb is not None]
    if is_number(final):  # as the run's last line prints them
        quality = f"<strong>{final:.4f}</strong> bits/byte"
        if is_number(summary.get("eval_loss")):
            quality += f" (validation loss {summary['eval_loss']:.4f})"
    elif scored:
        quality = f"{scored[-1].bpb:.4f} bits/byte at step {number(scored[-1].step)}, the last evaluation"
    else:
        quality = None
    best = min(e.bpb for e in scored) if scored else None
    latest = final if is_number(final) else (scored[-1].bpb if scored else None)
    speed = [r["tokens_per_second"] for r in train_records if is_number(r.get("tokens_per_second"))]
    mfu = [r["mfu"] for r in train_records if is_number(r.get("mfu"))]
    throughput = None
    if speed:
        throughput = f"{number(round(statistics.median(speed)))} tokens/s"
        if mfu:
            throughput += f", MFU {statistics.median(mfu):.1%}"
        throughput += " (medians of the logged steps)"
    base = summary.get("base_model") or (run.config.get("model") or {}).get("init_from")
    if isinstance(base, dict):
        base = " ".join(str(v) for v in base.values())
    report = run.corpus_report if isinstance(run.corpus_report, dict) else {}
    warnings = report.get("warnings") if isinstance(report.get("warnings"), list) else []
    facts = _facts(
        [
            ("status", f'<span class="status {css}">{esc(status)}</span>'),
            ("model", _model_shape(run)),
            ("started from", f"<code>{esc(base)}</code>" if base else None),
            ("data", _listing(data.get("train_files"))),
            ("validation data", _listing(data.get("validation_files"))),
            ("steps", steps_text),
            ("tokens", number(tokens) if tokens is not None else None),
            ("wall time", duration(runtime) if is_number(runtime) else None),
            ("final", quality),
            ("best", f"{best:.4f} bits/byte" if best is not None and best < latest else None),
            ("throughput", throughput),
            (
                "corpus warnings",
                f'<a class="warn" href="#corpus">{len(warnings)} warning{"s" if len(warnings) != 1 else ""}</a>'
                if warnings
                else None,
            ),
            ("model folder", f"<code>{esc(run.model_folder)}/</code>" if run.model_folder else None),
        ]
    )
    problems = "".join(f"<li>{esc(p)}</li>" for p in run.problems)
    problems = f'<ul class="warnings">{problems}</ul>' if problems else ""
    nav = " · ".join(f'<a href="#{sid}">{esc(name.lower())}</a>' for sid, name in SECTIONS[1:])
    return (
        f'<header id="overview"><p class="kicker">MiniGPT run</p><h1>{esc(run.path.name)}</h1>'
        f"{facts}{problems}<nav>{nav}</nav></header>"
    )


def corpus_section(run: RunFolder) -> str:
    report = run.corpus_report
    if report is None:
        return _section("corpus", _empty("no corpus report for this run"))
    if not isinstance(report, dict):
        return _section("corpus", render_json(report))
    warnings = report.get("warnings")
    body = ""
    if isinstance(warnings, list) and warnings:
        body += f'<div class="warnbox"><h3>Warnings</h3>{render_json(warnings, "warnings")}</div>'
    elif isinstance(warnings, list):
        body += '<p class="ok">no warnings</p>'
    rest = {k: v for k, v in report.items() if k not in ("warnings", "plan")}  # the plan has its own section
    if rest:
        body += render_json(rest)
    return _section("corpus", body, f' <span class="source">{esc(CORPUS_REPORT_FILE)}</span>')


def plan_section(run: RunFolder) -> str:
    report = run.corpus_report if isinstance(run.corpus_report, dict) else {}
    sources = [
        (PLAN_FILE, run.plan),
        (f"{SUMMARY_FILE}: plan", (run.summary or {}).get("plan")),
        (f"{CORPUS_REPORT_FILE}: plan", report.get("plan")),
    ]
    body = "".join(
        f'<h3><span class="source">{esc(name)}</span></h3>{render_json(value)}'
        for name, value in sources
        if value is not None
    )
    if not body:
        body = _empty(f"no plan recorded for this run ({PLAN_FILE})")
    return _section("plan", body + _configured(run))


def _configured(run: RunFolder) -> str:
    """What the config asked for, and what that comes to in tokens (per step as logged)."""
    training, hardware = run.config.get("training") or {}, run.config.get("hardware") or {}
    if not training:
        return ""
    block = (run.config.get("data") or {}).get("block_size")
    logged = [r for r in run.records if is_number(r.get("tokens_seen")) and r.get("step")]
    per_step = logged[-1]["tokens_seen"] / logged[-1]["step"] if logged else None
    planned = per_step * training["max_steps"] if per_step and is_number(training.get("max_steps")) else None
    schedule = training.get("lr_scheduler_type")
    rate = training.get("learning_rate")
    lr_text = None
    if rate is not None:
        lr_text = f"{number(rate)}"
        if training.get("min_learning_rate") is not None:
            lr_text += f" to {number(training['min_learning_rate'])}"
        lr_text += f", {esc(schedule)}" if schedule else ""
        lr_text += f", {number(training['warmup_steps'])} warmup steps" if training.get("warmup_steps") else ""
    batch = hardware.get("per_device_train_batch_size")
    facts = _facts(
        [
            ("steps", number(training["max_steps"]) if training.get("max_steps") is not None else None),
            ("learning rate", lr_text),
            ("optimizer", esc(training["optim"]) if training.get("optim") else None),
            (
                "batch",
                f"{number(batch)} sequences per device x {number(hardware.get('gradient_accumulation_steps', 1))} "
                f"accumulation, {number(block)} tokens each"
                if batch is not None and block is not None
                else None,
            ),
            ("tokens per step", number(round(per_step)) if per_step else None),
            ("tokens planned", number(round(planned)) if planned else None),
            (
                "tokens per parameter",
                f"{planned / run.parameters:.2f}" if planned and run.parameters else None,
            ),
        ]
    )
    return f'<h3><span class="source">{esc(RESOLVED_CONFIG_NAME)}</span> as configured</h3>{facts}'


def curves_section(run: RunFolder) -> str:
    train, validation = series(run.records, "loss"), series(run.records, "eval_loss")
    rate, speed = series(run.records, "learning_rate"), series(run.records, "tokens_per_second")
    if not (train or validation):
        return _section("curves", _empty(f"no loss logged yet ({METRICS_FILE} has no training record)"))

    def caption(name: str, points: Sequence) -> str:
        shown = thin(points)
        if len(shown) < len(points):
            return f"{name}: {len(points):,} records, drawn as {len(shown):,} points (each span's lowest and highest)"
        return f"{name}: {len(points):,} records"

    loss = (
        f'<figure id="curve-loss" class="wide">{loss_svg(thin(train), thin(validation))}'
        f"<figcaption>{esc(caption('training loss', train))}; validation loss: {len(validation):,} evaluations"
        "</figcaption></figure>"
    )
    parts = [loss]
    for figure_id, points, label, color, eng in (
        ("curve-learning-rate", rate, "learning rate", "tab:green", False),
        ("curve-throughput", speed, "tokens per second", "tab:purple", True),
    ):
        if points:
            svg = line_svg(thin(points), label, color, figure_id, eng=eng)
            parts.append(f'<figure id="{figure_id}">{svg}<figcaption>{esc(caption(label, points))}</figcaption></figure>')
        else:
            parts.append(f'<figure id="{figure_id}">{_empty(f"no {label} logged")}</figure>')
    return _section("curves", f'{parts[0]}<div class="pair">{"".join(parts[1:])}</div>')


def evaluations_section(run: RunFolder) -> str:
    rows = evaluations(run.records)
    if not rows:
        return _section("evaluations", _empty(f"no evaluation in {METRICS_FILE}"))
    scored = [e.bpb for e in rows if e.bpb is not None]
    best = min(scored) if scored else None
    shown = _pick_rows(rows)

    def cell(value: float | None, decimals: int = 4) -> str:  # as the run's eval lines print them
        return f'<td class="num">{f"{value:,.{decimals}f}" if value is not None else "–"}</td>'

    body = "".join(
        f'<tr{" class=best" if e.bpb is not None and e.bpb == best else ""}><td class="num">{number(e.step)}</td>'
        f"{cell(e.loss)}{cell(e.perplexity, 2)}{cell(e.bpb)}</tr>"
        for e in shown
    )
    note = (
        f'<p class="note">{len(shown):,} of {len(rows):,} evaluations shown (the first, the last, the best '
        f"and evenly spaced others); {METRICS_FILE} has them all</p>"
        if len(shown) < len(rows)
        else ""
    )
    table = (  # in a box of its own that scrolls sideways on a narrow screen
        '<div class="scroll"><table class="grid evaluations"><thead><tr><th>step</th><th>validation loss</th>'
        f"<th>perplexity</th><th>bits/byte</th></tr></thead><tbody>{body}</tbody></table></div>"
    )
    return _section("evaluations", table + note + '<p class="note">bold: the best bits/byte</p>')


def samples_section(run: RunFolder) -> str:
    if not run.samples:
        return _section("samples", _empty(f"no samples ({SAMPLES_FILE} is empty or missing)"))
    by_prompt: dict[str, list[Sample]] = {}
    for sample in run.samples:
        by_prompt.setdefault(sample.prompt, []).append(sample)
    steps = sorted({s.step for s in run.samples})
    articles = []
    for prompt, samples in list(by_prompt.items())[:MAX_PROMPTS]:
        first, last = min(samples, key=lambda s: s.step), max(samples, key=lambda s: s.step)
        shown = [(last, "last")] if first is last else [(first, "first"), (last, "last")]
        columns = "".join(
            f'<div class="sample"><h4>step {number(s.step)} ({which})</h4><pre>{esc(_cut(s.text))}</pre></div>'
            for s, which in shown
        )
        articles.append(f'<article><h3>prompt <code>{esc(prompt)}</code></h3><div class="pair">{columns}</div></article>')
    note = f"sampled at {len(steps)} step{'s' if len(steps) != 1 else ''}"
    note += f" ({number(steps[0])} to {number(steps[-1])})" if len(steps) > 1 else f" ({number(steps[0])})"
    if len(by_prompt) > MAX_PROMPTS:
        note += f"; the first {MAX_PROMPTS} of {len(by_prompt)} prompts shown"
    return _section("samples", f'<p class="note">{esc(note)}; all are in {SAMPLES_FILE}</p>' + "".join(articles))


def _cut(text: str) -> str:
    if len(text) <= MAX_SAMPLE_CHARS:
        return text
    return text[:MAX_SAMPLE_CHARS] + f"\n… ({len(text) - MAX_SAMPLE_CHARS:,} more characters in {SAMPLES_FILE})"


def config_section(run: RunFolder) -> str:
    if run.config_text is None:
        return _section("config", _empty(f"no {RESOLVED_CONFIG_NAME} in this folder"))
    return _section(
        "config",
        f"<details><summary>{esc(RESOLVED_CONFIG_NAME)}: every setting of the run, defaults included</summary>"
        f"<pre>{esc(run.config_text)}</pre></details>",
    )


STYLE = """
:root { color-scheme: light; --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --soft: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; background: #eef1f4; color: var(--ink);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1100px; margin: 0 auto; padding: 24px 20px 48px; }
header, section { background: #fff; border: 1px solid var(--line); border-radius: 8px;
  padding: 16px 22px; margin-bottom: 16px; }
h1 { margin: 0 0 10px; font-size: 26px; overflow-wrap: anywhere; }
h2 { margin: 0 0 12px; font-size: 19px; }
h3 { margin: 16px 0 8px; font-size: 15px; }
h4 { margin: 0 0 4px; font-size: 13px; color: var(--muted); font-weight: 600; }
.kicker { margin: 0; color: var(--muted); font-size: 13px; text-transform: uppercase; letter-spacing: .06em; }
nav { margin-top: 12px; padding-top: 10px; border-top: 1px solid var(--line); font-size: 14px; }
a { color: #0969da; }
code { font: 13px ui-monospace, "DejaVu Sans Mono", monospace; background: var(--soft); padding: 1px 4px;
  border-radius: 4px; overflow-wrap: anywhere; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 18px; margin: 0; }
.facts dt { color: var(--muted); }
.facts dd { margin: 0; overflow-wrap: anywhere; }
.status { font-weight: 600; padding: 1px 8px; border-radius: 10px; }
.status.finished { background: #dafbe1; color: #116329; }
.status.stopped { background: #fff8c5; color: #7d4e00; }
.status.unfinished { background: #eaeef2; color: var(--muted); }
.empty, .note, .source { color: var(--muted); }
.note { font-size: 13px; margin: 6px 0 0; }
.source { font: 13px ui-monospace, "DejaVu Sans Mono", monospace; font-weight: normal; }
.ok { color: #116329; }
.warnbox { background: #fff8e6; border-left: 4px solid #d4a72c; padding: 4px 14px; margin-bottom: 12px; }
.warnbox h3 { margin-top: 6px; }
ul.warnings { color: #7d4e00; margin: 6px 0; padding-left: 20px; }
a.warn { color: #9a6700; font-weight: 600; }
table { border-collapse: collapse; font-size: 14px; }
table.kv th { text-align: left; font-weight: normal; color: var(--muted); padding: 3px 16px 3px 0;
  vertical-align: top; white-space: nowrap; }
table.kv td { padding: 3px 0; vertical-align: top; }
table.kv table.kv { font-size: 13px; }
table.grid th, table.grid td { border-bottom: 1px solid var(--line); padding: 4px 12px; text-align: right; }
table.grid thead th { background: var(--soft); font-weight: 600; }
table.grid tbody th { text-align: left; font-weight: normal; color: var(--muted); }
table.evaluations { min-width: 60%; }
.scroll { overflow-x: auto; }
tr.best td { font-weight: 700; }
.num { font-variant-numeric: tabular-nums; }
.none { color: var(--muted); }
figure { margin: 0 0 12px; min-width: 0; }
figure svg { display: block; width: 100%; height: auto; }
figcaption { font-size: 13px; color: var(--muted); }
.pair { display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 16px; }
article { border-top: 1px solid var(--line); margin-top: 12px; padding: 4px 0 4px; }
.sample { min-width: 0; display: flex; flex-direction: column; }
.sample pre { flex: 1; }
pre { margin: 0; background: var(--soft); border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px;
  white-space: pre-wrap; overflow-wrap: anywhere; max-height: 28em; overflow: auto;
  font: 13px/1.45 ui-monospace, "DejaVu Sans Mono", monospace; }
details summary { cursor: pointer; color: var(--muted); }
details pre { margin-top: 8px; max-height: none; }
footer { color: var(--muted); font-size: 12px; text-align: center; }
"""


def render_run_page(run: RunFolder) -> str:
    """The page as one HTML document."""
    sections = [
        overview_section(run),
        corpus_section(run),
        plan_section(run),
        curves_section(run),
        evaluations_section(run),
        samples_section(run),
        config_section(run),
    ]
    read = ", ".join(
        name
        for name in (RESOLVED_CONFIG_NAME, METRICS_FILE, SAMPLES_FILE, SUMMARY_FILE, CORPUS_REPORT_FILE, PLAN_FILE)
        if (run.path / name).is_file()
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        # Nothing is fetched: no script, no font, no image from anywhere (inline SVG needs no request).
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>MiniGPT run: {esc(run.path.name)}</title><style>{STYLE}</style></head><body><main>"
        + "".join(sections)
        + f"<footer>written by MiniGPT from this folder's {esc(read or 'files')}</footer></main></body></html>\n"
    )


def write_run_page(output_dir: str | os.PathLike) -> Path:
    """Write `<output_dir>/run.html` from the run folder's files (atomically); returns its path.

    Raises ConfigError when `output_dir` holds no run (none of resolved_config.yaml, metrics.jsonl,
    summary.json).
    """
    output_dir = Path(output_dir)
    if not any((output_dir / name).is_file() for name in (RESOLVED_CONFIG_NAME, METRICS_FILE, SUMMARY_FILE)):
        raise ConfigError(
            f"{output_dir} is not a run folder: it has no {RESOLVED_CONFIG_NAME}, {METRICS_FILE} or {SUMMARY_FILE}"
        )
    page = render_run_page(read_run_folder(output_dir))
    path = output_dir / RUN_PAGE_FILE
    with atomic_write_file(path, encoding="utf-8") as handle:
        handle.write(page)
    return path


__all__ = [
    "MAX_CURVE_POINTS",
    "SECTIONS",
    "RunFolder",
    "count_parameters",
    "evaluations",
    "read_run_folder",
    "render_json",
    "render_run_page",
    "run_samples",
    "series",
    "thin",
    "write_run_page",
]
