"""One self-contained HTML page per run (`run.html`), drawn from the run folder's files alone, so an
old folder's page can be rebuilt (`scripts/run_page.py RUN_DIR`): CSS inline, curves as inline SVG,
no script, and a content security policy that forbids every request.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..atomic import atomic_write_file
from ..run_layout import (
    CORPUS_REPORT_FILE,
    METRICS_FILE,
    PLAN_FILE,
    RESOLVED_CONFIG_NAME,
    RUN_PAGE_FILE,
    SAMPLES_FILE,
    SUMMARY_FILE,
    Sample,
    is_number,
)
from .html import duration, empty_note, esc, facts_list, number, render_json
from .plots import figure_svg, line_svg, loss_figure
from .run_folder import Evaluation, RunFolder, evaluations, series, thin

# Bounds that keep the page small whatever the run's length: a 100k-step run is a few hundred KB.
MAX_EVALUATION_ROWS = 200  # the first, the last, the best and evenly spaced others
MAX_SAMPLE_CHARS = 20_000  # per sample shown (samples.txt keeps it whole)
MAX_PROMPTS = 20
# The page's sections in order, (id, heading): tests and links find them by id.
SECTIONS = (
    ("overview", "Overview"), ("corpus", "Corpus"), ("plan", "Plan"), ("curves", "Curves"),
    ("evaluations", "Evaluations"), ("samples", "Samples"), ("config", "Config"),
)


def _pick_rows(rows: list[Evaluation], limit: int = MAX_EVALUATION_ROWS) -> list[Evaluation]:
    """At most `limit` rows: the first, the last, the best bits/byte and evenly spaced others."""
    if len(rows) <= limit:
        return rows
    chosen = {round(i * (len(rows) - 1) / (limit - 2)) for i in range(limit - 1)}
    scored = [i for i, row in enumerate(rows) if row.bpb is not None]
    if scored:
        chosen.add(min(scored, key=lambda i: rows[i].bpb))
    return [rows[i] for i in sorted(chosen)]


def _section(section_id: str, body: str, note: str = "") -> str:
    heading = dict(SECTIONS)[section_id]
    return f'<section id="{section_id}"><h2>{esc(heading)}{note}</h2>{body}</section>'


def _model_shape(run: RunFolder) -> str | None:
    """Layers, width, heads, context and vocabulary of the model as saved (its config.json; the run
    config's model section before anything was saved), and its parameters."""
    saved, planned = run.model_config, run.config.get("model") or {}

    def pick(*keys: str) -> Any:  # MiniGPT's and Llama-style names, then GPT-2's
        return next((s[key] for s in (saved, planned) for key in keys if is_number(s.get(key))), None)

    parts = [(pick(*keys), name) for *keys, name in (
        ("num_hidden_layers", "n_layer", "layers"), ("hidden_size", "n_embd", "hidden"),
        ("num_attention_heads", "n_head", "heads"), ("num_key_value_heads", "key/value heads"),
        ("max_position_embeddings", "n_positions", "context"), ("vocab_size", "vocab"),
    )]
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
    step = (run.summary or {}).get("global_step")
    if run.summary is None:
        return "unfinished", "unfinished: no summary.json (stopped before its end, or still training)"
    if run.summary.get("stopped"):
        return "stopped", f"stopped at step {number(step)} (a checkpoint was saved; --resume continues it)"
    return "finished", f"finished at step {number(step)}"


def _listing(items: Any, limit: int = 6) -> str | None:
    items = items if isinstance(items, list) else [items] if items else []
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
    steps, max_steps = summary.get("global_step", last_train.get("step")), training.get("max_steps")
    steps_text = None if steps is None else number(steps) + (f" of {number(max_steps)}" if max_steps is not None else "")
    tokens = summary.get("tokens_seen", last_train.get("tokens_seen"))
    runtime = summary.get("runtime_seconds")
    if runtime is None:  # no summary: Trainer's own time, training only
        runtime = next((r["train_runtime"] for r in reversed(run.records) if is_number(r.get("train_runtime"))), None)
    final, loss = summary.get("eval_bpb"), summary.get("eval_loss")
    scored = [e for e in evaluations(run.records) if e.bpb is not None]
    if is_number(final):  # as the run's last line prints them
        quality = f"<strong>{final:.4f}</strong> bits/byte" + (f" (validation loss {loss:.4f})" if is_number(loss) else "")
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
        mfu_text = f", MFU {statistics.median(mfu):.1%}" if mfu else ""
        throughput = f"{number(round(statistics.median(speed)))} tokens/s{mfu_text} (medians of the logged steps)"
    base = summary.get("base_model") or (run.config.get("model") or {}).get("init_from")
    if isinstance(base, dict):
        base = " ".join(str(v) for v in base.values())
    report = run.corpus_report if isinstance(run.corpus_report, dict) else {}
    warnings = report.get("warnings") if isinstance(report.get("warnings"), list) else []
    plural = "s" if len(warnings) != 1 else ""
    facts = facts_list([
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
        ("corpus warnings", f'<a class="warn" href="#corpus">{len(warnings)} warning{plural}</a>' if warnings else None),
        ("model folder", f"<code>{esc(run.model_folder)}/</code>" if run.model_folder else None),
    ])
    problems = f'<ul class="warnings">{"".join(f"<li>{esc(p)}</li>" for p in run.problems)}</ul>' if run.problems else ""
    nav = " · ".join(f'<a href="#{sid}">{esc(name.lower())}</a>' for sid, name in SECTIONS[1:])
    title = f'<p class="kicker">MiniGPT run</p><h1>{esc(run.path.name)}</h1>'
    return f'<header id="overview">{title}{facts}{problems}<nav>{nav}</nav></header>'


def corpus_section(run: RunFolder) -> str:
    report = run.corpus_report
    if report is None:
        return _section("corpus", empty_note("no corpus report for this run"))
    if not isinstance(report, dict):
        return _section("corpus", render_json(report))
    warnings, body = report.get("warnings"), ""
    if isinstance(warnings, list):
        body = f'<div class="warnbox"><h3>Warnings</h3>{render_json(warnings, "warnings")}</div>' if warnings else '<p class="ok">no warnings</p>'
    rest = {k: v for k, v in report.items() if k not in ("warnings", "plan")}  # the plan has its own section
    body += render_json(rest) if rest else ""
    return _section("corpus", body, f' <span class="source">{esc(CORPUS_REPORT_FILE)}</span>')


def plan_section(run: RunFolder) -> str:
    """plan.json for a sized run, else the corpus report's plan (the configured steps in the sizing
    rule's terms); then what the config asked."""
    report = run.corpus_report if isinstance(run.corpus_report, dict) else {}
    name, plan = (PLAN_FILE, run.plan) if run.plan is not None else (f"{CORPUS_REPORT_FILE}: plan", report.get("plan"))
    body = f'<h3><span class="source">{esc(name)}</span></h3>{render_json(plan)}' if plan is not None else ""
    return _section("plan", (body or empty_note(f"no plan recorded for this run ({PLAN_FILE})")) + _configured(run))


def _configured(run: RunFolder) -> str:
    """What the config asked for, and what that comes to in tokens (per step as logged)."""
    training, hardware = run.config.get("training") or {}, run.config.get("hardware") or {}
    if not training:
        return ""
    block = (run.config.get("data") or {}).get("block_size")
    logged = [r for r in run.records if is_number(r.get("tokens_seen")) and r.get("step")]
    per_step = logged[-1]["tokens_seen"] / logged[-1]["step"] if logged else None
    planned = per_step * training["max_steps"] if per_step and is_number(training.get("max_steps")) else None
    rate, floor, warmup = (training.get(key) for key in ("learning_rate", "min_learning_rate", "warmup_steps"))
    schedule = training.get("lr_scheduler_type")
    lr_text = None
    if rate is not None:
        lr_text = number(rate) + (f" to {number(floor)}" if floor is not None else "")
        lr_text += (f", {esc(schedule)}" if schedule else "") + (f", {number(warmup)} warmup steps" if warmup else "")
    batch = hardware.get("per_device_train_batch_size")
    facts = facts_list([
        ("steps", number(training["max_steps"]) if training.get("max_steps") is not None else None),
        ("learning rate", lr_text),
        ("optimizer", esc(training["optim"]) if training.get("optim") else None),
        ("batch", f"{number(batch)} sequences per device x {number(hardware.get('gradient_accumulation_steps', 1))} "
         f"accumulation, {number(block)} tokens each" if batch is not None and block is not None else None),
        ("tokens per step", number(round(per_step)) if per_step else None),
        ("tokens planned", number(round(planned)) if planned else None),
    ])
    return f'<h3><span class="source">{esc(RESOLVED_CONFIG_NAME)}</span> as configured</h3>{facts}'


def curves_section(run: RunFolder) -> str:
    train, validation = series(run.records, "loss"), series(run.records, "eval_loss")
    rate, speed = series(run.records, "learning_rate"), series(run.records, "tokens_per_second")
    if not (train or validation):
        return _section("curves", empty_note(f"no loss logged yet ({METRICS_FILE} has no training record)"))

    def caption(name: str, points: Sequence) -> str:
        shown = thin(points)
        if len(shown) < len(points):
            return f"{name}: {len(points):,} records, drawn as {len(shown):,} points (each span's lowest and highest)"
        return f"{name}: {len(points):,} records"

    loss = (
        f'<figure id="curve-loss" class="wide">{figure_svg(loss_figure(thin(train), thin(validation)), "loss")}'
        f"<figcaption>{esc(caption('training loss', train))}; validation loss: {len(validation):,} evaluations"
        "</figcaption></figure>"
    )
    parts = [loss]
    for figure_id, points, label, color, eng in (
        ("curve-learning-rate", rate, "learning rate", "tab:green", False),
        ("curve-throughput", speed, "tokens per second", "tab:purple", True),
    ):
        drawing = empty_note(f"no {label} logged")
        if points:
            drawing = f"{line_svg(thin(points), label, color, figure_id, eng=eng)}<figcaption>{esc(caption(label, points))}</figcaption>"
        parts.append(f'<figure id="{figure_id}">{drawing}</figure>')
    return _section("curves", f'{parts[0]}<div class="pair">{"".join(parts[1:])}</div>')


def evaluations_section(run: RunFolder) -> str:
    rows = evaluations(run.records)
    if not rows:
        return _section("evaluations", empty_note(f"no evaluation in {METRICS_FILE}"))
    best = min((e.bpb for e in rows if e.bpb is not None), default=None)
    shown = _pick_rows(rows)

    def cell(value: float | None, decimals: int = 4) -> str:  # as the run's eval lines print them
        return f'<td class="num">{f"{value:,.{decimals}f}" if value is not None else "–"}</td>'

    body = "".join(
        f'<tr{" class=best" if e.bpb is not None and e.bpb == best else ""}><td class="num">{number(e.step)}</td>'
        f"{cell(e.loss)}{cell(e.perplexity, 2)}{cell(e.bpb)}</tr>"
        for e in shown
    )
    note = "" if len(shown) == len(rows) else (
        f'<p class="note">{len(shown):,} of {len(rows):,} evaluations shown (the first, the last, the best '
        f"and evenly spaced others); {METRICS_FILE} has them all</p>"
    )
    table = (  # in a box of its own that scrolls sideways on a narrow screen
        '<div class="scroll"><table class="grid evaluations"><thead><tr><th>step</th><th>validation loss</th>'
        f"<th>perplexity</th><th>bits/byte</th></tr></thead><tbody>{body}</tbody></table></div>"
    )
    return _section("evaluations", table + note + '<p class="note">bold: the best bits/byte</p>')


def samples_section(run: RunFolder) -> str:
    if not run.samples:
        return _section("samples", empty_note(f"no samples ({SAMPLES_FILE} is empty or missing)"))
    by_prompt: dict[str, list[Sample]] = {}
    for sample in run.samples:
        by_prompt.setdefault(sample.prompt, []).append(sample)
    steps, articles = sorted({s.step for s in run.samples}), []
    for prompt, samples in list(by_prompt.items())[:MAX_PROMPTS]:
        first, last = min(samples, key=lambda s: s.step), max(samples, key=lambda s: s.step)
        shown = [(last, "last")] if first is last else [(first, "first"), (last, "last")]
        columns = "".join(
            f'<div class="sample"><h4>step {number(s.step)} ({which})</h4><pre>{esc(_cut(s.text))}</pre></div>'
            for s, which in shown
        )
        articles.append(f'<article><h3>prompt <code>{esc(prompt)}</code></h3><div class="pair">{columns}</div></article>')
    span = f"{number(steps[0])} to {number(steps[-1])}" if len(steps) > 1 else number(steps[0])
    note = f"sampled at {len(steps)} step{'s' if len(steps) != 1 else ''} ({span})"
    if len(by_prompt) > MAX_PROMPTS:
        note += f"; the first {MAX_PROMPTS} of {len(by_prompt)} prompts shown"
    return _section("samples", f'<p class="note">{esc(note)}; all are in {SAMPLES_FILE}</p>' + "".join(articles))


def _cut(text: str) -> str:
    more = len(text) - MAX_SAMPLE_CHARS
    return text if more <= 0 else text[:MAX_SAMPLE_CHARS] + f"\n… ({more:,} more characters in {SAMPLES_FILE})"


def config_section(run: RunFolder) -> str:
    if run.config_text is None:
        return _section("config", empty_note(f"no {RESOLVED_CONFIG_NAME} in this folder"))
    summary = f"{esc(RESOLVED_CONFIG_NAME)}: every setting of the run, defaults included"
    return _section("config", f"<details><summary>{summary}</summary><pre>{esc(run.config_text)}</pre></details>")


def write_run_page(run: RunFolder) -> Path:
    """Write `<run folder>/run.html` (atomically), one HTML document with its CSS from run_page.css
    beside this file; returns its path."""
    style = Path(__file__).with_name("run_page.css").read_text(encoding="utf-8")
    sections = (overview_section, corpus_section, plan_section, curves_section, evaluations_section, samples_section,
                config_section)
    inputs = (RESOLVED_CONFIG_NAME, METRICS_FILE, SAMPLES_FILE, SUMMARY_FILE, CORPUS_REPORT_FILE, PLAN_FILE)
    read = ", ".join(name for name in inputs if (run.path / name).is_file())
    page = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        # Nothing is fetched: no script, no font, no image from anywhere (inline SVG needs no request).
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>MiniGPT run: {esc(run.path.name)}</title><style>{style}</style></head><body><main>"
        + "".join(section(run) for section in sections)
        + f"<footer>written by MiniGPT from this folder's {esc(read or 'files')}</footer></main></body></html>\n"
    )
    path = run.path / RUN_PAGE_FILE
    with atomic_write_file(path, encoding="utf-8") as handle:
        handle.write(page)
    return path
