"""GPT-2 small's speed on one device, and where its step spends the time; the GPU budget check.

    python -m benchmarks.gpt2_small_speed --json OUT.json [--dry-run] [--parts run,step,budget]

Parts, each written to the JSON as soon as it ends (a part that fails records its error):
  run      configs/gpt2-small.yaml through `run_training`, as `scripts/train.py` trains it (bf16, sdpa,
           torch.compile, fused AdamW, 32 x 1024 tokens a pass) but one pass a step, on Tiny
           Shakespeare with a tokenizer of exactly 50304 tokens: the median step's tokens/s and MFU,
           the run's own log windows, peak allocated memory beside the run's estimate, compilation's
           graphs, breaks and slow steps, a torch.profiler window of a few steps (step_profile.py)
  step     the same model alone: compiled forward and loss, backward, clipping, fused AdamW on one
           batch already on the device; no host sync in the timed steps, then a sync after every
           step (the step timer's), then each phase timed with CUDA events
  budget   `training.budget` on configs/smoke.yaml: the plan's step times measured on the device
           the run trains on, choosing in at most 5% of a wall-clock budget, the run ending by it
           (tests/test_gpu.py asserts these on a GPU; scripts/gpu_check.py reports them)
--dry-run runs every part at toy size on the CPU (2 layers, a few steps, a FLOP budget, a made-up
peak): the code paths, never figures.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks.step_profile import StepProbe, compile_counters, synchronize

REPO = Path(__file__).resolve().parents[1]
GPT2_SMALL = REPO / "configs" / "gpt2-small.yaml"
SMOKE = REPO / "configs" / "smoke.yaml"
SHAKESPEARE = REPO / "data" / "tinyshakespeare.txt"
PARTS = ("run", "step", "budget")
# ---- GPT-2 small made cheap to run ------------------------------------------------------------------


def exact_size_tokenizer(folder: Path, vocab_size: int) -> Path:
    """A byte-level BPE of exactly `vocab_size` tokens saved in `folder` (no training record: a run
    uses it as it is): special tokens first, the 256 byte symbols, then merges of byte pairs. A BPE
    trained on a small text stops far short of GPT-2's 50304 tokens; this one encodes any text
    losslessly, as a trained byte-level BPE does."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from minigpt.data.settings import TokenizerSettings
    from minigpt.data.tokenizer import save_tokenizer, wrap_tokenizer

    settings = TokenizerSettings(vocab_size=vocab_size)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())  # 256 printable stand-ins for bytes
    vocab = {token: i for i, token in enumerate(settings.special_tokens())}
    for symbol in alphabet:
        vocab[symbol] = len(vocab)
    merges = []
    for first in alphabet:
        for second in alphabet:
            if len(vocab) == vocab_size:
                break
            merges.append((first, second))
            vocab[first + second] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(settings.special_tokens())
    save_tokenizer(wrap_tokenizer(backend, settings), folder)
    return folder


def small_text(folder: Path, n_bytes: int) -> Path:
    """The first `n_bytes` of Tiny Shakespeare as a file in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "corpus.txt"
    path.write_text(SHAKESPEARE.read_text(encoding="utf-8")[:n_bytes], encoding="utf-8")
    return path


def gpt2_small_overrides(folder: Path, corpus: Path, tokenizer: Path, *extra: str) -> list[str]:
    """configs/gpt2-small.yaml on `corpus` with `tokenizer`, every file it writes in `folder`; the
    architecture and the optimizer as shipped, the hardware and schedule to `extra`."""
    return [
        f"data.train_files={corpus}",
        f"tokenizer.path={tokenizer}",
        f"data.cache_dir={folder / 'cache'}",
        f"training.output_dir={folder / 'run'}",
        "data.num_proc=1",
        "data.show_progress=false",
        "tokenizer.show_progress=false",
        *extra,
    ]


# Toy sizes of --dry-run: the CPU profile, 2 layers of 64, blocks of 64, a given peak (no measurement).
DRY_RUN = (
    "hardware.profile=cpu", "hardware.bf16=false", "hardware.torch_compile=false", "hardware.peak_flops=1.0e12",
    "hardware.torch_num_threads=1", "hardware.per_device_train_batch_size=2", "hardware.per_device_eval_batch_size=2",
    "model.num_hidden_layers=2", "model.hidden_size=64", "model.num_attention_heads=2",
    "model.max_position_embeddings=64", "data.block_size=64", "data.validation_fraction=0.1",
)
DRY_RUN_VOCAB, DRY_RUN_TEXT_BYTES = 512, 20_000


@contextlib.contextmanager
def tee_stdout() -> Iterator[io.StringIO]:
    """What the block prints, still printed and also kept."""
    kept, real = io.StringIO(), sys.stdout

    class Tee(io.TextIOBase):
        def write(self, text: str) -> int:
            kept.write(text)
            return real.write(text)

        def flush(self) -> None:
            real.flush()

    sys.stdout = Tee()
    try:
        yield kept
    finally:
        sys.stdout = real


def line_starting(text: str, prefix: str) -> str | None:
    return next((line for line in text.splitlines() if line.startswith(prefix)), None)


# ---- the parts ---------------------------------------------------------------------------------------


def measure_run(folder: Path, steps: int, dry_run: bool = False, extra: tuple[str, ...] = (),
                profile_steps: int = 3, trace: Path | None = None) -> dict[str, Any]:
    """GPT-2 small through `run_training` for `steps` steps of one pass each (the module doc's "run")."""
    from minigpt.pipeline import run_training
    from minigpt.training.run_config import load_run_config

    vocab = DRY_RUN_VOCAB if dry_run else load_run_config(GPT2_SMALL).tokenizer.vocab_size
    tokenizer = exact_size_tokenizer(folder / "tokenizer", vocab)
    corpus = small_text(folder, DRY_RUN_TEXT_BYTES) if dry_run else SHAKESPEARE
    logging_steps = 1 if dry_run else 10
    overrides = gpt2_small_overrides(
        folder, corpus, tokenizer,
        *(DRY_RUN if dry_run else ()), f"tokenizer.vocab_size={vocab}",
        "hardware.gradient_accumulation_steps=1", "data.validation_fraction=0.05" if not dry_run else "",
        f"training.max_steps={steps}", f"training.warmup_steps={max(1, steps // 10)}",
        f"training.logging_steps={logging_steps}", f"training.eval_steps={steps}", f"training.save_steps={steps}",
        f"training.sample_steps={steps}", "training.sample_max_new_tokens=4" if dry_run else "", *extra,
    )
    run = load_run_config(GPT2_SMALL, [o for o in overrides if o])
    device = torch.device("cuda" if torch.cuda.is_available() and not dry_run else "cpu")
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        torch._logging.set_logs(recompiles=True)  # why a graph compiled again, in the log
    # Profile after the first log window (compilation) and the shape changes of an epoch's end.
    first = min(max(2 * logging_steps, steps // 2), steps - profile_steps)
    probe = StepProbe(first, profile_steps, trace)
    with tee_stdout() as printed:
        result = run_training(run, callbacks=[probe])
    out = printed.getvalue()
    records = [json.loads(line) for line in (result.output_dir / "metrics.jsonl").read_text().splitlines()]
    windows = [r for r in records if "tokens_per_second" in r]
    mfu_line = line_starting(out, "MFU against") or ""
    # The step's time: the median of the steps not profiled. Slow steps: compilations (the first, and
    # a new shape: an epoch's shorter last batch), the evaluation's and the save's steps.
    times = {i + 1: t for i, t in enumerate(probe.step_seconds) if not probe.profiled(i + 1)}
    median = statistics.median(times.values()) if times else None
    slow = {i: t for i, t in times.items() if median and t > 1.5 * median}
    # The run's own log windows (as a run prints them), less those holding a slow or profiled step.
    clean = [r for r in windows if not any(r["step"] - logging_steps < i <= r["step"] for i in slow)
             and not any(probe.profiled(i) for i in range(r["step"] - logging_steps + 1, r["step"] + 1))]
    tokens_per_step = run.hardware.per_device_train_batch_size * run.data.block_size
    flops_over_peak = windows[0]["mfu"] / windows[0]["tokens_per_second"] if windows else None
    return {
        "overrides": [o for o in overrides if o.startswith(("hardware.", "training.", "model.", "data.block"))],
        "device": device.type,
        "steps": result.global_step,
        "tokens_per_step": tokens_per_step,
        "median_step_seconds": median,
        "tokens_per_second": tokens_per_step / median if median else None,
        "mfu": tokens_per_step / median * flops_over_peak if median and flops_over_peak else None,
        "slow_steps": {str(i): t for i, t in slow.items()},
        "window_tokens_per_second": statistics.mean(r["tokens_per_second"] for r in clean) if clean else None,
        "window_mfu": statistics.mean(r["mfu"] for r in clean) if clean else None,
        "windows": [{"step": r["step"], "tokens_per_second": r["tokens_per_second"], "mfu": r["mfu"],
                     "clean": r in clean} for r in windows],
        "peak": mfu_line.removeprefix("MFU against ").strip(),
        "model_line": line_starting(out, "model:"),
        "memory_line": line_starting(out, "memory:"),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else None,
        "first_step_seconds": probe.step_seconds[0] if probe.step_seconds else None,
        "compile": compile_counters(),
        "profile": probe.summary,
        "final_dir": str(result.final_dir) if result.final_dir else None,
    }


def measure_step(final_dir: Path, steps: int, dry_run: bool = False) -> dict[str, Any]:
    """The run's model alone, as its hardware section trains it (the module doc's "step")."""
    from minigpt import MiniGPTConfig, MiniGPTForCausalLM
    from minigpt.training.flops import flops_per_token, resolve_peak_flops
    from minigpt.training.hardware import cpu_run_settings, resolve_hardware, tf32_matmuls, training_dtype
    from minigpt.training.run_config import load_run_config

    config = MiniGPTConfig.from_pretrained(final_dir)
    run = load_run_config(final_dir / "resolved_config.yaml")
    torch._dynamo.reset()  # compiled afresh for the static shape of its one batch (the run's model may
    gc.collect()  # have recompiled for an epoch's shorter last batch); the run's tensors go
    h = resolve_hardware(run.hardware)
    device = torch.device("cuda" if torch.cuda.is_available() and not dry_run else "cpu")
    dtype = training_dtype(h)
    torch.backends.cuda.matmul.allow_tf32 = tf32_matmuls(h)
    torch.manual_seed(0)
    model = MiniGPTForCausalLM(config).to(device).train()
    model.config.use_cache = False
    model.set_attn_implementation(h.attn_implementation)
    forward = torch.compile(model) if h.torch_compile else model
    t = run.training
    optimizer = torch.optim.AdamW(model.parameters(), lr=t.learning_rate, betas=(t.adam_beta1, t.adam_beta2),
                                  weight_decay=t.weight_decay, fused=device.type == "cuda")
    batch, block = h.per_device_train_batch_size, run.data.block_size
    ids = torch.randint(0, config.vocab_size, (batch, block), device=device)  # (B, T)
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)

    def phases() -> Iterator[None]:
        """One training step, yielding after the forward and loss, the backward, the optimizer."""
        with autocast:
            loss = forward(input_ids=ids, labels=ids).loss
        yield
        loss.backward()
        yield
        torch.nn.utils.clip_grad_norm_(model.parameters(), t.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        yield

    def one_step() -> None:
        for _ in phases():
            pass

    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    one_step()  # compiles
    synchronize(device)
    compile_seconds = time.perf_counter() - started
    for _ in range(2):
        one_step()

    def timed(each: Callable[[], None]) -> float:  # mean seconds a step
        synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            one_step()
            each()
        synchronize(device)
        return (time.perf_counter() - start) / steps

    with cpu_run_settings(h):  # the run's threads on a CPU
        no_sync = timed(lambda: None)
        with_sync = timed(lambda: synchronize(device))
        split = phase_times(phases, steps, device)
    peak = resolve_peak_flops(h.peak_flops, device, dtype, tf32_matmuls(h))
    per_token = flops_per_token(model, config, block)
    tokens = batch * block

    def rate(seconds: float) -> dict[str, float]:
        return {"ms_per_step": 1e3 * seconds, "tokens_per_second": tokens / seconds,
                "mfu": tokens / seconds * per_token / peak.flops}

    return {
        "device": device.type,
        "batch": batch,
        "block": block,
        "dtype": str(dtype).removeprefix("torch."),
        "compile": h.torch_compile,
        "compile_seconds": compile_seconds,
        "flops_per_token": per_token,
        "peak_flops": peak.flops,
        "peak_source": peak.source,
        "no_sync": rate(no_sync),
        "sync_every_step": rate(with_sync),
        "phases_ms": split,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else None,
    }


def phase_times(phases: Callable[[], Iterator[None]], steps: int, device: torch.device) -> dict[str, float]:
    """Mean ms per step of each phase: CUDA events between phases on a GPU (no sync until the end),
    the host clock on a CPU (whose ops run as they are called)."""
    names = ("forward and loss", "backward", "clipping and optimizer")
    totals = dict.fromkeys(names, 0.0)
    if device.type == "cuda":
        marks = [[torch.cuda.Event(enable_timing=True) for _ in range(len(names) + 1)] for _ in range(steps)]
        for step in marks:
            step[0].record()
            for event, _ in zip(step[1:], phases(), strict=True):
                event.record()
        torch.cuda.synchronize(device)
        for step in marks:
            for i, name in enumerate(names):
                totals[name] += step[i].elapsed_time(step[i + 1])
    else:
        for _ in range(steps):
            last = time.perf_counter()
            for name, _ in zip(names, phases(), strict=True):
                now = time.perf_counter()
                totals[name] += 1e3 * (now - last)
                last = now
    return {name: total / steps for name, total in totals.items()}


def budget_check(folder: Path, budget: str, device_type: str) -> dict[str, Any]:
    """configs/smoke.yaml on 845 bytes of Tiny Shakespeare, logging every step (slower than its
    measured steps, as a real run's evaluations and samples are), with `training.budget=budget`;
    on a GPU under the gpu-bf16 profile without compilation. Returns the plan, the run's steps and
    time, and `checks`: (what, passed, detail) for each thing a budget run must do."""
    from minigpt.pipeline import run_training
    from minigpt.training import sizing
    from minigpt.training.run_config import load_run_config

    corpus = small_text(folder, 845)
    overrides = [
        f"training.output_dir={folder / 'run'}", f"tokenizer.path={folder / 'tokenizer'}",
        f"data.train_files={corpus}", f"data.cache_dir={folder / 'cache'}", "data.shift_blocks=true",
        "data.validation_fraction=0.25", "data.block_size=16", "model.max_position_embeddings=16",
        "training.sample_max_new_tokens=8", "tokenizer.vocab_size=300", "hardware.per_device_train_batch_size=8",
        "training.warmup_steps=2", "training.save_steps=100", "training.eval_steps=100", "training.sample_steps=100",
        "training.logging_steps=1", "tokenizer.show_progress=false", "data.show_progress=false",
        f"training.budget={budget}",
    ]
    if device_type == "cuda":
        overrides += ["hardware.profile=gpu-bf16", "hardware.bf16=true", "hardware.torch_compile=false",
                      "hardware.torch_num_threads=null"]
    else:
        overrides += ["hardware.bf16=false", "hardware.torch_num_threads=1"]
    measured_on, real_measure = [], sizing.measure_step_seconds

    def measure(model, *args, **kwargs):
        seconds = real_measure(model, *args, **kwargs)
        measured_on.append(next(model.parameters()).device.type)
        return seconds

    sizing.measure_step_seconds = measure
    try:
        with tee_stdout() as printed:
            result = run_training(load_run_config(str(SMOKE), overrides))
    finally:
        sizing.measure_step_seconds = real_measure
    out = printed.getvalue()
    plan = json.loads((result.output_dir / "plan.json").read_text())
    parsed = sizing.parse_budget(budget)
    checks = [("the run trained at most the planned steps", 0 < result.global_step <= plan["steps"],
               f"{result.global_step} of {plan['steps']} planned")]
    if parsed.seconds is not None:  # a FLOP budget measures no step times
        checks += [
            ("the shapes' step times were measured on the run's device",
             bool(measured_on) and set(measured_on) == {device_type}, f"measured on {sorted(set(measured_on))}"),
            ("choosing took at most 5% of the budget", plan["choosing_seconds"] <= 0.05 * parsed.seconds,
             f"{plan['choosing_seconds']:.1f} s of {parsed.seconds:g} s"),
            # the last step, the final evaluation and the save come after max_time: 30 s for them
            ("the run ended by the budget (30 s for the final evaluation and save)",
             result.runtime_seconds < parsed.seconds + 30, f"{result.runtime_seconds:.1f} s"),
        ]
    return {
        "budget": budget,
        "device": device_type,
        "plan": {k: plan.get(k) for k in ("shape", "steps", "choosing_seconds", "max_time")},
        "steps": result.global_step,
        "runtime_seconds": result.runtime_seconds,
        "lines": [line for line in out.splitlines() if line.startswith(("plan", "done:", "stopped:"))],
        "checks": [{"what": what, "passed": bool(ok), "detail": detail} for what, ok, detail in checks],
    }


def describe_software() -> dict[str, Any]:
    """Versions and the device, as this process imports them."""
    import importlib.metadata as metadata

    versions = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda}
    for name in ("transformers", "datasets", "accelerate", "tokenizers", "huggingface-hub", "triton"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        versions["device"] = properties.name
        versions["device_memory_bytes"] = properties.total_memory
    return versions


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, required=True, help="figures, written after each part")
    parser.add_argument("--workdir", type=Path, default=None, help="runs and tokenizers (default: beside --json)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--dry-run", action="store_true", help="toy sizes on the CPU: the code paths, no figures")
    parser.add_argument("--steps", type=int, default=None, help="steps of the run (60; 4 in a dry run)")
    parser.add_argument("--step-repeats", type=int, default=None, help="timed steps of each step variant (10; 2)")
    parser.add_argument("--budget", default=None, help="training.budget of the budget part (2m; 1.5e9 flops)")
    parser.add_argument("--trace", type=Path, default=None, help="write the profiled steps' Chrome trace here")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="more overrides of the run")
    args = parser.parse_args(argv)
    dry, workdir = args.dry_run, args.workdir or args.json.parent / "gpt2-small-speed"
    steps = args.steps or (4 if dry else 60)
    figures: dict[str, Any] = {"dry_run": dry, "software": describe_software(), "errors": {}}

    def save() -> None:
        args.json.write_text(json.dumps(figures, indent=2, default=str))

    save()
    for part in [p.strip() for p in args.parts.split(",") if p.strip()]:
        started = time.perf_counter()
        try:
            if part == "run":
                figures["run"] = measure_run(workdir / "run", steps, dry, tuple(args.set), trace=args.trace,
                                             profile_steps=2 if dry else 3)
            elif part == "step":
                final = figures.get("run", {}).get("final_dir")
                if final is None:
                    raise RuntimeError("the step part times the run part's model: run that part first")
                figures["step"] = measure_step(Path(final), args.step_repeats or (2 if dry else 10), dry)
            elif part == "budget":
                budget = args.budget or ("1.5e9 flops" if dry else "2m")
                figures["budget"] = budget_check(workdir / "budget", budget, "cpu" if dry else "cuda")
            else:
                raise ValueError(f"unknown part {part!r}: one of {', '.join(PARTS)}")
        except Exception:  # the next part still runs; the report shows this one's error
            figures["errors"][part] = traceback.format_exc()[-4000:]
            print(figures["errors"][part], file=sys.stderr, flush=True)
        figures.setdefault("seconds", {})[part] = time.perf_counter() - started
        save()
    return 1 if figures["errors"] else 0


__all__ = [
    "GPT2_SMALL", "budget_check", "exact_size_tokenizer", "gpt2_small_overrides", "measure_run", "measure_step",
    "small_text",
]

if __name__ == "__main__":
    sys.exit(main())
