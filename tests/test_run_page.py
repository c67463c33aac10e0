"""The run page (run.html): each part of a run shown from the run folder's files, escaped, bounded,
written at the end of a real run, and looked at in Chromium (MINIGPT_WRITE_SCREENSHOTS=1 writes its
screenshot to docs/run-page.png; otherwise it goes to the test's own folder, and the checkout stays as it was).

The run folders here are written by hand (`fake_run`): the numbers are made up, shaped like a
3,000-step run, so the page has curves worth drawing without minutes of training.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from pathlib import Path

import pytest
import yaml
from conftest import (
    CHROMIUM,
    CHROMIUM_ARGS,
    REPO_ROOT,
    browser_missing,
    load_script,
    small_run,
    tiny_model,
    write_small_corpus,
)

from minigpt.errors import ConfigError
from minigpt.reporting.report import write_report as write_run_page  # the page and loss.png, as a run ends
from minigpt.reporting.run_folder import MAX_CURVE_POINTS, count_parameters, run_samples, thin
from minigpt.reporting.run_page import SECTIONS
from minigpt.run_layout import Sample, format_sample
from minigpt.training.run_config import build_run_config

SCREENSHOT = REPO_ROOT / "docs" / "run-page.png"
CHAT_PROMPT = "<|im_start|>user\nWho is there?<|im_end|>\n<|im_start|>assistant\n"
CORPUS_REPORT = {
    "splits": {
        "train": {"documents": 1, "bytes": 1_003_854, "tokens": 301_156},
        "validation": {"documents": 1, "bytes": 111_540, "tokens": 33_462},
    },
    "duplicates": {"documents": 0, "bytes": 0},
    "overlap": {"validation_lines_in_train": 412, "fraction": 0.031},
    "warnings": ["412 validation lines (3.1%) also occur in the training split"],
    "plan": {"epochs": 20.4, "tokens_per_parameter": 0.5},
}


def fake_run(
    root: Path,
    steps: int = 3000,
    log_every: int = 10,
    eval_every: int = 500,
    *,
    stopped: bool = False,
    summary: bool = True,
    corpus_report: dict | None = None,
    samples: list[tuple[int, str, str]] | None = None,
) -> Path:
    """A run folder as training leaves it, written by hand: resolved config, metrics, samples,
    summary, final/config.json and a safetensors header (all the page reads of the weights)."""
    run = root / "shakespeare"
    (run / "final").mkdir(parents=True)
    raw = {
        "model": {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 6, "max_position_embeddings": 256},
        "tokenizer": {"vocab_size": 4096},
        "data": {"train_files": ["data/tinyshakespeare.txt"], "block_size": 256},
        "training": {
            "output_dir": str(run),
            "max_steps": steps,
            "learning_rate": 3e-3,
            "min_learning_rate": 3e-4,
            "warmup_steps": 100,
            "sample_prompts": ["ROMEO:"],
        },
    }
    (run / "resolved_config.yaml").write_text(yaml.safe_dump(build_run_config(raw).to_dict(), sort_keys=False))
    noise = random.Random(0)
    records = [{"step": 0, "segment": {"hardware": {"profile": "cpu"}, "threads": 2}}]
    for step in range(log_every, steps + 1, log_every):
        warm = min(1.0, step / 100)
        rate = 3e-3 * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / steps))))
        records.append(
            {
                "step": step,
                "loss": 1.55 + 4.2 * math.exp(-step / 450) + noise.gauss(0, 0.04),
                "grad_norm": 0.4 + noise.random() * 0.2,
                "learning_rate": rate,
                "tokens_per_second": 47_000 + noise.gauss(0, 1500) - (9000 if step % eval_every == 0 else 0),
                "mfu": 0.012,
                "tokens_seen": step * 2048,
            }
        )
        if step % eval_every == 0:
            loss = 1.62 + 4.1 * math.exp(-step / 450)
            records.append(
                {"step": step, "eval_loss": loss, "eval_perplexity": math.exp(loss), "eval_bpb": loss * 0.4427}
            )
    records.append({"step": steps, "train_runtime": 155.2, "train_tokens_per_second": 39_500})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if samples is None:
        samples = [
            (eval_every, "ROMEO:", "ROMEO:\nWhat sthe the mase, and t the wor the lord?"),
            (eval_every, CHAT_PROMPT, CHAT_PROMPT + "I the to my lord.<|im_end|>"),
            (steps, "ROMEO:", "ROMEO:\nWhat say you, my lord? I will not be gone\nBefore the morning & the king's return."),
            (steps, CHAT_PROMPT, CHAT_PROMPT + "A friend to Rome, my lord.<|im_end|>"),
        ]
    (run / "samples.txt").write_text("".join(format_sample(*s) for s in samples))
    evals = [r for r in records if "eval_loss" in r]
    if summary:
        final = {} if stopped else {k: evals[-1][k] for k in ("eval_loss", "eval_perplexity", "eval_bpb")}
        record = {"global_step": steps, "tokens_seen": steps * 2048, "runtime_seconds": 171.4, "stopped": stopped}
        record.update(final_dir=None if stopped else str(run / "final"), best_eval_bpb=evals[-1]["eval_bpb"], **final)
        (run / "summary.json").write_text(json.dumps(record, indent=2))
    model = {"model_type": "minigpt", "num_hidden_layers": 6, "hidden_size": 384, "num_attention_heads": 6,
             "max_position_embeddings": 256, "vocab_size": 4096}
    (run / "final" / "config.json").write_text(json.dumps(model))
    shapes = {"wte": [4096, 384], "wpe": [256, 384], "blocks": [6, 12 * 384 * 384 + 13 * 384]}
    header = json.dumps({name: {"dtype": "F32", "shape": s, "data_offsets": [0, 0]} for name, s in shapes.items()})
    (run / "final" / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header.encode())
    if corpus_report is not None:
        (run / "corpus_report.json").write_text(json.dumps(corpus_report))
    return run


def section(page: str, section_id: str) -> str:
    """The HTML of one section of the page."""
    match = re.search(rf'<(section|header) id="{section_id}">(.*?)</\1>', page, re.S)
    assert match, section_id
    return match.group(2)


# ---- the page's text ------------------------------------------------------------------------------


def test_the_page_shows_each_part_of_the_run_and_needs_nothing_else(tmp_path):
    path = write_run_page(fake_run(tmp_path, corpus_report=CORPUS_REPORT))
    assert path == tmp_path / "shakespeare" / "run.html"
    page = path.read_text()
    for section_id, _ in SECTIONS:
        assert f'id="{section_id}"' in page, section_id
    overview = section(page, "overview")
    assert "<h1>shakespeare</h1>" in overview and "finished at step 3,000" in overview
    params = 4096 * 384 + 256 * 384 + 6 * (12 * 384 * 384 + 13 * 384)
    assert f"{params / 1e6:.2f}M parameters (6 layers, 384 hidden, 6 heads, 256 context, 4,096 vocab)" in overview
    assert "<code>data/tinyshakespeare.txt</code>" in overview and "2m51s" in overview
    assert "1 warning</a>" in overview  # the corpus report's, linked
    assert "<strong>0.7195</strong> bits/byte (validation loss 1.6252)" in overview  # summary.json's figures
    assert "<dt>best</dt>" not in overview  # the final one is the best
    curves = section(page, "curves")
    assert [f'id="{f}"' in curves for f in ("curve-loss", "curve-learning-rate", "curve-throughput")] == [True] * 3
    assert curves.count("<svg") == 3 and "training loss: 300 records" in curves
    evaluations = section(page, "evaluations")
    assert evaluations.count("<tr") == 1 + 6  # the header row and one per evaluation (every 500 steps)
    assert '<tr class=best><td class="num">3,000</td><td class="num">1.6252</td><td class="num">5.08</td>' in evaluations
    samples = section(page, "samples")
    assert "step 500 (first)" in samples and "step 3,000 (last)" in samples
    assert "sampled at 2 steps (500 to 3,000)" in samples
    assert "<details><summary>resolved_config.yaml" in section(page, "config")
    assert "hidden_size: 384" in section(page, "config")
    # Self-contained: no script, no stylesheet or image to fetch, and a policy that forbids requests.
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert not re.search(r"""(src|href)=["']?(https?:|//)|url\((https?:|//)""", page)
    assert "default-src 'none'" in page


def test_samples_prompts_and_reports_are_escaped(tmp_path):
    samples = [(10, "<b>ROMEO</b>", "<b>ROMEO</b> <script>alert(1)</script> & <|endoftext|>")]
    report = {"warnings": ["<img src=x onerror=alert(1)>"], "notes": {"<key>": "a < b"}}
    page = write_run_page(fake_run(tmp_path, samples=samples, corpus_report=report)).read_text()
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>ROMEO" not in page
    assert "&lt;b&gt;ROMEO&lt;/b&gt; &lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;|endoftext|&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "&lt;key&gt;" in page and "a &lt; b" in page


def test_the_first_and_last_sample_of_each_prompt_with_special_tokens_escaped(tmp_path):
    samples = [(s, p, f"{p}at {s}") for s in (100, 200, 300) for p in ("ROMEO:", CHAT_PROMPT)]
    page = section(write_run_page(fake_run(tmp_path, samples=samples)).read_text(), "samples")
    assert page.count("<article>") == 2 and "at 100" in page and "at 300" in page and "at 200" not in page
    assert "&lt;|im_start|&gt;user\nWho is there?&lt;|im_end|&gt;" in page and "<|im_start|>" not in page
    assert "&#x27;&lt;|im_start|&gt;user\\nWho is there?" in page  # the prompt as samples.txt names it


def test_a_long_run_makes_a_small_page(tmp_path):
    page = write_run_page(fake_run(tmp_path, steps=100_000, log_every=1, eval_every=50)).read_text()
    assert len(page.encode()) < 1_500_000, len(page)
    curves = section(page, "curves")
    assert f"training loss: 100,000 records, drawn as {MAX_CURVE_POINTS:,} points" in curves
    evaluations = section(page, "evaluations")
    shown = int(re.search(r"(\d+) of 2,000 evaluations shown", evaluations).group(1))
    assert 150 < shown <= 200 and evaluations.count("<tr") == 1 + shown


def test_thin_keeps_the_ends_and_each_spans_extremes():
    points = [(step, 1.0 + (step % 7) * 0.01) for step in range(10_000)]
    points[4321] = (4321, 9.0)  # a spike every-n-th thinning would likely miss
    points[7777] = (7777, -1.0)
    kept = thin(points, limit=500)
    assert len(kept) <= 500 and kept[0] == points[0] and kept[-1] == points[-1]
    assert (4321, 9.0) in kept and (7777, -1.0) in kept
    assert [p[0] for p in kept] == sorted(p[0] for p in kept)
    assert thin(points[:10], limit=500) == points[:10]


def test_missing_parts_are_said_in_their_place(tmp_path):
    run = fake_run(tmp_path, summary=False)
    (run / "samples.txt").unlink()
    page = write_run_page(run).read_text()
    assert "no corpus report for this run" in section(page, "corpus")
    assert "no plan recorded for this run (plan.json)" in section(page, "plan")
    assert "no samples" in section(page, "samples")
    assert "unfinished: no summary.json" in section(page, "overview")
    assert "0.7195 bits/byte at step 3,000, the last evaluation" in section(page, "overview")


def test_a_stopped_run_says_so(tmp_path):
    page = write_run_page(fake_run(tmp_path, stopped=True)).read_text()
    assert "stopped at step 3,000 (a checkpoint was saved; --resume continues it)" in section(page, "overview")


def test_json_inputs_are_drawn_generically_with_warnings_highlighted(tmp_path):
    run = fake_run(tmp_path, corpus_report=CORPUS_REPORT)
    (run / "plan.json").write_text(json.dumps({"model": {"layers": 6, "why": "fits 1M tokens"}, "notes": ["a", "b"]}))
    page = write_run_page(run).read_text()
    corpus = section(page, "corpus")
    assert '<div class="warnbox"><h3>Warnings</h3><ul class="warnings"><li>412 validation lines' in corpus
    # the splits are alike objects: one table, a row each; the others a table of their keys
    assert '<table class="grid"><thead><tr><th></th><th>documents</th><th>bytes</th><th>tokens</th>' in corpus
    assert "<th>validation lines in train</th>" in corpus and "1,003,854" in corpus and "0.031" in corpus
    assert "epochs" not in corpus  # the report's plan part is drawn in the plan section
    # A sized run's plan.json is the plan, shown once: the corpus report's plan is not repeated.
    plan = section(page, "plan")
    assert '<span class="source">plan.json</span>' in plan and "corpus_report.json: plan" not in plan
    assert "fits 1M tokens" in plan and "<li>a</li><li>b</li>" in plan and "tokens per parameter" not in plan
    assert "tokens per step</dt><dd>2,048" in plan  # and what the config asked for
    # Without one, the corpus report's plan (the configured steps against the corpus) is drawn.
    (run / "plan.json").unlink()
    plan = section(write_run_page(run).read_text(), "plan")
    assert '<span class="source">corpus_report.json: plan</span>' in plan and "plan.json" not in plan
    assert "<th>tokens per parameter</th><td><span class=\"num\">0.5</span>" in plan


def test_an_unreadable_input_is_said_and_the_rest_is_drawn(tmp_path):
    run = fake_run(tmp_path)
    (run / "corpus_report.json").write_text("{not json")
    page = write_run_page(run).read_text()
    assert "shakespeare/corpus_report.json: Expecting property name" in section(page, "overview")
    assert section(page, "evaluations").count("<tr") == 7


def test_samples_of_a_step_sampled_again_replace_the_earlier_ones():
    old = [Sample(100, "'A'", "old 100"), Sample(200, "'A'", "old 200"), Sample(300, "'A'", "old 300")]
    resumed = [Sample(300, "'A'", "new 300"), Sample(400, "'A'", "new 400")]  # a resume redoes 300
    assert [s.text for s in run_samples(old + resumed)] == ["old 100", "old 200", "new 300", "new 400"]
    started_over = [Sample(100, "'A'", "fresh 100")]  # a new run in the old run's folder
    assert [s.text for s in run_samples(old + started_over)] == ["fresh 100"]


def test_parameters_are_counted_from_the_safetensors_headers(tmp_path):
    model = tiny_model()
    model.save_pretrained(tmp_path / "model")
    assert count_parameters(tmp_path / "model") == sum(p.numel() for p in model.parameters())
    assert count_parameters(tmp_path) is None  # no weights there


def test_a_folder_without_a_run_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="is not a run folder: it has no resolved_config.yaml"):
        write_run_page(tmp_path)


def test_the_script_redraws_the_page_of_a_run_folder(tmp_path, capsys):
    run = fake_run(tmp_path)
    assert load_script("run_page").main([str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "run.html")
    assert (run / "run.html").stat().st_size > 10_000


# ---- a real run ------------------------------------------------------------------------------------


def test_a_training_run_ends_with_its_page(tmp_path, capsys):
    from minigpt.pipeline import run_training

    folder = tmp_path / "run"
    run = small_run(folder, write_small_corpus(tmp_path), "training.max_steps=4", "training.logging_steps=2")
    result = run_training(run)
    assert result.page == folder / "run.html"
    assert capsys.readouterr().out.strip().splitlines()[-1] == f"run page: {folder / 'run.html'}"
    page = result.page.read_text()
    assert "finished at step 4" in section(page, "overview") and section(page, "curves").count("<svg") == 3
    assert section(page, "evaluations").count("<tr") == 2  # the final evaluation
    assert "step 4 (last)" in section(page, "samples")


# ---- in a browser ---------------------------------------------------------------------------------


def test_the_page_in_chromium_shows_each_part(tmp_path):
    """Opened from file:// in headless Chromium: each section visible, the curves drawn with a size,
    the evaluations and samples legible; nothing requested but the page. The full-page screenshot
    is docs/run-page.png with MINIGPT_WRITE_SCREENSHOTS=1."""
    if reason := browser_missing():
        pytest.skip(reason)
    from playwright.sync_api import expect, sync_playwright

    run = fake_run(tmp_path, corpus_report=CORPUS_REPORT)
    (run / "plan.json").write_text(json.dumps({"model": "6 layers x 384: about 10.8M parameters for 1M tokens"}))
    url = write_run_page(run).as_uri()
    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("request", lambda request: requests.append(request.url))
        page.goto(url)
        for section_id, heading in SECTIONS:
            expect(page.locator(f"#{section_id}")).to_be_visible()
            if section_id != "overview":
                expect(page.locator(f"#{section_id} h2")).to_contain_text(heading)
        for figure in ("curve-loss", "curve-learning-rate", "curve-throughput"):
            box = page.locator(f"#{figure} svg").bounding_box()
            assert box and box["width"] > 300 and box["height"] > 150, (figure, box)
        loss = page.locator("#curve-loss svg").bounding_box()
        assert loss["width"] <= 1100  # within the page, not past its edge
        expect(page.locator("#evaluations tbody tr")).to_have_count(6)
        expect(page.locator("#evaluations tr.best")).to_contain_text("3,000")
        expect(page.locator("#samples pre").first).to_contain_text("What sthe the mase")
        expect(page.locator("#samples")).to_contain_text("<|im_start|>user")  # shown as written, not markup
        expect(page.locator("#corpus .warnings")).to_contain_text("412 validation lines")
        expect(page.locator("#config pre")).to_be_hidden()  # collapsed until asked for
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280  # nothing overflows sideways
        screenshot = SCREENSHOT if os.environ.get("MINIGPT_WRITE_SCREENSHOTS") else tmp_path / SCREENSHOT.name
        page.screenshot(path=str(screenshot), full_page=True)
        assert screenshot.stat().st_size > 50_000  # a drawn page, not a blank one
        page.click("#config summary")
        expect(page.locator("#config pre")).to_contain_text("hidden_size: 384")
        browser.close()
    assert requests == [url]
