"""The size sweep's fit and tables (benchmarks/size_sweep.py), on points drawn from a known truth.

The sweep's runs take hours; these check what is done with their results: that the fitted ratio
chooses each place's best shape when one ratio can, that a held-out choice is made by a fit that
never saw the held-out points, and that the grid's best counts every learning rate while the rule
chooses at its own.
"""

from __future__ import annotations

import json
import math

import pytest

from benchmarks.size_sweep import average_seeds, choice_table, fit_ratio, points_table
from minigpt.training.sizing import TokensPerParameterRule, effective_tokens

FLOORS = {"small": 1.9, "medium": 1.1, "large": 1.4}
UNIQUE_TOKENS = {"small": 300_000, "medium": 3_000_000, "large": 60_000_000}
SHAPES = {(2, 64): 120_000, (3, 96): 400_000, (4, 128): 800_000, (4, 192): 1_800_000, (6, 256): 4_700_000}
BUDGETS = (3e12, 1.2e13, 4.8e13)
# The truth: each place's bits/byte falls with its budget and rises with how far a shape's effective
# tokens per parameter is from TRUE_RATIO (in log), so one ratio, TRUE_RATIO, chooses every place's best.
TRUE_RATIO = 14.0  # far from every place's boundary between two shapes (their ratios' geometric mean)


def true_bpb(corpus: str, flops: float, parameters: int, tokens: int) -> float:
    ratio = effective_tokens(tokens, UNIQUE_TOKENS[corpus], 15.4) / parameters
    return FLOORS[corpus] + 5.0 / (flops / 1e12) ** 0.2 + 0.1 * math.log(ratio / TRUE_RATIO) ** 2


def synthetic_points(lr_penalty: float = 0.05) -> list[dict]:
    """One point per corpus, budget and shape at the rule's learning rate (lr_scale 1), exactly on
    the truth; and a point at twice the rate for the 4 x 128 shape that beats the rule's by
    `lr_penalty` (so the grid's best is a learning rate the rule did not choose)."""
    points = []
    for corpus in FLOORS:
        for flops in BUDGETS:
            for (layers, width), parameters in SHAPES.items():
                tokens = int(flops / (6 * parameters))
                bpb = true_bpb(corpus, flops, parameters, tokens)
                for scale, shift in ((1.0, 0.0), (2.0, -lr_penalty)):
                    if scale != 1.0 and (layers, width) != (4, 128):
                        continue
                    points.append(
                        {
                            "key": f"{corpus}|{flops:.3g}|{layers}x{width}|{scale:g}", "corpus": corpus,
                            "flops": flops, "layers": layers, "width": width, "lr_scale": scale,
                            "parameters": parameters, "steps": tokens // 1024, "tokens": tokens,
                            "train_tokens": UNIQUE_TOKENS[corpus], "epochs": tokens / UNIQUE_TOKENS[corpus],
                            "eval_bpb": bpb + shift,
                        }
                    )
    return points


def best_shape(points: list[dict], corpus: str, flops: float) -> str:
    """The truth's best shape at the rule's settings among shapes with 300+ steps, as `LAYERSxWIDTH`."""
    rows = [p for p in points if (p["corpus"], p["flops"], p["lr_scale"]) == (corpus, flops, 1.0) and p["steps"] >= 300]
    best = min(rows, key=lambda p: p["eval_bpb"])
    return f"{best['layers']}x{best['width']}"


def test_the_fitted_ratio_chooses_every_places_best_and_brackets_the_truth():
    points = [p for p in synthetic_points() if p["lr_scale"] == 1.0]
    fit = fit_ratio(points)
    assert fit["loss"] == 0.0 and set(fit["losses"].values()) == {0.0}
    assert fit["places"] == len(FLOORS) * len(BUDGETS)
    assert fit["low"] <= fit["ratio"] <= fit["high"] and fit["low"] < TRUE_RATIO < fit["high"]
    rule = TokensPerParameterRule(fit["ratio"])
    for corpus in FLOORS:
        for flops in BUDGETS:
            rows = [p for p in points if (p["corpus"], p["flops"]) == (corpus, flops) and p["steps"] >= 300]
            chosen = min(rows, key=lambda p: rule.distance(p["parameters"], p["tokens"], p["train_tokens"]))
            assert f"{chosen['layers']}x{chosen['width']}" == best_shape(points, corpus, flops)


def test_a_place_where_another_shape_wins_shows_what_the_choice_lost():
    points = [p for p in synthetic_points() if p["lr_scale"] == 1.0]
    place = [p for p in points if (p["corpus"], p["flops"]) == ("medium", 1.2e13) and p["steps"] >= 300]
    chosen = min(place, key=lambda p: p["eval_bpb"])
    rival = next(p for p in place if p is not chosen)
    # one place where the rival shape is 0.01 better than the ratio's choice: too little to move the
    # ratio (that would lose elsewhere), so the place's loss is that 0.01
    planted = [dict(p, eval_bpb=chosen["eval_bpb"] - 0.01) if p is rival else p for p in points]
    fit = fit_ratio(planted)
    assert fit["losses"]["medium|1.2e+13"] == pytest.approx(0.01)
    assert fit["loss"] == pytest.approx(0.01) and sum(v > 0 for v in fit["losses"].values()) == 1


@pytest.mark.parametrize("hold_out", ["corpus", "budget"])
def test_held_out_choices_match_the_truth_and_the_grid_counts_every_learning_rate(hold_out):
    points = synthetic_points(lr_penalty=0.05)
    table = choice_table(points, hold_out=hold_out)
    assert {(row["corpus"], row["flops"]) for row in table} == {(c, f) for c in FLOORS for f in BUDGETS}
    for row in table:
        rows = [p for p in points if p["corpus"] == row["corpus"] and p["flops"] == row["flops"]]
        assert row["chosen"] == best_shape(points, row["corpus"], row["flops"])  # the rule's choice, as the truth's
        assert row["grid"] == len(rows) == len(SHAPES) + 1 and row["shapes"] == len(SHAPES)
        best = min(rows, key=lambda p: p["eval_bpb"])
        assert row["best_bpb"] == best["eval_bpb"]
        assert row["best"].endswith("lr x2") == (best["lr_scale"] == 2.0)
        default = next(p for p in rows if (p["layers"], p["width"], p["lr_scale"]) == (4, 128, 1.0))
        assert row["default_bpb"] == default["eval_bpb"]


def test_with_the_plans_shapes_the_choice_is_the_plans_and_one_not_run_says_so():
    """`choice_table(shapes=...)` chooses as `sizing.plan_run` does among every shape a plan weighs:
    on the grid's own shapes it agrees with the choice among the points; a shape the grid never
    ran that the plan takes shows no result rather than the nearest run one's."""
    points = synthetic_points()
    shapes = [(layers, width, n, 6.0 * n) for (layers, width), n in SHAPES.items()]
    plain = choice_table(points, hold_out="budget")
    assert [(r["chosen"], r["chosen_bpb"]) for r in choice_table(points, hold_out="budget", shapes=shapes)] == [
        (r["chosen"], r["chosen_bpb"]) for r in plain
    ]
    between = int(math.sqrt(4.8e13 / (6 * TRUE_RATIO)))  # TRUE_RATIO tokens per parameter at 4.8e13 FLOPs
    table = choice_table(points, hold_out="budget", shapes=[*shapes, (4, 144, between, 6.0 * between)])
    not_run = [r for r in table if r["chosen"] == "4x144"]
    assert ("large", 4.8e13) in {(r["corpus"], r["flops"]) for r in not_run}
    assert all(r["chosen_bpb"] is None for r in not_run)
    assert all((r["chosen"], r["chosen_bpb"]) == (q["chosen"], q["chosen_bpb"]) for r, q in zip(table, plain, strict=True) if r not in not_run)


def test_a_fit_that_never_saw_the_held_out_corpus_is_another_fit():
    """Held out means held out: a corpus whose smallest shape does far better at one budget pulls the
    ratio up when let in; held out, its row is chosen by the others' ratio, which that corpus would not give."""
    points = [p for p in synthetic_points() if p["lr_scale"] == 1.0]
    skewed = [dict(p, eval_bpb=p["eval_bpb"] - 0.5) if (p["corpus"], p["flops"], p["width"]) == ("small", 1.2e13, 64) else p for p in points]
    with_it = fit_ratio(skewed)
    without = fit_ratio([p for p in skewed if p["corpus"] != "small"])
    assert with_it["loss"] == without["loss"] == 0.0 and without["ratio"] < with_it["low"]
    (row,) = [r for r in choice_table(skewed, hold_out="corpus") if (r["corpus"], r["flops"]) == ("small", 1.2e13)]
    assert row["ratio"] == without["ratio"] and row["chosen"] == "3x96" and row["best"] == "2x64"


def test_the_points_table_has_a_cell_per_shape_its_tokens_per_parameter_and_the_choice_in_bold():
    points = [p for p in synthetic_points() if p["lr_scale"] == 1.0]
    fit = fit_ratio(points)
    table = points_table(points, fit).splitlines()
    assert table[0].count("|") == len(SHAPES) + 3 and len(table) == 2 + len(FLOORS) * len(BUDGETS)
    assert all(line.count("**") == 2 for line in table[2:])  # one choice a place
    large = next(p for p in points if p["key"] == "large|4.8e+13|4x128|1")  # under one epoch: D' = D
    row = next(line for line in table if line.startswith("| large | 4.8e+13 |"))
    assert f"{large['tokens'] / large['parameters']:.1f} t/p)" in row
    assert best_shape(points, "large", 4.8e13) == "4x128" and row.split(" | ")[4].startswith("**")
    assert "**" not in points_table(points)  # no fit, no choice


def test_each_place_is_the_mean_of_its_seeds_and_a_repeat_without_a_first_seed_is_left_out():
    points = [p for p in synthetic_points() if p["lr_scale"] == 1.0]
    repeat = dict(points[3], key=points[3]["key"] + "|s1338", seed=1338, eval_bpb=points[3]["eval_bpb"] + 0.1)
    orphan = dict(points[0], flops=9e15, seed=1338)  # no first-seed point at its budget
    averaged = average_seeds([*points, repeat, orphan])
    assert [p["key"] for p in averaged] == [p["key"] for p in points]
    assert averaged[3]["eval_bpb"] == pytest.approx(points[3]["eval_bpb"] + 0.05)
    assert averaged[3]["seed_bpb"] == [points[3]["eval_bpb"], repeat["eval_bpb"]]
    assert all(a["eval_bpb"] == p["eval_bpb"] and len(a["seed_bpb"]) == 1 for a, p in zip(averaged, points, strict=True) if a is not averaged[3])
    table = points_table(averaged)  # the repeated place shows its seeds' count and range, no other
    low, high = sorted(averaged[3]["seed_bpb"])
    assert table.count("seeds") == 1 and f"; 2 seeds {low:.4f}-{high:.4f})" in table


def test_a_larger_batch_joins_the_grid_but_not_the_rules_choice_or_its_table():
    points = synthetic_points(lr_penalty=0.0)
    small = [p for p in points if (p["layers"], p["width"], p["lr_scale"]) == (2, 64, 1.0)]
    at_16 = [dict(p, key=p["key"] + "|b16", batch=16, eval_bpb=p["eval_bpb"] - 3.0) for p in small]
    table = choice_table([*points, *at_16], hold_out="corpus")
    plain = choice_table(points, hold_out="corpus")
    for row, before in zip(table, plain, strict=True):
        assert row["chosen"] == before["chosen"] and row["grid"] == before["grid"] + 1
        batch_point = next(p for p in at_16 if (p["corpus"], p["flops"]) == (row["corpus"], row["flops"]))
        assert row["best"] == "2x64 batch 16" and row["best_bpb"] == batch_point["eval_bpb"]
    assert points_table([*points, *at_16]) == points_table(points)


def test_a_recipe_point_is_its_own_place_and_stays_out_of_the_fit_and_the_choice():
    points = synthetic_points(lr_penalty=0.0)
    recipe = ["training.weight_decay=1.0"]
    ablated = [dict(p, key=p["key"] + "|" + recipe[0], recipe=recipe, eval_bpb=p["eval_bpb"] - 3.0) for p in points]
    repeat = dict(ablated[0], key=ablated[0]["key"] + "|s1338", seed=1338, eval_bpb=ablated[0]["eval_bpb"] + 0.2)
    averaged = average_seeds([*points, *ablated, repeat])
    assert len(averaged) == 2 * len(points)  # a recipe's seeds average with its own first seed, not the plan's
    assert averaged[len(points)]["seed_bpb"] == [ablated[0]["eval_bpb"], repeat["eval_bpb"]]
    assert averaged[0]["seed_bpb"] == [points[0]["eval_bpb"]]
    assert fit_ratio(averaged) == fit_ratio(average_seeds(points))
    for row, before in zip(choice_table(averaged, hold_out="corpus"), choice_table(points, hold_out="corpus"), strict=True):
        assert row["chosen"] == before["chosen"] and row["best"].endswith(" training.weight_decay=1.0")


def test_a_sweep_point_is_a_real_run_recorded_once_with_its_loss_curve(tmp_path):
    from conftest import REPO_ROOT

    from benchmarks.size_sweep import SweepCorpus, corpus_facts, run_point, shape_flops_per_token

    corpus = SweepCorpus("shakespeare", (f"data.train_files={REPO_ROOT / 'data' / 'tinyshakespeare.txt'}",))
    facts = corpus_facts(corpus, tmp_path)
    assert facts["vocab"] == 2048 and facts["train_tokens"] == 346_969  # the default config's tokenizer and split
    parameters, per_token = shape_flops_per_token(2, 64, facts["vocab"], 128)
    results, flops = tmp_path / "points.jsonl", per_token * 1024 * 30.5  # 30 steps of 1024 tokens
    point = run_point(corpus, facts, 2, 64, flops, 1.0, tmp_path, results, threads=1)  # a core, as side by side
    assert point["steps"] == 30 and point["tokens"] == 30 * 1024 and point["parameters"] == parameters
    assert point["key"] == f"shakespeare|{flops:.3g}|2x64|1" and point["batch"] == 8
    assert 2.0 < point["eval_bpb"] < 8.0 and point["dropout"] == 0.0  # 30 steps: under one epoch
    assert [json.loads(line)["key"] for line in results.read_text().splitlines()] == [point["key"]]
    curve = [json.loads(line) for line in (tmp_path / "curves" / f"{point['key'].replace('|', '_')}.jsonl").read_text().splitlines()]
    assert [r["step"] for r in curve if "loss" in r][-1] == 30 and any("eval_loss" in r for r in curve)
    assert not (tmp_path / "runs" / "shakespeare").exists() or not any((tmp_path / "runs" / "shakespeare").iterdir())
    assert run_point(corpus, facts, 2, 64, flops, 1.0, tmp_path, results) is None  # done before: skipped
