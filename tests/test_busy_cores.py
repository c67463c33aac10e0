"""Busy cores: the thread count follows the free cores, and a warning compares with an absolute
expectation (MFU against a quiet-measured peak), not only with the run's own start."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from minigpt.training.busy_cores import (
    EXPECTED_MFU,
    RECHECK_WINDOWS,
    BusyCoresCallback,
    SlowdownDetector,
    choose_threads,
    threads_for,
)


def test_threads_follow_the_free_cores():
    assert threads_for(2, 0.97) == 2  # free
    assert threads_for(2, 0.67) == 1  # one of two cores busy: 3 runnable threads on 2 cores
    assert threads_for(8, 0.89) == 7  # one of eight busy
    assert threads_for(8, 0.5) == 4
    assert threads_for(4, 0.1) == 1
    assert threads_for(1, 0.2) == 1


@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) != 2, reason="written for a 2-core machine")
def test_a_busy_core_at_the_start_gives_one_thread():
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        threads, share = choose_threads(2)
    finally:
        spinner.kill()
        spinner.wait()
    assert threads == 1 and share < 0.8, share


def test_the_absolute_expectation_warns_even_when_the_start_was_slow_too():
    detector = SlowdownDetector()
    slow_throughout = [300.0, 280.0, 310.0, 290.0, 300.0]  # the run: slow from the start
    assert all(detector.observe(tps) is None for tps in slow_throughout)  # relative: never
    detector = SlowdownDetector()
    said = [detector.observe(tps, mfu=0.02) for tps in slow_throughout]
    assert said[0] is None and said[1] is not None and said[2:] == [None, None, None]
    assert "2.0% of this machine's matmul peak" in said[1] and f"{EXPECTED_MFU:.0%}" in said[1]
    assert SlowdownDetector().observe(5000.0) is None
    healthy = SlowdownDetector()
    assert all(healthy.observe(5000.0, mfu=0.3) is None for _ in range(5))


def test_the_run_moves_its_thread_count_with_the_free_cores(capsys):
    previous = torch.get_num_threads()
    shares = iter([0.6, 0.98])  # busy when speed collapses, free again at a later check
    callback = BusyCoresCallback(adapt=True, max_threads=2, peak_threads=2, probe=lambda threads: next(shares))
    state = SimpleNamespace(global_step=0, is_world_process_zero=True)
    try:
        torch.set_num_threads(2)
        for step, tps in enumerate([900.0, 5000.0, 5100.0, 1200.0], start=1):  # collapses at step 4
            state.global_step = step * 10
            callback.on_log(None, state, None, logs={"tokens_per_second": tps})
        assert torch.get_num_threads() == 1 and callback.changes == [(40, 2, 1)]
        for step in range(5, 5 + RECHECK_WINDOWS):  # one thread, steady: re-checked after a while
            state.global_step = step * 10
            callback.on_log(None, state, None, logs={"tokens_per_second": 4000.0})
        assert torch.get_num_threads() == 2 and callback.changes[-1] == (140, 1, 2)
    finally:
        torch.set_num_threads(previous)
    err = capsys.readouterr().err
    assert "cores busy at step 40: training on with 1 thread(s) instead of 2" in err
    assert "cores free again at step 140: training on with 2 thread(s) instead of 1" in err
