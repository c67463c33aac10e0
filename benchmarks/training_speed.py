"""Per-step training time: the training path against a plain PyTorch loop and GPT-2 under a stock Trainer.

Each contender trains in its own worker process (`worker.py`), so each keeps its own process-wide
CPU settings (threads, allocator thresholds), imports and allocator state. The parent
interleaves the workers (one contender's short run, its long run, then the next contender), so load
from other jobs hits all of them alike. Per-step time = (wall of a `long_steps` run - wall of a
`short_steps` run) / (long_steps - short_steps): everything a run does once (building the model and
the Trainer, the final evaluation and save) cancels out, what it does every step stays in. When
the run-once costs vary by more than the extra steps cost (too few steps), a repeat comes out zero
or negative: the run warns, and `unmeasured_repeats` counts those repeats for the table to flag.
Every row keeps each repeat's value (`spread`: median, min, max, quartiles), and each ratio is
taken repeat by repeat, between contenders that ran back to back under the same load.

Contenders, all at the same shape (layers, heads, hidden, context, batch, vocabulary) and data:
  training_path       `run_training` with the run config (what `scripts/train.py` does), in fp32
  training_path_own_precision  the same at the precision the run config picks on this CPU (the CPU
                      profile's `bf16: auto`: bf16 autocast where the CPU has AMX or AVX512-BF16;
                      on an fp32-only CPU it repeats training_path): a comparison of defaults
  plain_loop          the same model, fused AdamW, clipping, warmup + cosine, in a bare loop
  gpt2_trainer        `GPT2LMHeadModel` under a stock `Trainer` (in-memory Dataset, default collator)
  gpt2_trainer_cpu_settings  the same in a process with the CPU profile's settings (freed
                      memory kept), as MiniGPT's contenders run
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks import child_env
from benchmarks.spread import per_repeat_ratio, spread

GPT2_STOCK, GPT2_CPU_SETTINGS = "gpt2_trainer", "gpt2_trainer_cpu_settings"  # one model, two processes
OWN_PRECISION = "training_path_own_precision"  # the training path without the reference fp32
CONTENDERS = ("training_path", OWN_PRECISION, "plain_loop", GPT2_STOCK, GPT2_CPU_SETTINGS)
REFERENCE_PRECISION = "hardware.bf16=false"  # every contender but OWN_PRECISION runs fp32


@dataclass
class TrainingBenchmark:
    """What to time: a run config at a given shape, two run lengths, repeats, threads, a work folder."""

    config: Path  # run config (model, training and hardware settings of the training path)
    workdir: Path  # tokenizer, prepared data, run folders and worker logs
    layers: int = 4
    heads: int = 4
    hidden: int = 128
    context: int = 64  # tokens per block = max_position_embeddings
    batch: int = 12  # blocks per step
    vocab: int = 2048  # tokenizer vocabulary
    threads: int = 2  # torch threads in every worker
    short_steps: int = 100
    long_steps: int = 400
    repeats: int = 5  # interleaved repeats: enough for a median and a min-max that means something
    contenders: tuple[str, ...] = CONTENDERS
    extra_overrides: list[str] = field(default_factory=list)  # more run-config overrides, applied last

    def overrides(self) -> list[str]:
        """Run-config overrides that set the shape, the threads and where files go."""
        return [
            f"model.num_hidden_layers={self.layers}",
            f"model.num_attention_heads={self.heads}",
            f"model.hidden_size={self.hidden}",
            f"model.max_position_embeddings={self.context}",
            f"data.block_size={self.context}",
            f"hardware.per_device_train_batch_size={self.batch}",
            f"hardware.torch_num_threads={self.threads}",
            REFERENCE_PRECISION,
            f"tokenizer.vocab_size={self.vocab}",
            f"tokenizer.path={self.workdir / f'tokenizer-{self.vocab}'}",
            "tokenizer.show_progress=false",
            f"data.cache_dir={self.workdir / 'data'}",
            "data.show_progress=false",
            f"training.output_dir={self.workdir / 'training-path'}",
            "training.overwrite_output_dir=true",
            f"training.sample_max_new_tokens={max(1, self.context // 4)}",
            *self.extra_overrides,
        ]

    def own_precision_overrides(self) -> list[str]:
        """`overrides()` without the reference fp32: the run config's own `hardware.bf16` applies
        (a `hardware.bf16` among `extra_overrides`, which come later, still wins)."""
        overrides = self.overrides()
        overrides.remove(REFERENCE_PRECISION)  # the first one: the reference, not an extra override
        return overrides


class Worker:
    """One contender in its own process: `run(steps)` trains that many steps and returns its timings."""

    def __init__(self, contender: str, bench: TrainingBenchmark) -> None:
        overrides = bench.own_precision_overrides() if contender == OWN_PRECISION else bench.overrides()
        spec = {"contender": contender, "config": str(bench.config), "overrides": overrides}
        spec["warmup_steps"] = min(10, bench.short_steps)
        self.log_path = bench.workdir / f"worker-{contender}.log"
        self.log = self.log_path.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.worker", json.dumps(spec)],
            env=child_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def wait_ready(self) -> dict[str, Any]:
        """Block until the worker has built its contender and warmed it up; its "omp_wait_policy"
        and the "precision" its matmuls run in ("float32", "bfloat16")."""
        return self._read()

    def run(self, steps: int) -> dict[str, float]:
        """{"wall": seconds, "cpu": process CPU seconds} of one run of `steps` optimizer steps."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"steps": steps}) + "\n")
        self.process.stdin.flush()
        return self._read()

    def _read(self) -> dict[str, Any]:
        stdout: IO[str] | None = self.process.stdout
        line = stdout.readline() if stdout is not None else ""
        if not line:
            self.close()
            tail = self.log_path.read_text()[-3000:]
            raise RuntimeError(f"benchmark worker died; the end of {self.log_path}:\n{tail}")
        return json.loads(line)

    def close(self) -> None:
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        self.process.wait(timeout=60)
        self.log.close()


def prepare_inputs(bench: TrainingBenchmark) -> None:
    """Train the tokenizer and prepare the blocks the contenders share (cached for the workers)."""
    from benchmarks.contenders import load_blocks
    from minigpt.training.run_config import load_run_config

    load_blocks(load_run_config(bench.config, bench.overrides()))


def compare_training(
    bench: TrainingBenchmark, progress: Callable[[str], None] = lambda line: None
) -> dict[str, Any]:
    """Per-step wall and CPU time and tokens/s of every contender, and their ratios, each as a
    `spread` over the repeats (every value, median, min, max, quartiles)."""
    bench.workdir.mkdir(parents=True, exist_ok=True)
    prepare_inputs(bench)  # tokenizer and blocks once, before the workers that read them
    workers: dict[str, Worker] = {}
    wait_policies: dict[str, str] = {}  # OMP_WAIT_POLICY each worker runs with ("default": OpenMP's own)
    precisions: dict[str, str] = {}  # the dtype each worker's matmuls run in
    try:
        progress(f"starting {', '.join(bench.contenders)}")
        # One at a time: `import minigpt` on cores busy with another worker's start-up would pick
        # passive OpenMP waits for that worker alone (likely why one run's plain loop was 1.3-1.7x slower).
        for name in bench.contenders:
            workers[name] = Worker(name, bench)
            ready = workers[name].wait_ready()
            wait_policies[name], precisions[name] = ready["omp_wait_policy"], ready["precision"]
        if len(set(wait_policies.values())) > 1:
            progress(f"warning: the workers' OpenMP wait policies differ ({wait_policies}): rows not comparable")
        per_step: dict[str, list[tuple[float, float]]] = {name: [] for name in workers}
        extra = bench.long_steps - bench.short_steps
        for repeat in range(bench.repeats):
            for name, worker in workers.items():
                short, long = worker.run(bench.short_steps), worker.run(bench.long_steps)
                wall = (long["wall"] - short["wall"]) / extra
                cpu = (long["cpu"] - short["cpu"]) / extra
                per_step[name].append((wall, cpu))
                progress(f"repeat {repeat + 1}/{bench.repeats} {name}: {1e3 * wall:.1f} ms/step")
                if wall <= 0:  # run-once costs (start, final save) varied by more than the extra steps cost
                    progress(
                        f"warning: {name}'s {bench.long_steps} steps took no longer than its "
                        f"{bench.short_steps} ({long['wall']:.2f} s against {short['wall']:.2f} s): "
                        "this repeat measures noise; raise --long-steps"
                    )
    finally:
        for worker in workers.values():
            worker.close()
    tokens = bench.batch * bench.context
    walls = {name: [w for w, _ in samples] for name, samples in per_step.items()}  # s/step per repeat
    rows = {
        name: {
            "ms_per_step": spread(1e3 * w for w in walls[name]),
            "cpu_ms_per_step": spread(1e3 * c for _, c in samples),
            "tokens_per_s": spread(tokens / w for w in walls[name]),
        }
        for name, samples in per_step.items()
    }
    ratios = {}  # repeat by repeat: the contenders of one repeat ran back to back, under the same load
    if "training_path" in walls and "plain_loop" in walls:
        ratios["training_path_over_plain_loop"] = per_repeat_ratio(walls["training_path"], walls["plain_loop"])
    for gpt2 in (GPT2_STOCK, GPT2_CPU_SETTINGS):
        if "training_path" in walls and gpt2 in walls:
            ratios[f"speedup_over_{gpt2}"] = per_repeat_ratio(walls[gpt2], walls["training_path"])
    if OWN_PRECISION in walls and GPT2_STOCK in walls:  # both sides as their defaults run them
        own = per_repeat_ratio(walls[GPT2_STOCK], walls[OWN_PRECISION])
        ratios[f"own_precision_speedup_over_{GPT2_STOCK}"] = own
    # Repeats whose per-step time came out zero or negative: the table marks their rows.
    unmeasured = {name: sum(w <= 0 for w in values) for name, values in walls.items() if min(values) <= 0}
    return {
        "rows": rows,
        "ratios": ratios,
        "omp_wait_policies": wait_policies,
        "precisions": precisions,
        "unmeasured_repeats": unmeasured,
    }


__all__ = [
    "CONTENDERS",
    "GPT2_CPU_SETTINGS",
    "GPT2_STOCK",
    "OWN_PRECISION",
    "TrainingBenchmark",
    "Worker",
    "compare_training",
]
