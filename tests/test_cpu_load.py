"""Busy cores: one judge (`minigpt.cpu_load`) with one threshold; OpenMP threads wait passively on a
busy machine when a run starts (spinning waits made a step 10x slower there), and the thread count
stays torch's own, so a busy machine trains the same model."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import busy_cores

from minigpt.cpu_load import (
    CPUTimes,
    choose_wait_policy,
    others_busy_cores,
    read_cpu_times,
    sample_others_busy_cores,
)


def test_others_load_is_read_without_counting_this_process():
    # Over 2 s the machine was busy 3.0 core-seconds, 2.0 of them this process's: others held 0.5 core.
    start, end = CPUTimes(10.0, 100.0, 400.0, 5.0), CPUTimes(12.0, 103.0, 404.0, 7.0)
    assert others_busy_cores(start, end) == 0.5
    assert others_busy_cores(start, CPUTimes(12.0, 102.0, 404.0, 7.0)) == 0.0  # never below 0
    assert others_busy_cores(start, start) == 0.0  # no time passed: nothing known
    # A real reading: this process's own CPU time is read, and the others' load is a share of the cores.
    begin = read_cpu_times()
    while read_cpu_times().wall - begin.wall < 0.3:
        pass
    after = read_cpu_times()
    assert after.own > begin.own and after.machine_total > begin.machine_total
    assert 0.0 <= others_busy_cores(begin, after) <= os.cpu_count()
    assert 0.0 <= sample_others_busy_cores(0.05) <= os.cpu_count()


def test_openmp_threads_wait_passively_on_a_busy_machine_unless_the_user_says_otherwise(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch")  # as at a script's start, before torch loads
    environ: dict[str, str] = {}
    assert choose_wait_policy(environ, sample=lambda: 0.1) is None and environ == {}  # free cores: spin
    said = choose_wait_policy(environ, sample=lambda: 1.0)
    assert environ == {"OMP_WAIT_POLICY": "PASSIVE"} and "1.0 core(s)" in said
    users = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert choose_wait_policy(users, sample=lambda: 1.0) is None and users == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_nothing_is_chosen_once_torch_is_loaded():
    environ: dict[str, str] = {}
    assert "torch" in sys.modules  # this test module's conftest imported it: OpenMP has read its settings
    assert choose_wait_policy(environ, sample=lambda: 2.0) is None and environ == {}


def test_the_train_script_waits_passively_on_a_busy_machine_with_torchs_thread_count(subprocess_env, tmp_path):
    """A real start, with a spinner on every core: a tiny run of two steps chose passive waits (its
    opening lines say so) and kept torch's own thread count (the same reductions as an idle run)."""
    from conftest import REPO_ROOT, small_run_overrides, write_small_corpus

    overrides = small_run_overrides(
        tmp_path / "run", write_small_corpus(tmp_path), "training.max_steps=2", "training.warmup_steps=1"
    )
    env = {k: v for k, v in subprocess_env.items() if k != "OMP_WAIT_POLICY"}
    command = [sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "configs/smoke.yaml", *overrides]
    command.append("hardware.torch_num_threads=null")
    with busy_cores(len(os.sched_getaffinity(0))):
        result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"threads {len(os.sched_getaffinity(0))}, OMP_WAIT_POLICY=PASSIVE" in result.stdout


def test_a_bad_data_file_on_a_busy_machine_is_still_one_line_and_exit_2(subprocess_env, tmp_path):
    """On busy cores the run's start says nothing of them before an error: the error is its one line."""
    from conftest import REPO_ROOT, small_run_overrides

    missing = tmp_path / "missing.txt"
    overrides = small_run_overrides(tmp_path / "run", missing, "hardware.torch_num_threads=null")
    env = {k: v for k, v in subprocess_env.items() if k != "OMP_WAIT_POLICY"}
    command = [sys.executable, str(REPO_ROOT / "scripts" / "train.py"), "configs/smoke.yaml", *overrides]
    with busy_cores(len(os.sched_getaffinity(0))):
        result = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.strip().splitlines() == [f"error: train path {missing} does not exist"]
