"""Two processes over gloo on CPU (`accelerate launch --multi_gpu --num_processes 2`).

The same global batch of 8 must give the same loss curve whether it is 1 process x 8,
1 process x 4 x 2 accumulation steps, or 2 processes x 4; only the main process prints and writes;
a signal to one process stops both at the same step with one complete checkpoint; a user error is
one line; the real CLI evaluates one seeded sample, shared by both processes. Two machines and
FSDP2: tests/test_distributed_runs.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import resume_worker
import torch
import yaml
from conftest import PYTHON, REPO_ROOT

from minigpt.training.checkpoints import checkpoint_problems, list_checkpoints

LAYOUT_STEPS = 20
LAYOUT_ARGS = [
    "--max-steps",
    str(LAYOUT_STEPS),
    "--logging-steps",
    "1",
    "--save-steps",
    "10",
    "--dropout",
    "0",
]
LAYOUT_ARGS += ["--num-samples", "64"]  # 8 steps per epoch: the 20 steps cross two epoch boundaries


def accelerate_two_processes() -> list[str]:
    with socket.socket() as sock:  # a free rendezvous port: other runs may hold the default 29500
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return [
        *(PYTHON, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"),
        *("--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"),
        *("--main_process_port", str(port)),
    ]


def worker_losses(result: Path) -> list[float]:
    losses = json.loads(Path(f"{result}.json").read_text())["losses"]
    assert [step for step, _ in losses] == list(range(1, LAYOUT_STEPS + 1))
    return [loss for _, loss in losses]


def test_three_batch_layouts_give_the_same_loss_curve(tmp_path, subprocess_env):
    def in_process(name: str, *extra: str) -> list[float]:
        argv = ["--output-dir", str(tmp_path / name), "--result", str(tmp_path / name), *LAYOUT_ARGS, *extra]
        assert resume_worker.main(argv) == 0
        return worker_losses(tmp_path / name)

    one_by_8 = in_process("1x8", "--batch-size", "8")
    one_by_4_by_2 = in_process("1x4x2", "--batch-size", "4", "--grad-accum", "2")

    output_dir = tmp_path / "2x4"
    command = [*accelerate_two_processes(), resume_worker.__file__, "--output-dir", str(output_dir)]
    command += [
        "--result",
        str(output_dir),
        *LAYOUT_ARGS,
        "--batch-size",
        "4",
        "--pid-dir",
        str(tmp_path / "pids"),
    ]
    run = subprocess.run(
        command, cwd=REPO_ROOT, env=subprocess_env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout + run.stderr
    two_by_4 = worker_losses(output_dir)

    assert one_by_8[-1] < one_by_8[0] - 0.2  # it learns: the comparison is not between flat curves
    for step, (a, b, c) in enumerate(zip(one_by_8, one_by_4_by_2, two_by_4, strict=True), start=1):
        assert b == pytest.approx(a, rel=1e-4), f"1x4x2 differs from 1x8 at step {step}"
        assert c == pytest.approx(a, rel=1e-4), f"2x4 differs from 1x8 at step {step}"

    # Only the main process printed progress; each process wrote its own RNG state into the checkpoint.
    assert run.stdout.count("step 1\n") == 1
    assert sorted(p.name for p in (tmp_path / "pids").iterdir()) == ["0", "1"]
    checkpoint = output_dir / f"checkpoint-{LAYOUT_STEPS}"
    assert checkpoint_problems(checkpoint) == []
    assert sorted(p.name for p in checkpoint.glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert not list(output_dir.glob(".staging-*"))



def test_a_signal_to_one_process_stops_both_at_the_same_step(tmp_path, subprocess_env):
    output_dir = tmp_path / "run"
    command = [*accelerate_two_processes(), resume_worker.__file__, "--output-dir", str(output_dir)]
    command += [
        "--batch-size",
        "4",
        "--pause-after-step",
        "3",
        "--pause",
        "5",
        "--pid-dir",
        str(tmp_path / "pids"),
    ]
    process = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env=subprocess_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.rstrip().endswith("step 3"):  # process 0 pauses 5 s after step 3, and so does 1
            break
    else:
        pytest.fail("".join(seen))
    # Only process 1 gets SIGTERM; without agreement process 0 would train on into a deadlock.
    os.kill(int((tmp_path / "pids" / "1").read_text()), signal.SIGTERM)
    output = "".join(seen) + process.communicate(timeout=300)[0]

    assert process.returncode != 0, output
    # Process 0 (the one that prints) learned of the stop through the step-end all-reduce.
    assert "training stopped at step 3 (stop requested on another process)" in output
    assert [p.name for p in list_checkpoints(output_dir)] == ["checkpoint-3"]  # both stopped at 3
    assert checkpoint_problems(output_dir / "checkpoint-3") == []
    assert sorted(p.name for p in (output_dir / "checkpoint-3").glob("rng_state*")) == [
        "rng_state_0.pth",
        "rng_state_1.pth",
    ]
    assert "step 4" not in output


def test_cli_runs_on_two_processes_and_exits_cleanly(tmp_path, subprocess_env):
    output_dir = tmp_path / "smoke"
    overrides = [f"training.output_dir={output_dir}", f"tokenizer.path={tmp_path / 'tokenizer'}"]
    overrides += [
        "training.max_steps=4",
        "training.warmup_steps=2",
        "training.save_steps=4",
        "training.eval_steps=4",
        "training.sample_steps=4",
        "training.eval_tokens=2048",  # 64 of the 2,092 validation blocks
        "hardware.per_device_eval_batch_size=8",  # 8 batches: each process evaluates 4 of them
        "hardware.bf16=false",  # fp32: the evaluation below compares to 1e-5
    ]
    command = [*accelerate_two_processes(), "scripts/train.py", "configs/smoke.yaml", *overrides]
    run = subprocess.run(
        command, cwd=REPO_ROOT, env=subprocess_env, capture_output=True, text=True, timeout=600
    )

    assert run.returncode == 0, run.stdout + run.stderr  # no SIGABRT at exit: the group was destroyed
    assert run.stdout.count("done: 4 steps") == 1  # only the main process prints the summary
    assert "2 process(es)" in run.stdout
    assert checkpoint_problems(output_dir / "checkpoint-4") == []
    assert sorted(p.name for p in (output_dir / "checkpoint-4").glob("rng_state*")) == [
        "rng_state_0.pth",
        "rng_state_1.pth",
    ]
    assert (output_dir / "final" / "model.safetensors").exists()

    # Both processes evaluated one seeded sample, each its shard of it: the final eval loss is the
    # final model's loss on exactly those blocks.
    from transformers import AutoModelForCausalLM

    from minigpt.data.corpus import load_prepared
    from minigpt.data.run_data import sample_indices

    blocks_dir = re.search(r"(?:preparing|reusing prepared) blocks in (\S+)", run.stdout).group(1)
    validation = load_prepared(REPO_ROOT / blocks_dir).validation
    assert run.stdout.count(f"a fixed sample of 64 of {len(validation):,} validation blocks") == 1
    data_seed = yaml.safe_load((output_dir / "resolved_config.yaml").read_text())["data"]["seed"]
    rows = validation.select(sample_indices(len(validation), 64, seed=data_seed))["input_ids"]  # drawn with data.seed
    sample = torch.tensor(rows, dtype=torch.long)  # (64, 32)
    model = AutoModelForCausalLM.from_pretrained(output_dir / "final", trust_remote_code=True).eval()
    with torch.no_grad():
        expected = model(input_ids=sample, labels=sample).loss.item()
    records = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    final = [r for r in records if "eval_loss" in r][-1]
    assert (final["step"], final["eval_blocks"]) == (4, 64)
    assert final["eval_loss"] == pytest.approx(expected, rel=1e-5)


def test_a_user_error_on_two_processes_is_one_line_printed_once(tmp_path, subprocess_env):
    """A refused start (the folder holds another run) under `accelerate launch --num_processes 2`.

    What the launcher itself does after its workers exit is torch elastic's: it exits 1 with its
    summary of the failed workers, which the workers cannot change; the summary shows both exit 2.
    """
    output_dir = tmp_path / "taken"
    (output_dir / "final").mkdir(parents=True)
    command = [*accelerate_two_processes(), "scripts/train.py", "configs/smoke.yaml"]
    command += [f"training.output_dir={output_dir}", f"tokenizer.path={tmp_path / 'tokenizer'}"]
    run = subprocess.run(command, cwd=REPO_ROOT, env=subprocess_env, capture_output=True, text=True, timeout=600)

    errors = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "already holds a run" in errors[0], run.stderr
    assert run.returncode != 0
    # The workers' user-error exit code in torch elastic's summary: once the first exits, elastic may
    # stop the other before it reports its own (seen in 1 of 2 quiet runs), so at least one 2.
    assert run.stderr.count("exitcode  : 2") >= 1
    assert 'File "scripts/train.py"' not in run.stderr and "minigpt/" not in run.stderr  # no traceback of ours
    assert sorted(p.name for p in output_dir.iterdir()) == ["final"]  # nothing written into it
