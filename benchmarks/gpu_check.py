"""One command that checks a lent GPU in minutes and writes one dated Markdown file of figures.

Steps, in this order (the figures first: the GPU tests have passed on a GPU before), each in its
own process with its own time limit inside the command's (`LIMIT_SECONDS`), so one that hangs
cannot eat the others; a step that no longer has the time it needs is not started:
  install  the wheels in .whl/ (`--fetch-wheels` downloads them) into a folder put first on the
           steps' PYTHONPATH, without the network or dependencies: the image's torch is never touched
  bench    GPT-2 small as a run trains it, the model step alone, a profile (gpt2_small_speed.py)
  budget   a wall-clock `training.budget` run on the GPU and its checks (gpt2_small_speed.py)
  tests    `pytest -m gpu tests/test_gpu.py`, less the two tests whose code the steps above run
The report goes to $OUT when set (the device tool's folder), else docs/benchmarks/, with the
figures' JSON, the steps' log and the profile's trace beside it. Only the standard library is
imported here: the install step runs before anything else can be.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LIMIT_SECONDS = 450  # the whole command: 7.5 minutes, inside a device call's 8
REPORT_SECONDS = 30  # kept back for stopping a step at its limit (15 s at most) and the report
WHEELS_DIR = REPO / ".whl"
SITE_DIR = Path("/tmp/minigpt-gpu-site")  # where the install step puts the wheels
# The lent GPU image's packages that setup.cfg names, by the device notes (KINDS.md; None: there,
# version not recorded). setup.cfg's other requirements are not there and travel as wheels.
IMAGE_PACKAGES = {
    "torch": "2.11.0", "transformers": "5.17.0", "accelerate": "1.15.0", "tokenizers": "0.23.2",
    "safetensors": "0.8.0", "huggingface-hub": "1.33.0", "pyyaml": None, "tqdm": None, "matplotlib": None,
    "psutil": None,
}
# The wheels: transformers and datasets at setup.cfg's floors (transformers 5.25 needs huggingface-hub
# >= 2.4, the image has 1.33; these two ran on that image on 2026-12-04); the rest at the versions the
# suite passes with here. `--fetch-wheels` downloads them; tests/test_gpu_check.py checks them
# against setup.cfg.
WHEELS = (
    "transformers==5.24.0",  # the image's 5.17 is below setup.cfg's floor
    "datasets==5.0.0",
    "dill==0.4.1",  # datasets'
    "multiprocess==0.70.19",  # datasets'
    "evaluate==0.4.6",
    "gguf==0.19.0",
    "datasketch==2.0.0",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
CARRY_LIMIT = 64 * 2**20  # what a device call carries, the working tree included
# Tests whose code the bench and budget steps run (benchmarks/gpt2_small_speed.py): not run twice.
DESELECTED = ("gpt2_small_speed_and_mfu", "wall_clock_budget")
TRACE_LIMIT = 15 * 2**20  # a compressed trace larger than this stays behind (the device returns <= 16 MiB a file)


@dataclass
class Step:
    """One step of the check: its command, its own time limit, and what it did."""

    name: str
    command: list[str]
    timeout: float  # its own limit, in seconds
    needs: float = 0.0  # seconds left below which it is not worth starting
    skip: str | None = None  # why it does not run, decided before the check starts
    status: str = "not run"
    seconds: float = 0.0
    returncode: int | None = None
    log: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def run_step(step: Step, env: dict[str, str], seconds_left: float) -> None:
    """Run `step` for at most its timeout or `seconds_left`, its output printed with its name and
    kept; on its limit its whole process group is stopped (`stop_group`)."""
    if step.skip is not None:
        step.status = f"skipped: {step.skip}"
        return
    if seconds_left < max(step.needs, 1.0):
        step.status = f"not started: {seconds_left:.0f} s left of the limit, it needs {step.needs:.0f} s"
        return
    limit = min(step.timeout, seconds_left)
    print(f"[{step.name}] {' '.join(step.command)} (limit {limit:.0f} s)", flush=True)
    started = time.perf_counter()
    try:
        process = subprocess.Popen(step.command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    except OSError as error:
        step.status = f"failed to start: {error}"
        return

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            step.log.append(line.rstrip("\n"))
            print(f"[{step.name}] {line}", end="", flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        step.returncode = process.wait(timeout=limit)
        step.status = "passed" if step.returncode == 0 else f"failed (exit {step.returncode})"
    except subprocess.TimeoutExpired:
        stop_group(process)
        step.status = f"timed out after {limit:.0f} s"
    reader.join(timeout=10)
    step.seconds = time.perf_counter() - started


def stop_group(process: subprocess.Popen) -> None:
    """Stop the step's process group (it started one of its own): an interrupt first, as Ctrl-C (pytest
    then writes its report, a run saves and ends with the figures of its steps so far), TERM 10 s
    later, KILL 5 s after that."""
    for sig, wait in ((signal.SIGINT, 10), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def plan_steps(work: Path, python: str, dry_run: bool, wheels: list[Path], extra: list[str]) -> list[Step]:
    """The check's steps. A dry run (the test suite's, on a CPU) runs the bench and the budget at toy
    size in one process, and skips the install and the GPU tests (which skip without CUDA)."""
    bench = [python, "-m", "benchmarks.gpt2_small_speed", "--json", str(work / "bench.json"),
             "--workdir", str(work / "runs"), "--trace", str(work / "trace.json")]
    if extra:
        bench += ["--set", *extra]
    install = Step("install", [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                               "--no-cache-dir", "--upgrade", "--target", str(SITE_DIR), *map(str, wheels)],
                   timeout=120)
    if dry_run:
        install.skip = "a dry run leaves this Python's packages as they are"
    elif not wheels:
        install.skip = f"no wheels in {WHEELS_DIR.name}/ (python3 scripts/gpu_check.py --fetch-wheels makes them)"
    if dry_run:
        steps = [Step("bench", [*bench, "--dry-run", "--parts", "run,step,budget"], timeout=240)]
    else:
        steps = [Step("bench", [*bench, "--parts", "run,step"], timeout=240, needs=90),
                 Step("budget", [python, "-m", "benchmarks.gpt2_small_speed", "--json", str(work / "budget.json"),
                                 "--workdir", str(work / "runs"), "--parts", "budget"], timeout=180, needs=150)]
    tests = Step("tests", [python, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-m", "gpu",
                           "tests/test_gpu.py", "-rs", "-v", "-s", "-k",
                           " and ".join(f"not {name}" for name in DESELECTED), f"--junitxml={work / 'tests.xml'}"],
                 timeout=240, needs=30)
    if dry_run:
        tests.skip = "tests/test_gpu.py skips without CUDA (the suite collects it)"
    return [install, *steps, tests]


def step_env(installed: bool) -> dict[str, str]:
    """The steps' environment: the installed wheels, then this checkout, first on PYTHONPATH; offline."""
    paths = [*([str(SITE_DIR)] if installed else []), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def command_output(command: list[str], timeout: float = 20) -> str | None:
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def describe_machine() -> dict[str, Any]:
    """nvidia-smi's GPU line(s), the CPU cores, the checkout's commit."""
    smi = command_output(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
    return {
        "gpus": [line.strip() for line in smi.splitlines()] if smi else [],
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "commit": command_output(["git", "describe", "--always", "--dirty", "--abbrev=10"]),
    }


# ---- the report -----------------------------------------------------------------------------------------


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def read_junit(path: Path) -> list[dict[str, Any]]:
    """pytest's JUnit XML as rows: test name, outcome (passed, failed, error, skipped) and message, seconds."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return []
    rows = []
    for case in root.iter("testcase"):
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (found.get("message") or "").splitlines()[0][:200] if found.get("message") else ""
        rows.append({"name": case.get("name", "?"), "outcome": outcome, "message": message,
                     "seconds": float(case.get("time") or 0.0)})
    return rows


def number(value: float | None, digits: int = 1, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}{unit}"


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def gib(n_bytes: float | None) -> str:
    return "n/a" if n_bytes is None else f"{n_bytes / 2**30:.2f} GiB"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    aligns = ["---" if i == 0 else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(aligns) + "|"]
    return lines + ["| " + " | ".join(str(c).replace("|", "/") for c in row) + " |" for row in rows]


def run_section(run: dict[str, Any]) -> list[str]:
    lines = ["## GPT-2 small as a run trains it", "",
             f"`run_training` on configs/gpt2-small.yaml, one pass of {run.get('tokens_per_step', 0):,} tokens a step, "
             f"{run.get('steps')} steps. The step's time is the median over the steps not profiled, each timed as the "
             "run's throughput meter times it; the log windows are the run's own, less those holding a slow "
             "(compiling, evaluating, saving) or a profiled step. Overrides: "
             + ", ".join(f"`{o}`" for o in run.get("overrides", [])), ""]
    compiled = run.get("compile") or {}
    median = run.get("median_step_seconds")
    lines += table(["ms a step (median)", "tokens/s", "MFU", "log windows: tokens/s", "MFU", "peak allocated",
                    "first step (compiling)", "graphs compiled", "graph breaks"],
                   [[number(1e3 * median if median else None, 2), number(run.get("tokens_per_second"), 0),
                     percent(run.get("mfu")), number(run.get("window_tokens_per_second"), 0), percent(run.get("window_mfu")),
                     gib(run.get("peak_allocated_bytes")), number(run.get("first_step_seconds"), 1, " s"),
                     str(compiled.get("unique_graphs", "n/a")), str(compiled.get("graph_breaks", "n/a"))]])
    lines += ["", f"- MFU against {run.get('peak') or 'n/a'}"]
    lines += [f"- {run[key]}" for key in ("model_line", "memory_line") if run.get(key)]
    slow = run.get("slow_steps") or {}
    lines.append("- slow steps (over 1.5x the median; step: seconds): "
                 + ("; ".join(f"{i}: {t:.2f}" for i, t in slow.items()) or "none"))
    lines += [f"- graph break: {reason}" for reason in compiled.get("graph_break_reasons", [])]
    windows = run.get("windows") or []
    if windows:
        lines.append("- log windows (last step: tokens/s, MFU; * left out): " + "; ".join(
            f"{w['step']}{'' if w.get('clean') else '*'}: {w['tokens_per_second']:,.0f}, {percent(w['mfu'])}"
            for w in windows))
    return lines + [""]


def step_section(step: dict[str, Any], run: dict[str, Any]) -> list[str]:
    lines = ["## GPT-2 small's model step alone", "",
             f"The run's model, compiled: {'yes' if step.get('compile') else 'no'}, {step.get('dtype')}, "
             f"{step.get('batch')} x {step.get('block')} tokens on the device already; forward and loss, backward, "
             f"clipping and AdamW (fused on a GPU). MFU against {number(step.get('peak_flops', 0) / 1e12, 0)} TFLOP/s "
             f"({step.get('peak_source')}), {number(step.get('flops_per_token', 0) / 1e6, 1)} MFLOP a token; "
             f"the first step (compiling) took {number(step.get('compile_seconds'), 1, ' s')}.", ""]
    rows = []
    for key, label in (("no_sync", "no host sync in the timed steps"), ("sync_every_step", "a sync after every step (the run's step timer)")):
        r = step.get(key) or {}
        rows.append([label, number(r.get("ms_per_step"), 2), number(r.get("tokens_per_second"), 0), percent(r.get("mfu"))])
    lines += table(["variant", "ms a step", "tokens/s", "MFU"], rows)
    phases = step.get("phases_ms") or {}
    total = sum(phases.values()) or 1.0
    lines += ["", *table(["phase (CUDA events; host clock on a CPU)", "ms a step", "share"],
                         [[name, number(ms, 2), percent(ms / total)] for name, ms in phases.items()])]
    bare, tokens = (step.get("no_sync") or {}).get("ms_per_step"), run.get("tokens_per_second")
    if bare and tokens:
        run_ms = 1e3 * run.get("tokens_per_step", 0) / tokens
        lines += ["", f"The run's step takes {run_ms:.2f} ms, the model step alone {bare:.2f} ms: "
                      f"{run_ms - bare:+.2f} ms ({(run_ms - bare) / bare:+.1%}) for Trainer, its callbacks and the data."]
    return lines + [""]


def profile_section(profile: dict[str, Any]) -> list[str]:
    steps = profile.get("steps_profiled") or ["?", "?"]
    lines = ["## Where the run's step goes (torch.profiler)", "",
             f"Steps {steps[0]}-{steps[1]} of the run above; {profile.get('what')}; per step.", ""]
    lines += table(["wall ms a step", "busy ms a step", "idle ms a step (no kernel running)", "dataloader ms a step"],
                   [[number(profile.get("wall_ms_per_step"), 2), number(profile.get("busy_ms_per_step"), 2),
                     number(profile.get("idle_ms_per_step"), 2), number(profile.get("dataloader_ms_per_step"), 2)]])
    busy = profile.get("busy_ms_per_step") or 1.0
    kinds = profile.get("kinds_ms_per_step") or {}
    lines += ["", *table(["kind", "ms a step", "share of busy"], [[k, number(ms, 2), percent(ms / busy)] for k, ms in kinds.items()])]
    lines += ["", *table(["top by time", "kind", "ms a step", "calls a step"],
                         [[f"`{row['name']}`", row["kind"], number(row["ms_per_step"], 3), number(row["calls_per_step"], 1)]
                          for row in profile.get("top", [])])]
    syncs = profile.get("host_syncs_per_step") or {}
    lines += ["", "Host syncs a step: " + (", ".join(f"`{k}` {v:g}" for k, v in syncs.items()) or "none recorded")]
    return lines + [""]


def budget_section(budget: dict[str, Any]) -> list[str]:
    lines = ["## training.budget", "",
             f"configs/smoke.yaml with `training.budget={budget.get('budget')}` on {budget.get('device')}: "
             f"{budget.get('steps')} steps in {number(budget.get('runtime_seconds'), 1, ' s')}.", ""]
    lines += table(["check", "result", "detail"],
                   [[c["what"], "passed" if c["passed"] else "**failed**", c["detail"]] for c in budget.get("checks", [])])
    lines += ["", "```text", *budget.get("lines", []), "```"]
    return lines + [""]


def tests_section(rows: list[dict[str, Any]], log: list[str]) -> list[str]:
    counts = {o: sum(r["outcome"] == o for r in rows) for o in ("passed", "failed", "error", "skipped")}
    lines = ["## The GPU tests", "", "`pytest -m gpu tests/test_gpu.py`, less " +
             ", ".join(f"`{d}`" for d in DESELECTED) + " (the steps above run their code): " +
             ", ".join(f"{n} {o}" for o, n in counts.items() if n) + ".", ""]
    lines += table(["test", "result", "seconds"],
                   [[r["name"], r["outcome"] + (f": {r['message']}" if r["message"] else ""), number(r["seconds"], 1)]
                    for r in rows])
    memory = [line for line in log if line.startswith("memory {") or line.startswith("memory gpt2")]
    if memory:
        lines += ["", "```text", *memory, "```"]
    return lines + [""]


def render_report(machine: dict[str, Any], steps: list[Step], figures: dict[str, Any], tests: list[dict[str, Any]],
                  wall: float, limit: float, argv: list[str]) -> str:
    software = figures.get("software") or {}
    dry = figures.get("dry_run", False)
    gpu = (machine.get("gpus") or [None])[0]
    title = f"# {date.today().isoformat()}: GPU check, {gpu.split(',')[0] if gpu else 'no GPU'}"
    lines = [title, ""]
    if dry:
        lines += ["**A dry run on the CPU at toy sizes: it shows the check's code paths work; its numbers are "
                  "not figures of anything.**", ""]
    versions = ", ".join(f"{k} {v}" for k, v in software.items() if v and k not in ("device", "device_memory_bytes"))
    lines += [f"Command: `python3 scripts/gpu_check.py{''.join(' ' + a for a in argv)}`, {wall:.0f} s of its {limit:.0f} s "
              f"limit; commit `{machine.get('commit') or 'unknown'}`.", ""]
    lines += table(["machine", ""], [["GPU (nvidia-smi: name, memory, driver)", "; ".join(machine.get("gpus") or []) or "none"],
                                     ["CPU cores", str(machine.get("cores"))], ["software", versions or "n/a"]])
    lines += ["", "## Steps", ""]
    lines += table(["step", "result", "seconds"], [[s.name, s.status, number(s.seconds, 0)] for s in steps])
    lines.append("")
    if figures.get("run"):
        lines += run_section(figures["run"])
    if figures.get("step"):
        lines += step_section(figures["step"], figures.get("run") or {})
    if (figures.get("run") or {}).get("profile"):
        lines += profile_section(figures["run"]["profile"])
    if figures.get("budget"):
        lines += budget_section(figures["budget"])
    test_step = next((s for s in steps if s.name == "tests"), None)
    if tests or (test_step is not None and test_step.log):
        lines += tests_section(tests, test_step.log if test_step else [])
    errors = dict(figures.get("errors") or {})
    errors.update({s.name: "\n".join(s.log[-25:]) for s in steps if not s.passed and s.log})
    if errors:
        lines += ["## Errors", ""]
        for name, text in errors.items():
            lines += [f"{name}:", "", "```text", text.strip()[-3000:], "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def report_name(machine: dict[str, Any], dry_run: bool) -> str:
    gpu = (machine.get("gpus") or [""])[0].split(",")[0]
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "no-gpu"
    return f"{date.today().isoformat()}-{'cpu-dry-run' if dry_run else slug}-gpu-check.md"


# ---- the command ---------------------------------------------------------------------------------------


def check(out: Path | None, dry_run: bool = False, limit: float = LIMIT_SECONDS, only: list[str] | None = None,
          extra: list[str] | None = None, argv: list[str] | None = None, commit: str | None = None
          ) -> tuple[Path, bool]:
    """Run the steps within `limit` seconds and write the report: its path, and whether every step
    that ran passed (none failed, timed out or was left unstarted for time)."""
    started = time.perf_counter()
    out = out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else REPO / "docs" / "benchmarks")
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"minigpt-gpu-check-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    machine = describe_machine()
    machine["commit"] = commit or machine["commit"]
    wheels = sorted(WHEELS_DIR.glob("*.whl"))
    steps = plan_steps(work, sys.executable, dry_run, wheels, extra or [])
    for step in steps:  # the install always runs: the other steps need its packages
        if only and step.name not in (*only, "install"):
            step.skip = f"not asked for (--only {' '.join(only)})"
    for step in steps:
        left = limit - (time.perf_counter() - started) - REPORT_SECONDS
        installed = any(s.name == "install" and s.passed for s in steps)
        run_step(step, step_env(installed), left)
    figures = read_json(work / "bench.json")
    budget = read_json(work / "budget.json")
    if budget.get("budget"):
        figures["budget"] = budget["budget"]
        figures.setdefault("errors", {}).update(budget.get("errors") or {})
        figures.setdefault("software", budget.get("software"))
    report = render_report(machine, steps, figures, read_junit(work / "tests.xml"), time.perf_counter() - started,
                           limit, argv or [])
    out.mkdir(parents=True, exist_ok=True)
    path = out / report_name(machine, dry_run)
    path.write_text(report, encoding="utf-8")
    if out != REPO / "docs" / "benchmarks":  # beside a report in $OUT: the raw figures, the log, the trace
        (out / "gpu-check-figures.json").write_text(json.dumps(figures, indent=2, default=str))
        (out / "gpu-check.log").write_text("\n".join(f"[{s.name}] {line}" for s in steps for line in s.log) + "\n")
        trace = work / "trace.json"
        if trace.is_file():
            with trace.open("rb") as source, gzip.open(out / "gpu-check-trace.json.gz", "wb") as target:
                shutil.copyfileobj(source, target)
            if (out / "gpu-check-trace.json.gz").stat().st_size > TRACE_LIMIT:
                (out / "gpu-check-trace.json.gz").unlink()
    shutil.rmtree(work, ignore_errors=True)
    print(f"\n{report}\nreport: {path}", flush=True)  # last: a device call returns the output's tail
    return path, all(s.passed or s.status.startswith("skipped") for s in steps)


def fetch_wheels(folder: Path = WHEELS_DIR, python: str = sys.executable) -> int:
    """`pip download` WHEELS for CPython 3.12 on x86-64 Linux into `folder` (other versions of those
    packages removed: two versions stop the install); prints each wheel's size and the total."""
    folder.mkdir(parents=True, exist_ok=True)
    names = {pin.split("==")[0].lower().replace("-", "_"): pin.split("==")[1] for pin in WHEELS}
    for wheel in folder.glob("*.whl"):
        name, version = wheel.name.split("-")[:2]
        if names.get(name.lower()) not in (None, version):
            wheel.unlink()
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    command = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
               "--implementation", "cp", *platforms, "-d", str(folder), *WHEELS]
    done = subprocess.run(command)
    if done.returncode != 0:
        return done.returncode
    total = 0
    for wheel in sorted(folder.glob("*.whl")):
        total += wheel.stat().st_size
        print(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    print(f"{total / 2**20:7.2f} MiB in {folder} (a device call carries at most {CARRY_LIMIT // 2**20} MiB with the "
          "working tree: carry=['.whl'])")
    return 0 if total < CARRY_LIMIT * 3 // 4 else 1


__all__ = ["DESELECTED", "IMAGE_PACKAGES", "LIMIT_SECONDS", "WHEELS", "Step", "check", "fetch_wheels", "plan_steps", "read_junit",
           "render_report", "run_step"]
