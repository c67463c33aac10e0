"""scripts/gpu_check.py, the one command a lent GPU runs: its dry run on the CPU (every step at toy
size, the report written with each section and numbers in it), its steps' time limits, the tests it
deselects, and the wheels it carries against setup.cfg. What the GPU run measures: docs/gpu.md."""

from __future__ import annotations

import ast
import configparser
import json
import re
import subprocess
import sys
import time
from datetime import date

import torch
from conftest import PYTHON, REPO_ROOT
from packaging.requirements import Requirement

from benchmarks.gpu_check import (
    DESELECTED,
    IMAGE_PACKAGES,
    WHEELS,
    Step,
    plan_steps,
    read_junit,
    render_report,
    run_step,
)
from benchmarks.step_profile import kind_of

SECTIONS = (
    "## Steps",
    "## GPT-2 small as a run trains it",
    "## GPT-2 small's model step alone",
    "## Where the run's step goes (torch.profiler)",
    "## training.budget",
)


def test_the_dry_run_writes_one_report_with_every_section_and_its_numbers(tmp_path, subprocess_env):
    done = subprocess.run([PYTHON, "scripts/gpu_check.py", "--dry-run", "--out", str(tmp_path)], cwd=REPO_ROOT,
                          env=subprocess_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reports = list(tmp_path.glob("*.md"))
    assert [r.name for r in reports] == [f"{date.today().isoformat()}-cpu-dry-run-gpu-check.md"]
    report = reports[0].read_text()
    assert report.startswith(f"# {date.today().isoformat()}: GPU check, no GPU")
    assert "A dry run on the CPU at toy sizes" in report  # never read as figures
    for section in SECTIONS:
        assert f"\n{section}\n" in report, section
    assert "## Errors" not in report
    assert re.search(r"^\| bench \| passed \| \d+ \|$", report, re.M)
    assert re.search(r"^\| tests \| skipped: ", report, re.M)
    assert re.search(rf"torch {re.escape(torch.__version__)}", report)
    # the run's row: tokens/s, MFU, first step; the step's variants; the phases; the profile's kinds
    number, share = r"[\d,]+(\.\d+)?", r"\d+\.\d%"
    row = rf"^\| {number} \| {number} \| {share} \| ({number}|n/a) \| ({share}|n/a) \| n/a \| {number} s \| 0 \| 0 \|$"
    assert re.search(row, report, re.M)
    assert re.search(r"^\| no host sync in the timed steps \| \d+\.\d\d \| [\d,]+ \| \d+\.\d% \|$", report, re.M)
    for phase in ("forward and loss", "backward", "clipping and optimizer"):
        assert re.search(rf"^\| {phase} \| \d+\.\d\d \| \d+\.\d% \|$", report, re.M), phase
    assert re.search(r"^\| matmul \| \d+\.\d\d \| \d+\.\d% \|$", report, re.M)
    assert re.search(r"^\| `aten::\w+` \| ", report, re.M)  # the top ops (kernels on a GPU)
    assert re.search(r"^\| the run trained at most the planned steps \| passed \| \d+ of \d+ planned \|$", report, re.M)
    assert "plan for 1.5e+09 FLOPs: " in report and "\ndone: " in report
    figures = json.loads((tmp_path / "gpu-check-figures.json").read_text())
    assert figures["dry_run"] and not figures["errors"]
    assert figures["run"]["steps"] == 4 and figures["run"]["median_step_seconds"] > 0
    assert figures["run"]["profile"]["steps_profiled"] == [3, 4] and figures["run"]["profile"]["top"]
    assert figures["step"]["no_sync"]["ms_per_step"] > 0 and figures["step"]["peak_source"] == "hardware.peak_flops"
    assert {"gpu-check.log", "gpu-check-trace.json.gz"} <= {p.name for p in tmp_path.iterdir()}


def test_a_step_past_its_limit_is_stopped_and_one_without_the_time_it_needs_never_starts(tmp_path):
    marker = tmp_path / "child.pid"
    # the step's own child (a grandchild here) goes too: the whole process group is stopped
    code = ("import os, subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'import time; "
            f"time.sleep(120)']); open({str(marker)!r}, 'w').write(str(child.pid)); print('started', flush=True); "
            "time.sleep(120)")
    hung = Step("hung", [sys.executable, "-c", code], timeout=3)
    started = time.perf_counter()
    run_step(hung, {}, seconds_left=100)
    assert hung.status == "timed out after 3 s" and time.perf_counter() - started < 20
    assert hung.log[0] == "started" and "KeyboardInterrupt" in hung.log[-1]  # Ctrl-C first, as a person stops it
    child = int(marker.read_text())
    time.sleep(0.5)
    assert not process_alive(child)
    late = Step("late", [sys.executable, "-c", "pass"], timeout=100, needs=150)
    run_step(late, {}, seconds_left=120)
    assert late.status == "not started: 120 s left of the limit, it needs 150 s" and late.returncode is None
    failing = Step("failing", [sys.executable, "-c", "raise SystemExit(3)"], timeout=30)
    run_step(failing, {}, seconds_left=100)
    assert failing.status == "failed (exit 3)"


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


def test_the_tests_step_deselects_only_the_two_tests_whose_code_the_other_steps_run(tmp_path):
    tree = ast.parse((REPO_ROOT / "tests" / "test_gpu.py").read_text())
    names = [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
    for part in DESELECTED:  # each names exactly one test: a renamed test would otherwise run twice
        assert sum(part in name for name in names) == 1, part
    tests = plan_steps(tmp_path, "python3", False, [], [])[-1]
    assert tests.name == "tests" and tests.skip is None
    assert tests.command[tests.command.index("-k") + 1] == " and ".join(f"not {part}" for part in DESELECTED)
    install = plan_steps(tmp_path, "python3", False, [], [])[0]
    assert install.skip is not None and "--fetch-wheels" in install.skip  # no wheels: said, not failed


def test_junit_rows_say_each_outcome(tmp_path):
    (tmp_path / "t.xml").write_text(
        '<testsuites><testsuite><testcase name="test_a" time="1.5"/>'
        '<testcase name="test_b" time="2"><failure message="assert 1 == 2&#10;more">x</failure></testcase>'
        '<testcase name="test_c" time="0"><skipped message="needs two CUDA GPUs, 1 visible"/></testcase>'
        "</testsuite></testsuites>")
    assert read_junit(tmp_path / "t.xml") == [
        {"name": "test_a", "outcome": "passed", "message": "", "seconds": 1.5},
        {"name": "test_b", "outcome": "failed", "message": "assert 1 == 2", "seconds": 2.0},
        {"name": "test_c", "outcome": "skipped", "message": "needs two CUDA GPUs, 1 visible", "seconds": 0.0},
    ]
    assert read_junit(tmp_path / "missing.xml") == []


def test_every_requirement_is_on_the_gpu_image_or_carried_at_a_version_setup_cfg_allows():
    config = configparser.ConfigParser()
    config.read(REPO_ROOT / "setup.cfg")
    lines = config["options"]["install_requires"].splitlines()
    requirements = [Requirement(line) for line in lines if line.strip() and not line.strip().startswith("#")]
    pins = {name.lower(): version for name, version in (pin.split("==") for pin in WHEELS)}
    for requirement in requirements:
        name = requirement.name.lower().replace("_", "-")
        if name in pins:
            assert requirement.specifier.contains(pins[name]), (requirement, pins[name])
        else:
            assert name in IMAGE_PACKAGES, f"{name}: neither on the GPU image nor among the wheels"
            version = IMAGE_PACKAGES[name]
            assert version is None or requirement.specifier.contains(version), (requirement, version)


def test_kernels_are_told_apart_by_their_names_as_a_hopper_profile_shows_them():
    """Kernel names as torch.profiler gives them on an H100 or H200 (cuBLAS, flash and cuDNN
    attention, Inductor's fused Triton kernels, the fused AdamW): the profile's time by kind."""
    kinds = {
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4>, true>(Flash_fwd_params)": "attention",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x64x64_4x1x1": "attention",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1": "matmul",
        "nvjet_tst_256x128_64x4_2x1_v_bz_coopB_TNT": "matmul",
        "triton_tem_fused_mm_0": "matmul",
        "aten::mm": "matmul",
        "triton_red_fused__log_softmax__to_copy_nll_loss_forward_0": "loss (log-softmax, NLL)",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>": "optimizer and clipping",
        "Memcpy HtoD (Pageable -> Device)": "copies and casts",
        "triton_poi_fused__to_copy_3": "copies and casts",
        "triton_per_fused_native_layer_norm_7": "other (elementwise, norms, fused)",
        "triton_poi_fused_add_gelu_tanh_backward_5": "other (elementwise, norms, fused)",
    }
    assert {name: kind_of(name) for name in kinds} == kinds


def test_the_report_of_a_gpu_run_has_its_tests_its_budget_checks_and_its_errors():
    """The sections only a GPU run fills (the dry run skips the tests and has no failed step)."""
    machine = {"gpus": ["NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04"], "cores": 16, "commit": "abc1234"}
    tests = Step("tests", [], 240, status="failed (exit 1)", seconds=95.0,
                 log=["memory {} sdpa: estimated / allocated training 912 MiB / 914 MiB", "E   assert 0.12 < 0.1"])
    steps = [Step("install", [], 120, status="passed", seconds=9.0), Step("bench", [], 240, status="passed"),
             Step("budget", [], 180, status="timed out after 180 s", log=["plan for 120 s: 4 x 128 model"]), tests]
    budget = {"budget": "2m", "device": "cuda", "steps": 4434, "runtime_seconds": 131.0, "lines": ["done: 4434 steps"],
              "checks": [{"what": "the run ended by the budget", "passed": False, "detail": "216.0 s"}]}
    rows = [{"name": "test_a", "outcome": "passed", "message": "", "seconds": 1.0},
            {"name": "test_b", "outcome": "failed", "message": "assert 0.12 < 0.1", "seconds": 2.0}]
    report = render_report(machine, steps, {"software": {"torch": "2.11.0+cu130"}, "budget": budget}, rows, 400, 450, [])
    assert report.startswith("# ") and ": GPU check, NVIDIA H100 80GB HBM3\n" in report
    assert "A dry run" not in report and "commit `abc1234`" in report
    assert "| budget | timed out after 180 s | 0 |" in report
    assert "| the run ended by the budget | **failed** | 216.0 s |" in report
    assert "1 passed, 1 failed." in report and "| test_b | failed: assert 0.12 < 0.1 | 2.0 |" in report
    assert "memory {} sdpa: estimated / allocated training 912 MiB / 914 MiB" in report
    errors = report[report.index("## Errors"):]
    assert "budget:" in errors and "plan for 120 s" in errors and "tests:" in errors and "install:" not in errors
