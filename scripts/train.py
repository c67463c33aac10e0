"""Train a MiniGPT model from a run config.

    python scripts/train.py [CONFIG] [--resume] [section.key=value ...]
    accelerate launch scripts/train.py configs/shakespeare.yaml training.max_steps=500

Without CONFIG it runs configs/shakespeare.yaml. Overrides are typed by the config schema.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from minigpt.console import never_failing_output
from minigpt.cpu_load import choose_wait_policy, keep_freed_memory
from minigpt.data.sources import find_sources  # standard library only: data errors come at once
from minigpt.distributed import is_main_process, processes_not_started, teardown_distributed
from minigpt.errors import run_cli
from minigpt.training.interrupt import StopController
from minigpt.training.run_config import load_run_config

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "shakespeare.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument(
        "items",
        nargs="*",
        metavar="[CONFIG] [section.key=value ...]",
        help=f"run config YAML (default {DEFAULT_CONFIG.relative_to(DEFAULT_CONFIG.parents[1])}), then overrides",
    )
    parser.add_argument("--resume", action="store_true", help="continue from the newest complete checkpoint")
    args = parser.parse_intermixed_args(argv)  # options and overrides in any order
    # A first item without "=" is the config, so `train.py training.max_steps=5` runs the default one.
    has_config = bool(args.items) and "=" not in args.items[0]
    args.config = Path(args.items[0]) if has_config else DEFAULT_CONFIG
    args.overrides = args.items[1:] if has_config else args.items  # checked by load_run_config
    # The config as the resume command names it: relative to the working folder when inside it (as
    # README shows commands), else as given.
    resolved, here = args.config.resolve(), Path.cwd().resolve()
    args.shown_config = str(resolved.relative_to(here)) if resolved.is_relative_to(here) else str(args.config)
    return args


def main(argv: list[str] | None = None) -> int:
    never_failing_output()  # a closed pipe or a vanished terminal never stops the run or its save
    args = parse_args(argv)
    run = load_run_config(args.config, args.overrides)  # exits 2 on any config problem, before anything heavy
    # This process exists for the run: the choices that hold for a whole process are made here. The
    # OpenMP wait policy before torch loads (passive on busy cores, where spinning threads make a step
    # several times slower); glibc keeping freed memory, which cannot be undone.
    choose_wait_policy()
    if run.hardware.keep_freed_memory:
        keep_freed_memory()
    if asked := processes_not_started():  # accelerate says only "1 process(es)" later
        print(
            f"warning: accelerate launch asked for {asked} processes but started this one alone: without a GPU, "
            "add --multi_gpu (DDP over gloo) or --config_file configs/accelerate/cpu-ddp.yaml",
            file=sys.stderr,
            flush=True,
        )

    sources = find_sources(run.data)  # a missing, empty or non-UTF-8 file: one line, before anything heavy
    from minigpt.pipeline import run_training  # heavy: only once the config and the data are known good

    command = ["python", "scripts/train.py", args.shown_config, *args.overrides, "--resume"]
    # A signal says all in one line at once, the resume command included.
    controller = StopController(resume_hint=shlex.join(command))
    result = run_training(run, stop_controller=controller, resume=args.resume, sources=sources)
    del result  # drop the run's objects before tearing the process group down
    teardown_distributed()
    if controller.stop_requested:
        if is_main_process():
            step = controller.stopped_at_step
            saved = f"saved {Path(run.training.output_dir) / f'checkpoint-{step}'}" if step is not None else "no new checkpoint"
            print(f"stopped ({controller.reason}): {saved}; resume with: {shlex.join(command)}", file=sys.stderr)
        return controller.exit_code
    return 0


if __name__ == "__main__":
    run_cli(main)
