"""One benchmark contender in its own process: `python -m benchmarks.worker SPEC`.

SPEC is JSON: {"contender", "config", "overrides", "warmup_steps"}. The worker chooses the OpenMP wait
policy as `scripts/train.py` does (before torch loads), applies the run's CPU settings (threads,
the allocator's thresholds), builds the contender, warms it up, answers
{"ready": true, "omp_wait_policy", "precision"}, then for each line {"steps": N} on stdin trains N steps and answers
{"wall": s, "cpu": s} on stdout. Everything the training itself prints goes to stderr (the
parent's log file), never into the answers.

The quality contender (`quality.py`), SPEC {"contender": "gpt2_quality", "config", "overrides",
"seconds"}, trains GPT-2 for that many seconds and answers one line: its steps and validation
bits/byte.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

from minigpt.cpu_load import choose_wait_policy


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # progress bars and log lines of the training go to the log, not the answers

    choose_wait_policy()  # before torch loads OpenMP, as a training run's start does

    from benchmarks.contenders import build_contender
    from benchmarks.quality import gpt2_at_budget
    from benchmarks.training_speed import GPT2_CPU_SETTINGS, GPT2_STOCK, OWN_PRECISION
    from minigpt.training.hardware import apply_process_settings, training_dtype
    from minigpt.training.run_config import load_run_config

    run = load_run_config(spec["config"], spec["overrides"])
    contender = spec["contender"]
    if contender in (GPT2_STOCK, GPT2_CPU_SETTINGS):
        # Stock: the CPU as a plain PyTorch user gets it; or with the CPU profile's process settings.
        # The same GPT-2 under the same Trainer either way: only this process differs.
        tuned = contender == GPT2_CPU_SETTINGS
        hardware = dataclasses.replace(run.hardware, keep_freed_memory=tuned)
        run, contender = dataclasses.replace(run, hardware=hardware), GPT2_STOCK
    if contender == OWN_PRECISION:  # the training path; its overrides left the config's precision
        contender = "training_path"
    apply_process_settings(run.hardware)
    if contender == "gpt2_quality":  # one run at a wall-clock budget, then its evaluation
        answers.write(json.dumps(gpt2_at_budget(run, spec["seconds"])) + "\n")
        return 0
    train = build_contender(contender, run)
    train(spec["warmup_steps"])  # first-call costs (lazy imports, allocator) out of the timed runs
    policy = os.environ.get("OMP_WAIT_POLICY", "default")  # as choose_wait_policy left it
    # A stock Trainer never autocasts, whatever the run config says; the others run as it resolves.
    dtype = "torch.float32" if contender == GPT2_STOCK else str(training_dtype(run.hardware))
    precision = dtype.removeprefix("torch.")
    answers.write(json.dumps({"ready": True, "omp_wait_policy": policy, "precision": precision}) + "\n")
    for line in sys.stdin:
        steps = json.loads(line)["steps"]
        wall, cpu = time.perf_counter(), time.process_time()
        train(steps)
        answers.write(
            json.dumps({"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu}) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
