"""Where a training step spends its time: a Trainer callback that times every step and profiles a
few (`StepProbe`), the profile summed by kind of kernel (`summarize_profile`), torch.compile's
graphs and breaks (`compile_counters`). Used by gpt2_small_speed.py.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback

TOP_KERNELS = 15  # rows of the profile's kernel table
# Kernel kinds by name, first match wins: attention kernels, cuBLAS/CUTLASS GEMMs, the loss's
# log-softmax and NLL (Inductor names a fused kernel after its ops), the optimizer and clipping
# (multi-tensor kernels), copies and dtype casts (autocast's bf16 weight copies).
KINDS = (
    ("attention", r"flash|fmha|attention|sdpa|cudnn"),
    ("matmul", r"gemm|xmma|nvjet|cutlass|cublas|matmul|addmm|bmm|\bmm\b|(^|_)mm(_|$)"),
    ("loss (log-softmax, NLL)", r"softmax|nll|cross_entropy"),
    ("optimizer and clipping", r"adam|multi_tensor|foreach|clip_grad"),
    ("copies and casts", r"memcpy|memset|copy"),
)
# Ops that wait for the device: `.item()`, `bool(tensor)` (Trainer's NaN filter), explicit syncs.
HOST_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "aten::_local_scalar_dense", "aten::item", "aten::is_nonzero")


def kind_of(name: str) -> str:
    """The kind of a kernel or op by its name (`KINDS`), else "other (elementwise, norms, fused)"."""
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other (elementwise, norms, fused)"


def summarize_profile(prof: Any, steps: int, wall_seconds: float, device: torch.device) -> dict[str, Any]:
    """Per step: the top kernels by device time (top ops by CPU time on a CPU), the share of each
    kind, the time no kernel ran (wall minus kernel time), host syncs and dataloader waits."""
    from torch.autograd import DeviceType

    events = prof.key_averages()
    gpu = device.type == "cuda"
    if gpu:
        timed = [(e.key, e.self_device_time_total, e.count) for e in events if e.device_type == DeviceType.CUDA]
    else:
        timed = [(e.key, e.self_cpu_time_total, e.count) for e in events if e.device_type == DeviceType.CPU]
    if gpu and not any(us > 0 for _, us, _ in timed):  # no kernel rows: the device time of the ops launching them
        timed = [(e.key, e.self_device_time_total, e.count) for e in events if e.device_type == DeviceType.CPU]
    timed = [(name, us, count) for name, us, count in timed if us > 0]
    timed.sort(key=lambda row: -row[1])
    busy_ms = sum(us for _, us, _ in timed) / 1e3 / steps
    wall_ms = 1e3 * wall_seconds / steps
    kinds: dict[str, float] = {}
    for name, us, _ in timed:
        kinds[kind_of(name)] = kinds.get(kind_of(name), 0.0) + us / 1e3 / steps
    cpu = {e.key: e for e in events if e.device_type == DeviceType.CPU}
    loader_us = sum(e.cpu_time_total for key, e in cpu.items() if key.startswith("enumerate(DataLoader)"))
    return {
        "steps": steps,
        "what": "CUDA kernels, self device time" if gpu else "CPU ops, self CPU time",
        "wall_ms_per_step": wall_ms,
        "busy_ms_per_step": busy_ms,
        # On a GPU: the step's time no kernel ran (launches, host syncs, the dataloader, Python).
        "idle_ms_per_step": max(0.0, wall_ms - busy_ms) if gpu else None,
        "kinds_ms_per_step": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        "top": [
            {"name": name[:120], "ms_per_step": us / 1e3 / steps, "calls_per_step": count / steps, "kind": kind_of(name)}
            for name, us, count in timed[:TOP_KERNELS]
        ],
        "host_syncs_per_step": {k: cpu[k].count / steps for k in HOST_SYNCS if k in cpu},
        "dataloader_ms_per_step": loader_us / 1e3 / steps,
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class StepProbe(TrainerCallback):
    """Times every optimizer step (as the run's throughput meter does: from its start to its end,
    kernels finished) and profiles `count` steps from step `first` on, in a stretch of an epoch
    without its last batch (a shorter one, whose new shape recompiles)."""

    def __init__(self, first: int, count: int, trace: Path | None = None) -> None:
        self.first, self.count, self.trace = first, count, trace
        self.profiler: Any = None
        self.started = self.step_started = 0.0
        self.started_at = 0  # global step before the first profiled one
        self.step_seconds: list[float] = []  # step i + 1's
        self.summary: dict[str, Any] | None = None
        self.epoch_part: float | None = None  # share of the epoch done after the last step
        self.steps_in_epoch: int | None = None

    def clear_of_epoch_end(self, state) -> bool:
        if not self.steps_in_epoch or self.epoch_part is None:
            return True
        next_index = round(self.epoch_part * self.steps_in_epoch)  # of the step about to run, in its epoch
        return next_index + self.count <= self.steps_in_epoch - 1 or state.global_step + self.count >= state.max_steps

    def on_step_begin(self, args, state, control, **kwargs) -> None:
        if self.profiler is None and state.global_step >= self.first and self.clear_of_epoch_end(state):
            activities = [torch.profiler.ProfilerActivity.CPU]
            if args.device.type == "cuda":
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            synchronize(args.device)
            self.profiler = torch.profiler.profile(activities=activities)
            self.profiler.__enter__()
            self.started, self.started_at = time.perf_counter(), state.global_step
        self.step_started = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        synchronize(args.device)  # the step timer's sync came first: no wait here
        self.step_seconds.append(time.perf_counter() - self.step_started)
        part = (state.epoch or 0.0) % 1.0  # Trainer: epoch + (batch index + 1) / batches in the epoch
        if self.epoch_part is not None and part > self.epoch_part:
            self.steps_in_epoch = round(1.0 / (part - self.epoch_part))
        self.epoch_part = part
        if self.profiler is not None and self.summary is None and state.global_step == self.started_at + self.count:
            wall = time.perf_counter() - self.started
            self.profiler.__exit__(None, None, None)
            self.summary = summarize_profile(self.profiler, self.count, wall, args.device)
            self.summary["steps_profiled"] = [self.started_at + 1, state.global_step]
            if self.trace is not None:
                self.profiler.export_chrome_trace(str(self.trace))

    def profiled(self, step: int) -> bool:
        return self.summary is not None and self.started_at < step <= self.started_at + self.count


def compile_counters() -> dict[str, Any]:
    """torch.compile's graphs, frames and graph breaks so far in this process (torch._dynamo's counters)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return {}
    breaks = counters.get("graph_break", {})
    return {
        "unique_graphs": counters.get("stats", {}).get("unique_graphs", 0),
        "frames_compiled": counters.get("frames", {}).get("ok", 0),
        "graph_breaks": sum(breaks.values()),
        "graph_break_reasons": [f"{n} x {reason[:160]}" for reason, n in sorted(breaks.items(), key=lambda kv: -kv[1])[:3]],
    }


__all__ = ["StepProbe", "compile_counters", "kind_of", "summarize_profile", "synchronize"]
