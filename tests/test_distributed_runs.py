"""The real CLI on several processes: one machine (DDP, the reference), two machines, FSDP2.

Every run is configs/smoke.yaml on 845 bytes of Shakespeare with blocks shifted each epoch, dropout
off, 4 blocks per process, 20 steps, checkpoints at 10 and 20. Two "machines" are two `accelerate
launch --num_machines 2 --machine_rank 0|1` on this host, one process each, over gloo, writing into
one folder as machines on a cluster's shared filesystem do. tests/write_audit.py records what each
process writes there.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import PYTHON, REPO_ROOT, child_env, free_port, small_run_overrides, write_small_corpus
from safetensors.torch import load_file

from minigpt.training.checkpoints import checkpoint_problems, mark_complete

STEPS = 20
# Dropout off (each process would draw its own masks); 4 blocks x 2 processes = the one-process batch.
RUN_SETTINGS = (
    "model.hidden_dropout=0",
    "model.attention_dropout=0",
    "hardware.per_device_train_batch_size=4",
    f"training.max_steps={STEPS}",
    "training.save_steps=10",
    "hardware.peak_flops=1.0e12",  # MFU's peak as given: no matmul measured in every process of every run
)
WRITE_AUDIT = REPO_ROOT / "tests" / "write_audit.py"
SHARDED_LINE = re.compile(r"parameters: sharded over 2 processes \(FSDP2\): ([\d,]+) \+ ([\d,]+) of ([\d,]+), one shard")
WHOLE_LINE = re.compile(r"parameters: a whole copy on each of 2 processes \(([\d,]+) each\)")




def launcher(config: str, *options: str) -> list[str]:
    """`accelerate launch --config_file configs/accelerate/CONFIG --num_processes 2 OPTIONS`."""
    return [
        *(PYTHON, "-m", "accelerate.commands.launch", "--config_file", f"configs/accelerate/{config}"),
        *("--num_processes", "2", *options),
    ]




def train_command(launch: list[str], folder: Path, *extra: str) -> list[str]:
    """scripts/train.py on the small corpus beside `folder` (tokenizer and cache there too)."""
    overrides = small_run_overrides(folder, folder.parent / "small.txt", *RUN_SETTINGS)
    return [*launch, "scripts/train.py", "configs/smoke.yaml", *overrides, *extra]


@dataclass
class Machine:
    rank: int
    returncode: int
    stdout: str
    stderr: str
    writes: list[list[str]]  # what its process wrote under the audited folder (write_audit.py)


def two_machines(config: str, folders: tuple[Path, Path], audit: Path, *extra: str) -> list[Machine]:
    """One launcher per machine, both on this host; machine r trains into folders[r], audited
    under that folder's parent. Returns each machine's outcome."""
    port = free_port()
    processes = []
    for rank, folder in enumerate(folders):
        options = ("--num_machines", "2", "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1")
        launch = [*launcher(config, *options, "--main_process_port", str(port)), str(WRITE_AUDIT)]
        env = child_env(audit) | {"WRITE_AUDIT_ROOT": str(folder.parent), "WRITE_AUDIT_LOG": str(audit / "writes")}
        with open(audit / f"out.{rank}", "w") as out, open(audit / f"err.{rank}", "w") as err:  # no pipe to fill
            processes.append(subprocess.Popen(train_command(launch, folder, *extra), cwd=REPO_ROOT, env=env, stdout=out, stderr=err))
    for process in processes:
        process.wait(timeout=600)
    machines = []
    for rank, process in enumerate(processes):
        log = audit / f"writes.{rank}"  # RANK: the machine's one process
        writes = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        stdout, stderr = (audit / f"out.{rank}").read_text(), (audit / f"err.{rank}").read_text()
        machines.append(Machine(rank, process.returncode, stdout, stderr, writes))
    return machines


def losses(folder: Path) -> list[float]:
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    found = [(record["step"], record["loss"]) for record in records if "loss" in record]
    assert [step for step, _ in found] == list(range(1, STEPS + 1))
    return [loss for _, loss in found]


def count(text: str) -> int:
    return int(text.replace(",", ""))


@dataclass
class Run:
    folder: Path
    stdout: str
    losses: list[float]


@pytest.fixture(scope="module")
def one_machine(tmp_path_factory) -> Run:
    """The reference: two processes on one machine, DDP (configs/accelerate/cpu-ddp.yaml)."""
    home = tmp_path_factory.mktemp("one-machine")
    write_small_corpus(home)
    command = train_command(launcher("cpu-ddp.yaml", "--main_process_port", str(free_port())), home / "run")
    run = subprocess.run(command, cwd=REPO_ROOT, env=child_env(home), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr  # no SIGABRT at exit: the group was destroyed
    return Run(home / "run", run.stdout, losses(home / "run"))


def test_shifted_blocks_on_two_processes_give_the_one_process_loss_curve(one_machine, tmp_path, monkeypatch):
    """data.shift_blocks under `accelerate launch`: both processes read each epoch's windows.

    The offsets come from EpochOffsetCallback in each process (accelerate forwards set_epoch to a
    dataset only in one). Without it the two-process curve leaves the one-process one at the
    second epoch (step 4). The same run prints its summary once and writes one whole checkpoint
    with each process's RNG state, and a final model.
    """
    from minigpt.pipeline import run_training
    from minigpt.training.run_config import load_run_config

    monkeypatch.chdir(REPO_ROOT)
    corpus = write_small_corpus(tmp_path)
    settings = [s for s in RUN_SETTINGS if "batch_size" not in s]  # 8 blocks on the one process
    run_training(load_run_config("configs/smoke.yaml", small_run_overrides(tmp_path / "one", corpus, *settings)))
    for step, (a, b) in enumerate(zip(losses(tmp_path / "one"), one_machine.losses, strict=True), start=1):
        assert b == pytest.approx(a, rel=1e-4), f"2x4 differs from 1x8 at step {step}"

    assert "2 process(es)" in one_machine.stdout
    assert one_machine.stdout.count(f"done: {STEPS} steps") == 1  # only the main process prints the summary
    assert WHOLE_LINE.search(one_machine.stdout), one_machine.stdout  # DDP: a whole copy on each process
    checkpoint = one_machine.folder / f"checkpoint-{STEPS}"
    assert checkpoint_problems(checkpoint) == []
    assert sorted(p.name for p in checkpoint.glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert (one_machine.folder / "final" / "model.safetensors").exists()


def test_two_machines_give_the_one_machine_loss_curve_with_one_writer(one_machine, tmp_path):
    """configs/accelerate/multi-node.yaml, two machines of one process each, one shared folder."""
    folder = tmp_path / "shared" / "run"
    folder.parent.mkdir()
    write_small_corpus(folder.parent)
    machines = two_machines("multi-node.yaml", (folder, folder), tmp_path)
    for machine in machines:
        assert machine.returncode == 0, machine.stdout + machine.stderr

    for step, (a, b) in enumerate(zip(one_machine.losses, losses(folder), strict=True), start=1):
        assert b == pytest.approx(a, rel=1e-6), f"two machines differ from one at step {step}"
    # The global main process prints and writes the run; machine 1's first (local main) process
    # neither prints nor writes: not the tokenizer or the data cache (it waits for machine 0's),
    # not a checkpoint file (its RNG state comes natively from torch.save into the folder machine 0 made).
    main, other = machines
    assert main.stdout.count(f"done: {STEPS} steps") == 1 and "done:" not in other.stdout
    assert "parameters:" not in other.stdout and "tokenizer" not in other.stdout
    assert other.writes == []
    written = {tuple(event) for event in main.writes}
    # The audit sees every kind: a checkpoint's marker, the final model, the tokenizer (renamed into place).
    for published in ("run/checkpoint-10/checkpoint_complete.json", "run/final", "tokenizer"):
        assert any(event[0] == "os.rename" and event[-1] == published for event in written), published
    for step in (10, STEPS):
        checkpoint = folder / f"checkpoint-{step}"
        assert checkpoint_problems(checkpoint) == []
        assert sorted(p.name for p in checkpoint.glob("rng_state*")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert not list(folder.glob(".*"))  # no temporary file left


def test_machines_that_do_not_share_the_output_dir_stop_at_the_start(tmp_path, subprocess_env):
    """Two machines, one process each, whose output folders are not one folder (as on their own
    disks): both processes refuse with the same one-line error; a shared folder passes. Either
    way the check leaves nothing behind (it removes the folder it made for its marker)."""
    shared, disks = tmp_path / "shared" / "run", [tmp_path / f"disk{rank}" / "run" for rank in (0, 1)]
    code = (
        "import json, sys, torch.distributed as dist\n"
        "from minigpt.errors import ConfigError\n"
        "from minigpt.training.start import check_shared_output_dir\n"
        "dist.init_process_group('gloo')\n"
        "answers = []\n"
        "for folder in sys.argv[1:]:\n"
        "    try:\n"
        "        check_shared_output_dir(folder)\n"
        "        answers.append('shared')\n"
        "    except ConfigError as error:\n"
        "        answers.append(str(error))\n"
        "dist.destroy_process_group()\n"
        "print(json.dumps(answers))\n"
    )
    port = str(free_port())
    processes = []
    for rank in (0, 1):  # what torchrun gives each machine's one process
        env = subprocess_env | dict(
            RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port
        )
        command = [PYTHON, "-c", code, str(shared), str(disks[rank])]
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outcomes = [process.communicate(timeout=120) for process in processes]
    answers = []
    for process, (stdout, stderr) in zip(processes, outcomes, strict=True):
        assert process.returncode == 0, stderr
        answers.append(json.loads(stdout))

    assert [a[0] for a in answers] == ["shared", "shared"]
    for rank in (0, 1):  # every process refuses (each names its own path), so every one exits 2
        refusal = f"training.output_dir {disks[rank]} is not one folder for every machine: process(es) 1 do not see"
        assert answers[rank][1].startswith(refusal), answers[rank][1]
    assert not shared.exists() and not disks[0].exists() and not disks[1].exists()


def test_fsdp_shards_the_model_on_cpu_and_resumes_exactly_on_two_machines(one_machine, tmp_path):
    """configs/accelerate/fsdp.yaml on two CPU processes: each holds its shard of every parameter,
    the curve is DDP's, checkpoints and the final model are normal model.safetensors that
    `from_pretrained` loads. Then the run, cut back to its checkpoint-10, resumes on two machines
    (FSDP across them) and ends with the uninterrupted run's weights."""
    from transformers import AutoModelForCausalLM

    folder = tmp_path / "shared" / "run"  # the audit below watches shared/, HF_HOME is beside it
    folder.parent.mkdir()
    write_small_corpus(folder.parent)
    command = train_command(launcher("fsdp.yaml", "--main_process_port", str(free_port())), folder)
    run = subprocess.run(command, cwd=REPO_ROOT, env=child_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count(f"done: {STEPS} steps") == 1

    # Sharded while it trained: what each process held, counted inside the run on every process.
    sharded, whole = SHARDED_LINE.search(run.stdout), WHOLE_LINE.search(one_machine.stdout)
    assert sharded and whole, run.stdout  # unsharded, this run would say "a whole copy on each" too
    shard_0, shard_1, total = map(count, sharded.groups())
    assert total == count(whole.group(1))  # DDP held all of it on each process
    assert shard_0 + shard_1 == total and 0.4 * total < shard_0 < 0.6 * total
    uninterrupted = losses(folder)
    for step, (a, b) in enumerate(zip(one_machine.losses, uninterrupted, strict=True), start=1):
        assert b == pytest.approx(a, rel=1e-5), f"FSDP differs from DDP at step {step}"

    final = folder / "final"
    for checkpoint in (folder / "checkpoint-10", folder / f"checkpoint-{STEPS}"):
        assert checkpoint_problems(checkpoint) == []
        assert (checkpoint / "pytorch_model_fsdp.bin").exists() and (checkpoint / "optimizer.bin").exists()
    weights = load_file(final / "model.safetensors")
    assert sorted(weights) == sorted(load_file(one_machine.folder / "final" / "model.safetensors"))  # no tied copy
    for where in (folder / f"checkpoint-{STEPS}", final):
        assert not list(where.glob("_fsdp*")), where  # torch's wrapper class is not the model's code
        auto_map = json.loads((where / "config.json").read_text())["auto_map"]
        assert auto_map["AutoModelForCausalLM"] == "modeling_minigpt.MiniGPTForCausalLM"
        loaded = AutoModelForCausalLM.from_pretrained(where, trust_remote_code=True).state_dict()
        assert all(torch.equal(loaded[name], tensor) for name, tensor in weights.items()), where

    # A run stopped after checkpoint-10, resumed on two machines: FSDP shards across them.
    for later in (folder / f"checkpoint-{STEPS}", final, folder / "summary.json"):
        shutil.rmtree(later) if later.is_dir() else later.unlink()
    machines = two_machines("fsdp.yaml", (folder, folder), tmp_path, "--resume")
    for machine in machines:
        assert machine.returncode == 0, machine.stdout + machine.stderr
    main, other = machines
    assert f"resuming from {folder / 'checkpoint-10'}" in main.stdout
    assert SHARDED_LINE.search(main.stdout) and other.writes == []
    assert losses(folder) == uninterrupted
    resumed = load_file(final / "model.safetensors")
    assert sorted(resumed) == sorted(weights)
    assert all(torch.equal(resumed[name], tensor) for name, tensor in weights.items())


def _checkpoint_common_files(folder: Path) -> None:
    """What every checkpoint holds besides the model and optimizer: state, schedule, RNG states."""
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    for name in ("scheduler.pt", "rng_state_0.pth", "rng_state_1.pth"):
        torch.save({"state": 1}, folder / name)


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_checkpoint_problems_reads_both_fsdp_layouts(tmp_path):
    """Accelerate's FSDP files: a full state dict (pytorch_model_fsdp.bin and optimizer.bin, beside
    the model.safetensors that from_pretrained reads) or a sharded one (pytorch_model_fsdp_0/ and
    optimizer_0/, torch.distributed.checkpoint folders: one file per process and an index). A
    complete one passes; a missing or damaged piece is named."""
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file

    weights = {"w": torch.arange(64.0).reshape(8, 8)}
    full = tmp_path / "full" / "checkpoint-4"
    _checkpoint_common_files(full)
    save_file(weights, full / "model.safetensors")
    torch.save(weights, full / "pytorch_model_fsdp.bin")
    torch.save({"state": {"w": {"exp_avg": weights["w"]}}}, full / "optimizer.bin")
    mark_complete(full)
    assert checkpoint_problems(full) == []
    _truncate(full / "model.safetensors")
    (full / "optimizer.bin").unlink()
    assert checkpoint_problems(full) == ["model.safetensors is truncated or unreadable", "optimizer.bin is missing"]

    sharded = tmp_path / "sharded" / "checkpoint-4"
    _checkpoint_common_files(sharded)
    with pytest.warns(UserWarning, match="single process"):  # one process writes what two would share
        dcp.save({"model": weights}, storage_writer=dcp.FileSystemWriter(sharded / "pytorch_model_fsdp_0"))
        dcp.save({"optimizer": {"w": weights["w"] * 2}}, storage_writer=dcp.FileSystemWriter(sharded / "optimizer_0"))
    mark_complete(sharded)
    assert checkpoint_problems(sharded) == []
    (sharded / "pytorch_model_fsdp_0" / ".metadata").unlink()
    _truncate(next((sharded / "optimizer_0").glob("*.distcp")))
    # The marker sized every file of both torch.distributed.checkpoint folders: it names both.
    assert checkpoint_problems(sharded) == [
        "optimizer_0/__0_0.distcp is truncated or unreadable",
        "pytorch_model_fsdp_0/.metadata is missing",
    ]
