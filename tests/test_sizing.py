"""training.budget: a run sized for its corpus and budget, written down as plain values."""

from __future__ import annotations

import json
import math

import pytest
import yaml
from conftest import small_run_overrides, write_small_corpus

from minigpt.errors import ConfigError
from minigpt.training.sizing import (
    MIN_STEPS,
    Budget,
    Candidate,
    TokensPerParameterRule,
    effective_tokens,
    learning_rate,
    parse_budget,
    plan_run,
    warmup_steps,
)


def test_budgets_are_read_in_seconds_or_flops_and_bad_ones_name_the_key():
    assert parse_budget("30m") == Budget(seconds=1800.0)
    assert parse_budget("2h") == Budget(seconds=7200.0)
    assert parse_budget("900") == parse_budget("900s") == Budget(seconds=900.0)
    assert parse_budget("3e13 flops") == Budget(flops=3e13)
    for bad in ("fast", "-5m", "0s", "3 days"):
        with pytest.raises(ConfigError, match="^training.budget: "):
            parse_budget(bad)


def test_repeated_epochs_count_less_and_less():
    unique = 1e6
    assert effective_tokens(5e5, unique, 15.4) == 5e5  # less than one pass: every token new
    assert effective_tokens(unique, unique, 15.4) == unique
    four = effective_tokens(4 * unique, unique, 15.4)
    assert 3.5 * unique < four < 4 * unique  # a few epochs: almost as good as new data
    assert effective_tokens(1000 * unique, unique, 15.4) == pytest.approx(16.4 * unique)  # at most 1 + R* passes


def test_the_plan_takes_the_shape_nearest_the_rules_tokens_per_parameter_and_its_settings():
    rule = TokensPerParameterRule(ratio=8.0)
    small = Candidate(2, 64, parameters=200_000, flops_per_token=1.6e6)
    large = Candidate(8, 384, parameters=15_000_000, flops_per_token=9.4e7)
    # Little compute: the small model's many steps beat the large one's few
    plan = plan_run(Budget(flops=3e12), [small, large], tokens_per_step=1024, corpus_tokens=10**9, rule=rule)
    assert plan.chosen is small and small.steps == int(3e12 / (1.6e6 * 1024))
    assert large.steps == 31 < MIN_STEPS  # too few steps while the small one has enough: left out
    assert [c.name for c in plan.considered] == [small.name]
    assert small.tokens_per_parameter == pytest.approx(small.steps * 1024 / small.parameters)  # 9.2: under an epoch
    assert small.distance == pytest.approx(abs(math.log(small.tokens_per_parameter / 8.0)))
    overrides = plan.overrides()
    assert overrides["model"] == {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "hidden_dropout": 0.0}
    assert overrides["training"]["max_steps"] == small.steps and overrides["training"]["budget"] is None
    assert overrides["training"]["learning_rate"] == learning_rate(64) == 2 * learning_rate(128)
    assert overrides["training"]["warmup_steps"] == warmup_steps(small.steps) == round(0.05 * small.steps)
    # Much more compute: the large model is nearer the ratio, and a small corpus repeated brings dropout
    plan = plan_run(Budget(flops=3e16), [small, large], tokens_per_step=1024, corpus_tokens=10**7, rule=rule)
    assert plan.chosen is large and plan.hidden_dropout == 0.1 and plan.epochs > 1
    # 319M tokens, 31.9 epochs of 10M: repeats count less, so fewer effective tokens per parameter
    # (weighed at the budget's steps; the run then stops at MAX_EPOCHS)
    expected = effective_tokens(large.budget_steps * 1024, 10**7, 15.4) / large.parameters
    assert large.tokens_per_parameter == pytest.approx(expected) and expected < large.budget_steps * 1024 / large.parameters
    assert large.steps == math.ceil(16 * 10**7 / 1024) < large.budget_steps
    record = plan.record()
    assert "tokens_per_parameter" not in record  # one figure: the rule's (effective tokens per matmul parameter)
    assert record["effective_tokens_per_parameter"] == large.tokens_per_parameter and record["rule_tokens_per_parameter"] == 8.0
    why = plan.lines()[2]
    assert why.startswith("plan: of 2 shapes the nearest to 8 tokens per parameter, repeats counted less: ")
    assert f"(next: {small.name} at {small.tokens_per_parameter:.1f})" in why


def test_a_wall_clock_plan_divides_the_seconds_left_by_measured_steps():
    rule = TokensPerParameterRule(ratio=8.0)
    measured = Candidate(4, 128, parameters=1_000_000, flops_per_token=7e6, step_seconds=0.05)
    unmeasured = Candidate(6, 256, parameters=5_000_000, flops_per_token=3.4e7)
    plan = plan_run(Budget(seconds=60), [measured, unmeasured], 1024, 10**6, rule, seconds_left=50.0)
    assert plan.considered == [measured] and measured.steps == 1000
    plan.max_time = 59.0
    shape, tokens, why = plan.lines()  # one shape measured: the plan says so, not "of 1 shapes"
    assert why.startswith("plan: the only shape measured in the 5% of the budget that choosing may take")
    assert "1.02M tokens = 1.02 epochs of 1.00M, 1.02 tokens per parameter, repeats counted less" in tokens


def test_a_wall_clock_plan_leaves_time_for_its_evaluations():
    """An evaluation every 100 steps costing 5 s (and one at the end): 50 s leave 45 s for steps
    of 0.05 s plus 0.05 s of evaluation each, 450 steps; a FLOP plan's steps do not change."""
    rule = TokensPerParameterRule(ratio=8.0)
    measured = Candidate(4, 128, 1_000_000, 7e6, step_seconds=0.05, evaluation_seconds=5.0)
    plan_run(Budget(seconds=60), [measured], 1024, 10**6, rule, seconds_left=50.0, eval_steps=100)
    assert measured.steps == 450
    plan_run(Budget(flops=7e6 * 1024 * 1000), [measured], 1024, 10**6, rule, eval_steps=100)
    assert measured.steps == 1000


def test_a_model_far_larger_than_its_corpus_is_not_weighed():
    small = Candidate(2, 64, parameters=200_000, flops_per_token=1.6e6)
    large = Candidate(8, 384, parameters=15_000_000, flops_per_token=9.4e7)
    plan = plan_run(Budget(flops=3e16), [small, large], tokens_per_step=1024, corpus_tokens=10**6)
    assert [c.name for c in plan.considered] == [small.name]  # 15M parameters > 4 x 1M tokens


def test_a_budget_too_small_for_any_model_is_one_line():
    tiny = Candidate(2, 64, parameters=200_000, flops_per_token=1.6e6)
    with pytest.raises(ConfigError, match="too small to train even the smallest model"):
        plan_run(Budget(flops=1e9), [tiny], 1024, 10**6)


def test_a_budget_with_a_base_model_is_refused():
    from minigpt.training.run_config import load_run_config

    with pytest.raises(ConfigError, match="training.budget sizes a new model"):
        load_run_config("configs/continue.yaml", ["training.budget=30m"])


def test_a_budgeted_run_writes_its_choice_as_plain_values_and_resumes_with_it(tmp_path, capsys):
    """A FLOP budget (no timing: the same plan on any machine) on a small corpus: the plan's lines,
    plan.json, resolved_config.yaml with the chosen values and budget null; the resolved config
    run again trains the same model without choosing; --resume keeps the plan."""
    from safetensors.torch import load_file

    from minigpt.pipeline import run_training
    from minigpt.training.run_config import load_run_config

    corpus = write_small_corpus(tmp_path)
    folder = tmp_path / "run"
    overrides = small_run_overrides(folder, corpus, "training.budget=2e10 flops", "training.save_steps=10", "training.save_total_limit=null")
    result = run_training(load_run_config("configs/smoke.yaml", overrides))
    out = capsys.readouterr().out
    assert "plan for 2e+10 FLOPs: " in out and " tokens per parameter, repeats counted less; lr " in out
    assert " tokens (the config's batch)" in out  # the plan does not choose the batch, and says so
    plan = json.loads((folder / "plan.json").read_text())
    resolved = yaml.safe_load((folder / "resolved_config.yaml").read_text())
    assert resolved["training"]["budget"] is None
    assert resolved["training"]["max_steps"] == plan["steps"] == result.global_step
    assert (resolved["model"]["num_hidden_layers"], resolved["model"]["hidden_size"]) == (plan["layers"], plan["hidden_size"])
    assert resolved["training"]["learning_rate"] == plan["learning_rate"]
    assert plan["steps"] > 10  # (10: the checkpoint resumed below)
    # a corpus of a few hundred tokens: only the smallest shape is not far larger than its corpus
    assert [c["shape"] for c in plan["considered"]] == ["2 x 64"] and plan["shape"] == "2 x 64"

    again = tmp_path / "again"
    repeat = {**resolved, "training": {**resolved["training"], "output_dir": str(again)}}
    (tmp_path / "repeat.yaml").write_text(yaml.safe_dump(repeat))
    run_training(load_run_config(tmp_path / "repeat.yaml", []))
    assert not (again / "plan.json").exists()  # nothing chosen: the values were given
    first, second = load_file(folder / "final" / "model.safetensors"), load_file(again / "final" / "model.safetensors")
    assert all((first[k] == second[k]).all() for k in first)

    # Resumed from its first checkpoint with the budget still in the config: the plan it chose then
    import shutil

    resumed_dir = tmp_path / "resumed"
    shutil.copytree(folder / "checkpoint-10", resumed_dir / "checkpoint-10")
    capsys.readouterr()
    resumed = run_training(load_run_config("configs/smoke.yaml", [*overrides, f"training.output_dir={resumed_dir}"]), resume=True)
    assert "plan for" not in capsys.readouterr().out and resumed.global_step == plan["steps"]
    third = load_file(resumed_dir / "final" / "model.safetensors")
    assert all((first[k] == third[k]).all() for k in first)


def test_a_wall_clock_budget_holds_when_the_steps_cost_more_than_measured(tmp_path, capsys, monkeypatch):
    """The plan's steps come from measured step times; a run whose steps cost far more (here the
    measurement says 0.1 ms, and the run logs every step) still ends by its budget: the plan sets
    training.max_time to the seconds left after choosing, and resolved_config.yaml says so."""
    from minigpt.pipeline import run_training
    from minigpt.training import sizing
    from minigpt.training.run_config import load_run_config

    monkeypatch.setattr(sizing, "measure_step_seconds", lambda *args, **kwargs: 1e-4)
    monkeypatch.setattr(sizing, "MAX_EPOCHS", 10**6)  # the small corpus would end it at 16 epochs first
    folder = tmp_path / "run"
    overrides = small_run_overrides(folder, write_small_corpus(tmp_path), "training.budget=6s")
    result = run_training(load_run_config("configs/smoke.yaml", overrides))
    assert "plan for 6 s: " in capsys.readouterr().out
    plan = json.loads((folder / "plan.json").read_text())
    resolved = yaml.safe_load((folder / "resolved_config.yaml").read_text())
    assert resolved["training"]["max_time"] == round(plan["max_time"], 1) == pytest.approx(6 - plan["choosing_seconds"], abs=0.1)
    assert 0 < result.global_step < plan["steps"]  # ended by the budget, not by the steps
    assert result.runtime_seconds < 6 + 10  # its training time, and the final evaluation and save
    assert (folder / "final" / "model.safetensors").exists()


def test_a_plan_stops_at_the_epochs_past_which_repeats_add_nothing_and_says_so():
    from minigpt.training.sizing import MAX_EPOCHS

    small = Candidate(2, 64, parameters=200_000, flops_per_token=1.6e6)
    plan = plan_run(Budget(flops=3e14), [small], tokens_per_step=1024, corpus_tokens=10**5)
    assert small.budget_steps == int(3e14 / (1.6e6 * 1024)) > small.steps == math.ceil(MAX_EPOCHS * 10**5 / 1024)
    assert MAX_EPOCHS <= plan.epochs < MAX_EPOCHS + 0.01 and plan.record()["budget_steps"] == small.budget_steps
    assert plan.lines()[-1].startswith(f"plan: stops early at {MAX_EPOCHS} epochs, {small.steps:,} of the ")
    roomy = Candidate(2, 64, parameters=200_000, flops_per_token=1.6e6)  # a corpus the budget does not exhaust
    assert plan_run(Budget(flops=3e14), [roomy], 1024, 10**9).chosen.steps == roomy.budget_steps
