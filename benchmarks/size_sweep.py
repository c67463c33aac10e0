"""Sweeps of model shape (and learning rate) at fixed compute on several corpora, and the rule's fit.

Each point is a real run (`scripts/train.py` with the default config and overrides, in a fresh
process) of one shape for the steps a FLOP budget buys it (`flops_per_token` x tokens per step),
with the sizing rule's own learning rate, warmup and dropout (`minigpt.training.sizing`), so a
point measures what the plan would have chosen at that shape. Budgets in FLOPs, not seconds: the
result does not depend on how busy the machine was, and a slower machine reaches the same points.
Points are appended to a JSON-lines file as they finish; a sweep started again skips those done.
`fit_ratio` fits the sizing rule's tokens per parameter to them.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt.training.sizing import (
    FITTED_RULE,
    HEAD_SIZE,
    MIN_STEPS,
    REPEAT_DROPOUT,
    SHAPES,
    Budget,
    Candidate,
    TokensPerParameterRule,
    learning_rate,
    plan_run,
    warmup_steps,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
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
    from minigpt.data.corpus import prepare_corpus
    from minigpt.data.sources import find_sources
    from minigpt.data.tokenizer import load_or_train_tokenizer
    from minigpt.training.run_config import load_run_config

    run = load_run_config(DEFAULT_CONFIG, list(common_overrides(corpus, workdir)))
    sources = find_sources(run.data)
    tokenizer = load_or_train_tokenizer(run.tokenizer, sources)
    prepared = prepare_corpus(sources, tokenizer)
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

    from minigpt.model import MiniGPTConfig, MiniGPTForCausalLM
    from minigpt.training.flops import flops_per_token, matmul_parameter_count
    from minigpt.training.run_config import load_run_config

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
    threads: int | None = None, recipe: tuple[str, ...] = (),
) -> dict[str, Any] | None:
    """One shape at one budget: trains it and appends its result; None when done before. Another
    `seed` than SWEEP_SEED repeats a point to measure its spread (keyed apart; `average_seeds` takes their mean);
    another `batch` (blocks a step) than SWEEP_BATCH is a point of the grid the rule does not choose from.
    `threads` (hardware.torch_num_threads) lets two sweeps share a machine a core each; the point's
    result does not depend on it (its budget is FLOPs). `recipe`: `section.key=value` overrides the
    point trains with on top of the plan's settings (a point of an ablation, kept out of the fit)."""
    key = f"{corpus.name}|{flops:.3g}|{layers}x{width}|{lr_scale:g}" + (f"|b{batch}" if batch != SWEEP_BATCH else "")
    key += f"|{','.join(recipe)}" if recipe else ""
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
        *([f"hardware.torch_num_threads={threads}"] if threads else []),
        *recipe,
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"{key} failed:\n{done.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    record = {
        "key": key, "corpus": corpus.name, "flops": flops, "layers": layers, "width": width,
        "lr_scale": lr_scale, "batch": batch, "learning_rate": lr, "dropout": dropout, "parameters": parameters, "seed": seed,
        **({"recipe": list(recipe)} if recipe else {}), "steps": steps, "tokens": tokens, "train_tokens": facts["train_tokens"],
        "epochs": tokens / facts["train_tokens"], "eval_bpb": summary["eval_bpb"],
        "wall_s": time.perf_counter() - started,  # informational: the budget is FLOPs
    }
    with results.open("a") as handle:
        handle.write(json.dumps(record) + "\n")
    curves = workdir / "curves"  # the loss curve outlives the run's folder: a spike shows there
    curves.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").replace(curves / f"{out.name}.jsonl")
    shutil.rmtree(out, ignore_errors=True)
    return record


def average_seeds(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One point per place (corpus, budget, shape, learning rate and batch): its SWEEP_SEED point with
    `eval_bpb` the mean over every seed run there and `seed_bpb` each seed's, SWEEP_SEED's first.
    A seed's runs share the validation sample (data.seed), so their spread is the training's alone;
    repeats without a SWEEP_SEED point at their place are left out."""
    def where(p: dict[str, Any]) -> tuple:
        return p["corpus"], p["flops"], p["layers"], p["width"], p["lr_scale"], p.get("batch", SWEEP_BATCH), tuple(p.get("recipe", ()))

    first = [p for p in points if p.get("seed", SWEEP_SEED) == SWEEP_SEED]
    seeds: dict[tuple, list[float]] = {where(p): [p["eval_bpb"]] for p in first}
    for p in points:
        if p.get("seed", SWEEP_SEED) != SWEEP_SEED and where(p) in seeds:
            seeds[where(p)].append(p["eval_bpb"])
    return [dict(p, eval_bpb=sum(seeds[where(p)]) / len(seeds[where(p)]), seed_bpb=seeds[where(p)]) for p in first]


# Ratios the fit tries: 1 to about 100 tokens per parameter, 16 a doubling (4.4% apart).
RATIO_GRID = tuple(2 ** (i / 16) for i in range(16 * 7))


def places(points: list[dict[str, Any]]) -> dict[tuple[str, float], list[dict[str, Any]]]:
    """The points of each (corpus, budget) that the rule chooses among: at its settings, MIN_STEPS+ steps."""
    grouped: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for p in points:
        if at_rule_settings(p) and p["steps"] >= MIN_STEPS:
            grouped.setdefault((p["corpus"], p["flops"]), []).append(p)
    return grouped


def choose_from_points(ratio: float, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The point the rule of `ratio` would choose among `rows` (one corpus, one budget, each a shape):
    the tokens per parameter nearest it, as `minigpt.training.sizing.plan_run` ranks shapes."""
    rule = TokensPerParameterRule(ratio)
    return min(rows, key=lambda p: rule.distance(p["parameters"], p["tokens"], p["train_tokens"]))


def fit_ratio(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The tokens per parameter whose choices lose least: for each ratio of RATIO_GRID, the bits/byte
    its choice at each place (corpus and budget: `places`) is above the place's best, summed; the
    geometric middle of the ratios that lose least (ties are wide: a place's shapes are far apart).

    Why not a fitted loss (Chinchilla's A / N^alpha + B / D^beta, as before 2026-12-05): its least
    squares are ruled by the runs far from their place's best, which no plan makes, and its choices
    were a shape too small at every larger budget (docs/research-log.md).
    """
    grouped = {where: rows for where, rows in places(points).items() if len(rows) > 1}
    best = {where: min(p["eval_bpb"] for p in rows) for where, rows in grouped.items()}

    def losses(ratio: float) -> dict[tuple[str, float], float]:
        return {where: choose_from_points(ratio, rows)["eval_bpb"] - best[where] for where, rows in grouped.items()}

    totals = [sum(losses(ratio).values()) for ratio in RATIO_GRID]
    least = min(totals)
    tied = [ratio for ratio, total in zip(RATIO_GRID, totals, strict=True) if total <= least + 1e-9]
    ratio = math.sqrt(tied[0] * tied[-1])
    return {
        "ratio": ratio, "low": tied[0], "high": tied[-1], "places": len(grouped), "loss": least,
        "losses": {f"{corpus}|{flops:.3g}": loss for (corpus, flops), loss in losses(ratio).items()},
    }


def at_rule_settings(point: dict[str, Any]) -> bool:
    """Whether a point ran at the rule's learning rate and the plan's batch: what the rule chooses among."""
    return point["lr_scale"] == 1.0 and point.get("batch", SWEEP_BATCH) == SWEEP_BATCH and not point.get("recipe")


def settings_label(point: dict[str, Any]) -> str:
    """ " lr x2", " batch 16", " training.weight_decay=1.0": how a grid point differs from the rule's
    settings ("" when it does not)."""
    label = f" lr x{point['lr_scale']:g}" if point["lr_scale"] != 1.0 else ""
    batch = point.get("batch", SWEEP_BATCH)
    label += f" batch {batch}" if batch != SWEEP_BATCH else ""
    return label + "".join(f" {setting}" for setting in point.get("recipe", ()))


def ladder(vocab: int = 2048, block_size: int = 128) -> list[tuple[int, int, int, float]]:
    """(layers, width, matmul parameters, FLOPs per token) of each shape a plan weighs (`sizing.SHAPES`),
    at the sweeps' vocabulary (the default config's) and block size."""
    return [(layers, width, *shape_flops_per_token(layers, width, vocab, block_size)) for layers, width in SHAPES]


def plan_choice(ratio: float, flops: float, train_tokens: int, shapes: list[tuple[int, int, int, float]]) -> str:
    """`LAYERSxWIDTH` that `sizing.plan_run` chooses among `shapes` (`ladder()`) at a FLOP budget."""
    candidates = [Candidate(layers, width, parameters, per_token) for layers, width, parameters, per_token in shapes]
    plan = plan_run(Budget(flops=flops), candidates, SWEEP_BATCH * 128, train_tokens, TokensPerParameterRule(ratio))
    return f"{plan.chosen.layers}x{plan.chosen.width}"


def choice_table(
    points: list[dict[str, Any]], reference: str = "4x128", hold_out: str = "corpus",
    shapes: list[tuple[int, int, int, float]] | None = None,
) -> list[dict[str, Any]]:
    """For each corpus and budget: the rule's choice when fitted WITHOUT that corpus (`hold_out`
    "corpus") or without that budget's points on any corpus ("budget"), the grid's best (every
    shape and learning rate run there), and the reference shape's (the default run's model, at the
    rule's learning rate) result at that budget. The rule is fitted on, and chooses among, points at
    its own learning rate (`lr_scale` 1) and batch with at least MIN_STEPS steps, as a plan does.
    With `shapes` (`ladder()`) the choice is the plan's among them, as a run would make it: where
    the grid did not run that shape, its `chosen_bpb` is None."""
    at_rule_lr = [p for p in points if at_rule_settings(p)]
    table = []
    for corpus in sorted({p["corpus"] for p in points}):
        for flops in sorted({p["flops"] for p in points if p["corpus"] == corpus}):
            if hold_out == "corpus":
                others = [p for p in at_rule_lr if p["corpus"] != corpus]
            else:
                others = [p for p in at_rule_lr if p["flops"] != flops]
            if not any(len(rows) > 1 for rows in places(others).values()):  # nothing to fit on
                continue
            fit = fit_ratio(others)
            grid = [p for p in points if p["corpus"] == corpus and p["flops"] == flops]
            rows = [p for p in grid if at_rule_settings(p)]
            if not rows:
                continue
            eligible = [p for p in rows if p["steps"] >= MIN_STEPS] or rows
            if shapes is None:
                chosen = choose_from_points(fit["ratio"], eligible)
                name = f"{chosen['layers']}x{chosen['width']}"
            else:
                name = plan_choice(fit["ratio"], flops, rows[0]["train_tokens"], shapes)
                chosen = next((p for p in rows if f"{p['layers']}x{p['width']}" == name), {"eval_bpb": None})
            best = min(grid, key=lambda p: p["eval_bpb"])
            default = next((p for p in rows if f"{p['layers']}x{p['width']}" == reference), None)
            table.append(
                {
                    "corpus": corpus, "flops": flops, "ratio": fit["ratio"], "shapes": len({(p["layers"], p["width"]) for p in grid}),
                    "grid": len(grid),
                    "chosen": name, "chosen_bpb": chosen["eval_bpb"],
                    "best": f"{best['layers']}x{best['width']}" + settings_label(best),
                    "best_bpb": best["eval_bpb"],
                    "default_bpb": default["eval_bpb"] if default else None,
                }
            )
    return table


def points_table(points: list[dict[str, Any]], fit: dict[str, Any] | None = None) -> str:
    """Markdown: one row per corpus and budget, one column per shape at the rule's settings: bits/byte,
    steps, epochs and effective tokens per parameter (`TokensPerParameterRule`); with a fit, the
    rule's choice in bold; a place run at several seeds (`average_seeds`) shows how many and their range."""
    rule = FITTED_RULE  # its R*: a shape's tokens per parameter does not depend on the ratio
    chosen = {id(choose_from_points(fit["ratio"], rows)) for rows in places(points).values()} if fit else set()
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
                ratio = rule.tokens_per_parameter(point["parameters"], point["tokens"], point["train_tokens"])
                bpb = f"**{point['eval_bpb']:.4f}**" if id(point) in chosen else f"{point['eval_bpb']:.4f}"
                seeds = point.get("seed_bpb", [])
                spread = f"; {len(seeds)} seeds {min(seeds):.4f}-{max(seeds):.4f}" if len(seeds) > 1 else ""
                cells.append(f"{bpb} ({point['steps']} st, {point['epochs']:.2f} ep, {ratio:.1f} t/p{spread})")
            lines.append(f"| {corpus} | {flops:.3g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["SWEEP_BATCH", "SWEEP_SEED", "SweepCorpus", "at_rule_settings", "average_seeds", "points_table", "choice_table", "choose_from_points", "corpus_facts", "fit_ratio", "ladder", "places", "plan_choice", "run_point", "shape_flops_per_token"]
