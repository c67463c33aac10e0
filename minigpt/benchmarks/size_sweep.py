"""Sweeps of model shape (and learning rate) at fixed compute on several corpora, and the rule's fit.

Each point is a real run (`scripts/train.py` with the default config and overrides, in a fresh
process) of one shape for the steps a FLOP budget buys it (`flops_per_token` x tokens per step),
with the sizing rule's own learning rate, warmup and dropout (`minigpt.training.sizing`), so a
point measures what the plan would have chosen at that shape. Budgets in FLOPs, not seconds: the
result does not depend on how busy the machine was, and a slower machine reaches the same points.
Points are appended to a JSON-lines file as they finish; a sweep started again skips those done.
`fit_rule` fits the sizing rule's A, alpha, B, beta (one floor E per corpus) to them.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIN_SCRIPT = REPO_ROOT / "scripts" / "train.py"
DEFAULT_CONFIG = REPO_ROOT / "configs" / "shakespeare.yaml"
SWEEP_EVAL_TOKENS = 131_072  # each point's final evaluation: the same seeded sample for every shape
SWEEP_SEED = 1337  # the default config's training.seed: the points the fit and the tables take
SWEEP_BATCH = 8  # the default config's blocks a step (8 x 128 = 1024 tokens), as plans keep it


@dataclass(frozen=True)
class SweepCorpus:
    name: str
    overrides: tuple[str, ...]  # data.* keys: its files, format, split


def corpus_facts(corpus: SweepCorpus, workdir: Path) -> dict[str, int]:
    """Train (or reuse) the corpus's tokenizer and blocks; its vocabulary and training tokens."""
    from ..data.corpus import prepare_corpus
    from ..data.tokenizer import load_or_train_tokenizer
    from ..training.run_config import load_run_config

    run = load_run_config(DEFAULT_CONFIG, list(common_overrides(corpus, workdir)))
    tokenizer = load_or_train_tokenizer(run.tokenizer, run.data)
    prepared = prepare_corpus(run.data, tokenizer)
    return {"vocab": len(tokenizer), "train_tokens": prepared.train_stats.tokens}


def common_overrides(corpus: SweepCorpus, workdir: Path) -> tuple[str, ...]:
    return (
        *corpus.overrides,
        f"tokenizer.path={workdir / 'tokenizers' / corpus.name}",  # outside the corpus: a folder is read whole
        f"data.cache_dir={workdir / 'cache'}",
        "tokenizer.show_progress=false",
        "data.show_progress=false",
    )


def point_overrides(layers: int, width: int, steps: int, lr: float, dropout: float, out: Path) -> list[str]:
    from ..training.sizing import HEAD_SIZE, warmup_steps

    return [
        f"model.num_hidden_layers={layers}",
        f"model.hidden_size={width}",
        f"model.num_attention_heads={width // HEAD_SIZE}",
        f"model.hidden_dropout={dropout}",
        f"training.max_steps={steps}",
        f"training.learning_rate={lr}",
        f"training.min_learning_rate={lr / 10}",
        f"training.warmup_steps={warmup_steps(steps)}",
        f"training.output_dir={out}",
        f"training.eval_steps={steps}",  # one evaluation, at the end
        f"training.save_steps={steps}",
        "training.save_total_limit=1",
        "training.sample_steps=0",
        "training.sample_max_new_tokens=8",
        f"training.logging_steps={max(1, steps // 10)}",
        f"training.eval_tokens={SWEEP_EVAL_TOKENS}",
    ]


def shape_flops_per_token(layers: int, width: int, vocab: int, block_size: int) -> tuple[int, float]:
    """(matmul parameters, training FLOPs per token) of the default config's model at this shape,
    built on the meta device (no memory, no init)."""
    import torch

    from ..model import MiniGPTConfig, MiniGPTForCausalLM
    from ..training.callbacks import flops_per_token, matmul_parameter_count
    from ..training.run_config import load_run_config
    from ..training.sizing import HEAD_SIZE

    run = load_run_config(
        DEFAULT_CONFIG,
        [f"model.num_hidden_layers={layers}", f"model.hidden_size={width}", f"model.num_attention_heads={width // HEAD_SIZE}"],
    )
    config = MiniGPTConfig(**run.model.architecture(), vocab_size=vocab)
    with torch.device("meta"):
        model = MiniGPTForCausalLM(config)
    return matmul_parameter_count(model, config), flops_per_token(model, config, block_size)


def done_keys(results: Path) -> set[str]:
    if not results.exists():
        return set()
    return {json.loads(line)["key"] for line in results.read_text().splitlines() if line.strip()}


def run_point(
    corpus: SweepCorpus, facts: dict[str, int], layers: int, width: int, flops: float, lr_scale: float,
    workdir: Path, results: Path, batch: int = SWEEP_BATCH, block_size: int = 128, seed: int = SWEEP_SEED,
) -> dict[str, Any] | None:
    """One shape at one budget: trains it and appends its result; None when done before. Another
    `seed` than SWEEP_SEED repeats a point to measure its spread (keyed apart; `average_seeds` takes their mean);
    another `batch` (blocks a step) than SWEEP_BATCH is a point of the grid the rule does not choose from."""
    from ..training.sizing import REPEAT_DROPOUT, learning_rate

    key = f"{corpus.name}|{flops:.3g}|{layers}x{width}|{lr_scale:g}" + (f"|b{batch}" if batch != SWEEP_BATCH else "")
    key += f"|s{seed}" if seed != SWEEP_SEED else ""
    tokens_per_step = batch * block_size
    if key in done_keys(results):
        return None
    parameters, per_token = shape_flops_per_token(layers, width, facts["vocab"], block_size)
    steps = int(flops / (per_token * tokens_per_step))
    if steps < 20:
        return None
    lr = learning_rate(width) * lr_scale
    tokens = steps * tokens_per_step
    dropout = REPEAT_DROPOUT if tokens > facts["train_tokens"] else 0.0
    out = workdir / "runs" / corpus.name / key.replace("|", "_")
    command = [
        sys.executable, str(TRAIN_SCRIPT), str(DEFAULT_CONFIG), *common_overrides(corpus, workdir),
        *point_overrides(layers, width, steps, lr, dropout, out),
        f"training.seed={seed}",
        f"hardware.per_device_train_batch_size={batch}",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{key} failed:\n{done.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    record = {
        "key": key, "corpus": corpus.name, "flops": flops, "layers": layers, "width": width,
        "lr_scale": lr_scale, "batch": batch, "learning_rate": lr, "dropout": dropout, "parameters": parameters, "seed": seed,
        "steps": steps, "tokens": tokens, "train_tokens": facts["train_tokens"],
        "epochs": tokens / facts["train_tokens"], "eval_bpb": summary["eval_bpb"],
        "wall_s": time.perf_counter() - started,  # informational: the budget is FLOPs
    }
    with results.open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    curves = workdir / "curves"  # the loss curve outlives the run's folder: a spike shows there
    curves.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").replace(curves / f"{out.name}.jsonl")
    shutil_rmtree(out)
    return record


def shutil_rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def average_seeds(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per place (corpus, budget, shape, learning rate and batch): its SWEEP_SEED point with
    `eval_bpb` the mean over every seed run there and `seed_bpb` each seed's, SWEEP_SEED's first.
    A seed's runs share the validation sample (data.seed), so their spread is the training's alone;
    repeats without a SWEEP_SEED point at their place are left out."""
    def where(p: dict[str, Any]) -> tuple:
        return p["corpus"], p["flops"], p["layers"], p["width"], p["lr_scale"], p.get("batch", SWEEP_BATCH)

    first = [p for p in points if p.get("seed", SWEEP_SEED) == SWEEP_SEED]
    seeds: dict[tuple, list[float]] = {where(p): [p["eval_bpb"]] for p in first}
    for p in points:
        if p.get("seed", SWEEP_SEED) != SWEEP_SEED and where(p) in seeds:
            seeds[where(p)].append(p["eval_bpb"])
    return [dict(p, eval_bpb=sum(seeds[where(p)]) / len(seeds[where(p)]), seed_bpb=seeds[where(p)]) for p in first]


ALPHA_MAX = 0.6  # a prior: the field's fitted exponents are 0.08-0.34 (Kaplan 2020, Hoffmann 2022)


def fit_rule(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Least squares of eval_bpb = E_corpus + A / N^alpha + B / D'^beta, R* (the repeats' decay) fitted too.

    Only runs of at least `MIN_STEPS` steps, as plans are (`minigpt.training.sizing`): a few dozen
    steps measure the warmup, not the shape. alpha is bounded by `ALPHA_MAX`: these budgets reach few
    shapes past their best, so the data alone leave it loose.
    """
    import numpy as np
    from scipy.optimize import least_squares

    from ..training.sizing import MIN_STEPS, effective_tokens

    points = [p for p in points if p["steps"] >= MIN_STEPS]
    corpora = sorted({p["corpus"] for p in points})
    n = np.array([p["parameters"] for p in points], float)
    y = np.array([p["eval_bpb"] for p in points], float)
    which = np.array([corpora.index(p["corpus"]) for p in points])

    def residuals(x):
        log_a, alpha, log_b, beta, log_r, *floors = x
        d = np.array([effective_tokens(p["tokens"], p["train_tokens"], math.exp(log_r)) for p in points])
        return np.array(floors)[which] + np.exp(log_a) / n**alpha + np.exp(log_b) / d**beta - y

    start = [math.log(40.0), 0.3, math.log(100.0), 0.3, math.log(15.4), *[1.0] * len(corpora)]
    lower = [-10, 0.02, -10, 0.02, 0.0, *[0.0] * len(corpora)]
    upper = [30, ALPHA_MAX, 30, 1.5, math.log(1000.0), *[10.0] * len(corpora)]
    fit = least_squares(residuals, start, bounds=(lower, upper))
    log_a, alpha, log_b, beta, log_r, *floors = fit.x
    error = -residuals(fit.x)  # (points,) measured - predicted: + where a run did worse than the rule
    return {
        "a": math.exp(log_a), "alpha": alpha, "b": math.exp(log_b), "beta": beta, "r_star": math.exp(log_r),
        "floors": dict(zip(corpora, floors, strict=True)), "points": len(points),
        "rms_error": float(np.sqrt(np.mean(error**2))), "max_error": float(np.max(np.abs(error))),
        "errors": {p["key"]: float(e) for p, e in zip(points, error, strict=True)},
    }


def at_rule_settings(point: dict[str, Any]) -> bool:
    """Whether a point ran at the rule's learning rate and the plan's batch: what the rule chooses among."""
    return point["lr_scale"] == 1.0 and point.get("batch", SWEEP_BATCH) == SWEEP_BATCH


def settings_label(point: dict[str, Any]) -> str:
    """ " lr x2", " batch 16": how a grid point differs from the rule's settings ("" when it does not)."""
    label = f" lr x{point['lr_scale']:g}" if point["lr_scale"] != 1.0 else ""
    batch = point.get("batch", SWEEP_BATCH)
    return label + (f" batch {batch}" if batch != SWEEP_BATCH else "")


def choose_from_points(fit: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The point the fitted rule would choose among `rows` (one corpus, one budget, each a shape):
    the lowest A / N^alpha + B / D'^beta, as `minigpt.training.sizing.plan_run` ranks shapes."""
    from ..training.sizing import LossRule

    rule = LossRule(fit["a"], fit["alpha"], fit["b"], fit["beta"], fit["r_star"])
    return min(rows, key=lambda p: rule.predict(p["parameters"], p["tokens"], p["train_tokens"]))


def choice_table(
    points: list[dict[str, Any]], reference: str = "4x128", hold_out: str = "corpus"
) -> list[dict[str, Any]]:
    """For each corpus and budget: the rule's choice when fitted WITHOUT that corpus (`hold_out`
    "corpus") or without that budget's points on any corpus ("budget"), the grid's best (every
    shape and learning rate run there), and the reference shape's (the default run's model, at the
    rule's learning rate) result at that budget. The rule is fitted on, and chooses among, points at
    its own learning rate (`lr_scale` 1) and batch with at least MIN_STEPS steps, as a plan does."""
    from ..training.sizing import MIN_STEPS

    at_rule_lr = [p for p in points if at_rule_settings(p)]
    table = []
    for corpus in sorted({p["corpus"] for p in points}):
        for flops in sorted({p["flops"] for p in points if p["corpus"] == corpus}):
            if hold_out == "corpus":
                others = [p for p in at_rule_lr if p["corpus"] != corpus]
            else:
                others = [p for p in at_rule_lr if p["flops"] != flops]
            if len([p for p in others if p["steps"] >= MIN_STEPS]) < 8:  # too few to fit 5 + corpora constants
                continue
            fit = fit_rule(others)
            grid = [p for p in points if p["corpus"] == corpus and p["flops"] == flops]
            rows = [p for p in grid if at_rule_settings(p)]
            if not rows:
                continue
            eligible = [p for p in rows if p["steps"] >= MIN_STEPS] or rows
            chosen, best = choose_from_points(fit, eligible), min(grid, key=lambda p: p["eval_bpb"])
            default = next((p for p in rows if f"{p['layers']}x{p['width']}" == reference), None)
            table.append(
                {
                    "corpus": corpus, "flops": flops, "shapes": len({(p["layers"], p["width"]) for p in grid}),
                    "grid": len(grid),
                    "chosen": f"{chosen['layers']}x{chosen['width']}", "chosen_bpb": chosen["eval_bpb"],
                    "best": f"{best['layers']}x{best['width']}" + settings_label(best),
                    "best_bpb": best["eval_bpb"],
                    "default_bpb": default["eval_bpb"] if default else None,
                }
            )
    return table


def points_table(points: list[dict[str, Any]], fit: dict[str, Any] | None = None) -> str:
    """Markdown: one row per corpus and budget, one column per shape (bits/byte, steps, epochs) at the
    rule's settings; with a fit, each cell also shows how far the rule's prediction is (+: the run
    did worse); a place run at several seeds (`average_seeds`) shows how many and their range."""
    points = [p for p in points if at_rule_settings(p)]
    shapes = sorted({(p["layers"], p["width"]) for p in points})
    header = "| corpus | FLOPs | " + " | ".join(f"{layers}x{width}" for layers, width in shapes) + " |"
    lines = [header, "|---|---:|" + "---:|" * len(shapes)]
    for corpus in sorted({p["corpus"] for p in points}):
        for flops in sorted({p["flops"] for p in points if p["corpus"] == corpus}):
            cells = []
            for layers, width in shapes:
                point = next(
                    (p for p in points if (p["corpus"], p["flops"], p["layers"], p["width"]) == (corpus, flops, layers, width)),
                    None,
                )
                if point is None:
                    cells.append("-")
                    continue
                error = f", {fit['errors'][point['key']]:+.3f}" if fit and point["key"] in fit["errors"] else ""
                seeds = point.get("seed_bpb", [])
                spread = f"; {len(seeds)} seeds {min(seeds):.4f}-{max(seeds):.4f}" if len(seeds) > 1 else ""
                cells.append(f"{point['eval_bpb']:.4f} ({point['steps']} st, {point['epochs']:.2f} ep{error}{spread})")
            lines.append(f"| {corpus} | {flops:.3g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["SWEEP_BATCH", "SWEEP_SEED", "SweepCorpus", "at_rule_settings", "average_seeds", "points_table", "choice_table", "choose_from_points", "corpus_facts", "fit_rule", "run_point", "shape_flops_per_token"]
