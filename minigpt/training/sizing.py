"""`training.budget` ("30m", "2h", "900s" on this machine; "3e13 flops"): a run sized for its corpus
(docs/training.md). The shape from `SHAPES` whose effective tokens per matmul parameter (repeats counted
less, Muennighoff et al. 2023) is nearest the fitted ratio; lr ~ 1/width around the default run's (muP,
Yang et al. 2022).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError

HEAD_SIZE = 32
# Depth x width, smallest first: width / depth 32-64, the default run's 4 x 128 among them.
SHAPES: tuple[tuple[int, int], ...] = (
    (2, 64), (3, 96), (4, 128), (4, 160), (4, 192), (6, 224), (6, 256), (8, 320), (8, 384),
    (10, 448), (12, 512), (12, 640), (16, 768),
)
REFERENCE_WIDTH, REFERENCE_LR = 128, 4.0e-3  # the default run's width and its tuned peak LR
WARMUP_FRACTION, WARMUP_MAX, WARMUP_MIN = 0.05, 100, 5
MIN_STEPS = 300  # fewest steps a plan gives its shape while another shape would get more
MAX_PARAMETERS_PER_TOKEN = 4  # largest model a plan weighs: matmul parameters per unique training token
REPEAT_DROPOUT = 0.1  # dropout of a plan that repeats its corpus
MAX_EPOCHS = 16  # past 1 + R* (15.4) passes repeated tokens add nothing (`effective_tokens` saturates)
CHOOSING_SHARE = 0.05  # at most this share of a wall-clock budget goes to measuring step times
MOST_MEASURED = 5  # shapes measured besides the reference: the likeliest by the FLOP estimate
OVERHEAD_SHARE = 0.08  # of the rest, kept for checkpoints, samples and logging between steps
# An evaluation token's cost in training tokens: a third of the FLOPs, but the evaluation loop and
# the bits-per-byte sums cost as much again for a small model (docs/research-log.md).
EVALUATION_SHARE = 1.0
BUDGET_PATTERN = re.compile(r"^\s*([0-9.]+(?:e[+-]?[0-9]+)?)\s*(s|m|min|h|flops)?\s*$", re.IGNORECASE)
UNIT_SECONDS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
PLAN_KEYS = {  # what a plan sets, in `Plan.overrides` order
    "model": ("num_hidden_layers", "hidden_size", "num_attention_heads", "hidden_dropout"),
    "training": ("max_steps", "learning_rate", "min_learning_rate", "warmup_steps", "budget", "max_time"),
}


@dataclass(frozen=True)
class Budget:
    """What a run may spend: wall-clock seconds on this machine, or FLOPs."""

    seconds: float | None = None
    flops: float | None = None

    def describe(self) -> str:
        return f"{self.flops:.3g} FLOPs" if self.flops is not None else f"{self.seconds:g} s"


def parse_budget(text: str | float | int) -> Budget:
    """ "30m" / "2h" / "900s" / "900" (seconds) / "3e13 flops" -> Budget; ConfigError naming training.budget."""
    match = BUDGET_PATTERN.match(str(text))
    if not match:
        raise ConfigError(f"training.budget: {text!r} is not a budget: write seconds, minutes or hours (900s, 30m, 2h) or FLOPs (3e13 flops)")
    value, unit = float(match.group(1)), (match.group(2) or "s").lower()
    if value <= 0:
        raise ConfigError(f"training.budget: the budget must be positive, got {text!r}")
    return Budget(flops=value) if unit == "flops" else Budget(seconds=value * UNIT_SECONDS[unit])


def learning_rate(width: int) -> float:
    """Peak LR of a model `width` wide: the default run's tuned LR at its width, ~ 1/width around it."""
    return REFERENCE_LR * REFERENCE_WIDTH / width


def warmup_steps(steps: int) -> int:
    return max(WARMUP_MIN, min(WARMUP_MAX, round(WARMUP_FRACTION * steps)))


def effective_tokens(tokens: float, unique: float, r_star: float) -> float:
    """Muennighoff et al. 2023, eq. 5: D' = U + U R* (1 - exp(-R / R*)), R = D / U - 1 repeats."""
    if unique <= 0 or tokens <= unique:
        return tokens
    return unique + unique * r_star * (1.0 - math.exp(-(tokens / unique - 1.0) / r_star))


@dataclass(frozen=True)
class TokensPerParameterRule:
    """The shape whose effective training tokens per matmul parameter is nearest `ratio` wins;
    r_star is Muennighoff et al.'s fitted R*_D."""

    ratio: float
    r_star: float = 15.4

    def tokens_per_parameter(self, parameters: float, tokens: float, unique_tokens: float) -> float:
        """D' / N: a plan's effective training tokens per matmul parameter."""
        return effective_tokens(tokens, unique_tokens, self.r_star) / parameters

    def distance(self, parameters: float, tokens: float, unique_tokens: float) -> float:
        """|ln(D'/N / ratio)|: how far a shape's ratio is from the rule's (0 on it)."""
        return abs(math.log(self.tokens_per_parameter(parameters, tokens, unique_tokens) / self.ratio))


# The ratio whose choices lose least on the size sweeps (scripts/sweep_sizes.py, docs/research-log.md).
FITTED_RULE = TokensPerParameterRule(ratio=8.92)


@dataclass
class Candidate:
    layers: int
    width: int
    parameters: int  # matmul parameters (N of the rule)
    flops_per_token: float
    step_seconds: float | None = None  # measured on this machine (wall-clock budgets)
    evaluation_seconds: float = 0.0  # one evaluation's, estimated from the step (EVALUATION_SHARE)
    steps: int = 0
    budget_steps: int = 0  # what the budget alone allows; `steps` stops at MAX_EPOCHS
    tokens_per_parameter: float = 0.0  # effective (repeats counted less), at `budget_steps` (what the rule weighs)
    distance: float = math.inf  # |ln| of its tokens per parameter over the rule's ratio

    @property
    def name(self) -> str:
        return f"{self.layers} x {self.width}"


@dataclass
class Plan:
    """The sized run: what it sets and why."""

    budget: str
    chosen: Candidate
    tokens_per_step: int
    corpus_tokens: int
    learning_rate: float
    warmup_steps: int
    hidden_dropout: float
    considered: list[Candidate]
    choosing_seconds: float = 0.0
    max_time: float | None = None  # a wall-clock budget's seconds after choosing (training.max_time)
    rule: TokensPerParameterRule = FITTED_RULE

    @property
    def tokens(self) -> int:
        return self.chosen.steps * self.tokens_per_step

    @property
    def epochs(self) -> float:
        return self.tokens / max(self.corpus_tokens, 1)

    def overrides(self) -> dict[str, dict[str, Any]]:
        """The plain values the plan sets, by section."""
        c, lr = self.chosen, self.learning_rate
        model = {"num_hidden_layers": c.layers, "hidden_size": c.width, "num_attention_heads": c.width // HEAD_SIZE,
                 "hidden_dropout": self.hidden_dropout}
        training = {"max_steps": c.steps, "learning_rate": lr, "min_learning_rate": lr / 10,
                    "warmup_steps": self.warmup_steps, "budget": None}
        if self.max_time is not None:
            training["max_time"] = round(self.max_time, 1)
        return {"model": model, "training": training}

    def lines(self) -> list[str]:
        c = self.chosen
        runner_up = sorted(self.considered, key=lambda x: x.distance)[1:2]
        if runner_up:
            why = (f"of {len(self.considered)} shapes the nearest to {self.rule.ratio:g} tokens per parameter, "
                   f"repeats counted less: {c.tokens_per_parameter:.1f} (next: {runner_up[0].name} at "
                   f"{runner_up[0].tokens_per_parameter:.1f})")
        elif self.max_time is not None:  # a short wall-clock budget leaves time to measure one shape
            why = f"the only shape measured in the {CHOOSING_SHARE:.0%} of the budget that choosing may take"
        else:
            why = "the only shape the budget and the corpus allow"
        lines = [
            f"plan for {self.budget}: {c.name} model ({c.width // HEAD_SIZE} heads), {c.parameters / 1e6:.2f}M "
            f"matmul parameters, {c.steps:,} steps of {self.tokens_per_step:,} tokens (the config's batch)",
            f"plan: {self.tokens / 1e6:.2f}M tokens = {self.epochs:.2f} epochs of {self.corpus_tokens / 1e6:.2f}M, "
            f"{c.tokens_per_parameter:.2f} tokens per parameter, repeats counted less; lr {self.learning_rate:.2e}, warmup "
            f"{self.warmup_steps}, dropout {self.hidden_dropout:g}",
            f"plan: {why}; choosing took {self.choosing_seconds:.1f} s",
        ]
        if c.steps < c.budget_steps:
            lines.append(f"plan: stops early at {MAX_EPOCHS} epochs, {c.steps:,} of the {c.budget_steps:,} steps the "
                         "budget allows: past that repeated tokens add nothing (Muennighoff et al. 2023); more text "
                         "would use the rest")
        return lines

    def record(self) -> dict[str, Any]:
        """plan.json's content."""
        c = self.chosen
        return {
            "budget": self.budget, "shape": c.name, "layers": c.layers, "hidden_size": c.width,
            "heads": c.width // HEAD_SIZE, "parameters": c.parameters, "steps": c.steps,
            "budget_steps": c.budget_steps, "tokens": self.tokens, "epochs": self.epochs,
            "learning_rate": self.learning_rate, "warmup_steps": self.warmup_steps,
            "hidden_dropout": self.hidden_dropout, "rule_tokens_per_parameter": self.rule.ratio,
            "effective_tokens_per_parameter": c.tokens_per_parameter,
            "choosing_seconds": self.choosing_seconds, "max_time": self.max_time,
            "considered": [
                {"shape": x.name, "parameters": x.parameters, "steps": x.steps, "step_seconds": x.step_seconds,
                 "evaluation_seconds": x.evaluation_seconds, "effective_tokens_per_parameter": x.tokens_per_parameter}
                for x in self.considered
            ],
        }


def plan_run(
    budget: Budget, candidates: list[Candidate], tokens_per_step: int, corpus_tokens: int,
    rule: TokensPerParameterRule = FITTED_RULE, seconds_left: float | None = None, eval_steps: int | None = None,
) -> Plan:
    """The candidate whose tokens per parameter at `budget` is nearest the rule's; a wall-clock plan
    divides `seconds_left` by each measured step plus its evaluations' share (one every `eval_steps`)."""
    considered = []
    for c in candidates:
        if budget.flops is not None:
            c.steps = int(budget.flops / (c.flops_per_token * tokens_per_step))
        elif c.step_seconds:
            seconds = (seconds_left if seconds_left is not None else budget.seconds) - c.evaluation_seconds
            per_step = c.step_seconds + (c.evaluation_seconds / eval_steps if eval_steps else 0.0)
            c.steps = max(int(seconds / per_step), 0)
        else:
            continue
        if c.steps < 2 * WARMUP_MIN:  # too few steps to warm up and decay: not a plan
            continue
        # The rule weighs what the budget allows (as the sweep it was fitted on ran); the run then
        # stops at MAX_EPOCHS, past which repeated tokens add nothing.
        c.tokens_per_parameter = rule.tokens_per_parameter(c.parameters, c.steps * tokens_per_step, corpus_tokens)
        c.distance = rule.distance(c.parameters, c.steps * tokens_per_step, corpus_tokens)
        c.budget_steps = c.steps
        c.steps = min(c.steps, math.ceil(MAX_EPOCHS * corpus_tokens / tokens_per_step))
        considered.append(c)
    # The rule was fitted on runs of at least MIN_STEPS: shorter ones are out while another has enough.
    considered = [c for c in considered if c.steps >= MIN_STEPS] or considered
    # Nor a model much larger than its corpus: the rule does not see overfitting (docs/research-log.md).
    fitting = [c for c in considered if c.parameters <= MAX_PARAMETERS_PER_TOKEN * corpus_tokens]
    considered = fitting or sorted(considered, key=lambda c: c.parameters)[:1]
    if not considered:
        raise ConfigError(f"training.budget={budget.describe()} is too small to train even the smallest model for "
                          f"{2 * WARMUP_MIN} steps: give it more")
    best = min(considered, key=lambda c: c.distance)
    dropout = REPEAT_DROPOUT if best.steps * tokens_per_step > corpus_tokens else 0.0
    return Plan(budget.describe(), best, tokens_per_step, corpus_tokens, learning_rate(best.width),
                warmup_steps(best.steps), dropout, considered, rule=rule)


def apply_settings(run, values: dict[str, dict[str, Any]]) -> None:
    """Set the plan's keys (`Plan.overrides()`, or a checkpoint's resolved values) on `run`, in place."""
    for section, keys in PLAN_KEYS.items():
        for key in set(keys) & set(values.get(section, {})):
            setattr(getattr(run, section), key, values[section][key])


def size_run(
    run, config_for: Callable[[int, int], Any], corpus_tokens: int, tokens_per_step: int, accumulation: int, dtype,
    device: str | Any = "cpu", eval_tokens: int = 0,
) -> Plan:
    """The plan for `run.training.budget`; `config_for(layers, width)` is the run's model config at a
    shape. A wall-clock budget measures step times on `device`, the likeliest shapes first, within
    `CHOOSING_SHARE` of it; `eval_tokens` is what one evaluation reads."""
    import torch

    from ..model import MiniGPTForCausalLM
    from .flops import flops_per_token, matmul_parameter_count

    started = time.perf_counter()
    budget = parse_budget(run.training.budget)
    block_size = run.data.block_size
    candidates = []
    for layers, width in SHAPES:
        config = config_for(layers, width)
        with torch.device("meta"):  # counts only: no memory, no init
            model = MiniGPTForCausalLM(config)
        parameters = matmul_parameter_count(model, config)
        candidates.append(Candidate(layers, width, parameters, flops_per_token(model, config, block_size)))
    seconds_left = None
    if budget.seconds is not None:
        allowed = CHOOSING_SHARE * budget.seconds
        warmup_s, timed_s = min(0.3, allowed / 5), min(0.6, 2 * allowed / 5)
        batch = tokens_per_step // (block_size * accumulation)  # per process and micro-step
        reference = next(c for c in candidates if c.width == REFERENCE_WIDTH)
        order = [reference]
        while order:
            c = order.pop(0)
            model = MiniGPTForCausalLM(config_for(c.layers, c.width))
            c.step_seconds = accumulation * measure_step_seconds(model, batch, block_size, dtype, warmup_s, timed_s, device)
            c.evaluation_seconds = c.step_seconds * EVALUATION_SHARE * eval_tokens / tokens_per_step
            del model
            if c is reference:  # its FLOP/s estimates the other shapes' steps, to order them
                rate = c.flops_per_token * tokens_per_step / c.step_seconds
                for other in candidates:
                    other.steps = int(budget.seconds / (other.flops_per_token * tokens_per_step / rate))
                    other.distance = FITTED_RULE.distance(other.parameters, other.steps * tokens_per_step, corpus_tokens)
                order = sorted((o for o in candidates if o is not reference), key=lambda o: o.distance)
            if sum(o.step_seconds is not None for o in candidates) > MOST_MEASURED:
                break
            spent = time.perf_counter() - started  # + the next one's measurement, at least 5 steps
            if order and spent + max(warmup_s + timed_s, 5 * order[0].flops_per_token * tokens_per_step / rate) > allowed:
                break
        for c in candidates:
            c.steps, c.distance = 0, math.inf  # estimates only ordered them: plan on measured ones
        seconds_left = (budget.seconds - (time.perf_counter() - started)) * (1 - OVERHEAD_SHARE)
    plan = plan_run(budget, candidates, tokens_per_step, corpus_tokens, FITTED_RULE, seconds_left, run.training.eval_steps)
    plan.choosing_seconds = time.perf_counter() - started
    if budget.seconds is not None:  # the budget holds, whatever the steps turn out to cost
        plan.max_time = min(budget.seconds - plan.choosing_seconds, run.training.max_time or math.inf)
    return plan


def measure_step_seconds(
    model, batch_size: int, block_size: int, dtype, warmup_s: float = 0.3, timed_s: float = 0.6, device: str | Any = "cpu"
) -> float:
    """Median seconds of a training step (forward, backward, AdamW) of `model` on random blocks on
    `device`, after warm-up steps (at least 2, for `warmup_s`: the first steps are slow); at least 3
    steps for `timed_s`."""
    import torch

    device = torch.device(device)
    model.to(device)
    ids = torch.randint(0, model.config.vocab_size, (batch_size, block_size), device=device)  # (B, T)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    synchronize = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model.train()

    def step() -> float:
        started = time.perf_counter()
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize()
        return time.perf_counter() - started

    spent, count = 0.0, 0
    while count < 2 or spent < warmup_s:
        spent, count = spent + step(), count + 1
    times: list[float] = []
    while len(times) < 3 or sum(times) < timed_s:
        times.append(step())
    return sorted(times)[len(times) // 2]

