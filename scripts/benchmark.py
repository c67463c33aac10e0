"""Speed and quality of MiniGPT against GPT-2 and a plain loop, side by side in one run.

    python scripts/benchmark.py                         # training and generation rows, data rows
    python scripts/benchmark.py --default-run           # also the default run from nothing (~2.5 min)
    python scripts/benchmark.py --quality               # and GPT-2 trained as long: bits/byte (~5 min)
    python scripts/benchmark.py --compile --json out.json --markdown

Every timed row reads "median (min-max)" over its repeats (in the JSON: every value, median, min,
max, quartiles), contenders interleaved in every repeat; ratios are taken repeat by repeat.
Rows, after the machine (CPU model and speed flags, the precision bf16 auto picks, cores, threads,
versions, load average before and after):
  training    per-step time of the training path (`run_training`, as scripts/train.py), a plain
              PyTorch loop with the same model, optimizer, clipping and schedule, and GPT-2 under
              a stock Trainer: (wall of a --long-steps run - wall of a --short-steps run) / difference;
              all in fp32, and the training path once more at the precision its config picks on
              this CPU (bf16 autocast where the CPU has AMX or AVX512-BF16) against the stock GPT-2
  generation  KV-cached sampling, 256 new tokens, top-k 50, batch 1 and 8, MiniGPT against GPT-2
  data        tokenizer training, corpus preparation (cold and cached) and raw `tokenizers`, on the
              run's corpus in this process (large corpora, fresh processes and peak memory:
              scripts/benchmark_data.py)
  default run (--default-run) the run config from nothing: wall time and validation bits/byte
  quality     (--quality, implies --default-run) GPT-2 of the same size under a stock Trainer (AdamW,
              lr 2e-3 cosine, warmup 100, the run's batch and blocks, dropout and precision rule)
              for as long as the default run's Trainer.train() took; bits/byte of both on the
              same validation blocks
The shape is the reference one: 4 layers, 4 heads, hidden 128, context 64, batch 12, vocab 2048,
fp32; the rest of the architecture (positions, bias, activation) comes from --config.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: beside the package, not in the wheel

from benchmarks.spread import format_spread  # no torch: --help and config errors stay fast
from benchmarks.training_speed import GPT2_CPU_SETTINGS, GPT2_STOCK, OWN_PRECISION  # no torch either
from minigpt.errors import run_cli

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO_ROOT / "configs" / "shakespeare.yaml"
SECTIONS = ("training", "generation", "data")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="run config of the training path")
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="SECTION.KEY=VALUE", help="run-config overrides for --config"
    )
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--context", type=int, default=64, help="training block size")
    parser.add_argument("--batch", type=int, default=12, help="training batch size")
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (reference: 2)")
    parser.add_argument("--short-steps", type=int, default=100)
    parser.add_argument("--long-steps", type=int, default=400)
    parser.add_argument(
        "--repeats", type=int, default=5, help="training repeats, contenders interleaved in each (spread)"
    )
    parser.add_argument("--contenders", nargs="+", default=None, help="training contenders (default: all)")
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--gen-batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--gen-repeats", type=int, default=5)
    parser.add_argument("--data-repeats", type=int, default=3, help="data rows: cold repeats")
    parser.add_argument(
        "--compile", action="store_true", help="also time compiled decoding (~30 s to compile)"
    )
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS), help="rows to measure")
    parser.add_argument("--default-run", action="store_true", help="also train --config from nothing (slow)")
    parser.add_argument("--default-run-overrides", nargs="*", default=[], help="overrides for that run")
    parser.add_argument(
        "--quality",
        action="store_true",
        help="also GPT-2 under a stock Trainer for the default run's training time: bits/byte of both "
        "(implies --default-run; ~5 min)",
    )
    parser.add_argument(
        "--quality-seconds", type=float, help="GPT-2's budget instead of the default run's training time"
    )
    parser.add_argument("--workdir", type=Path, help="work folder (default: a temporary one, removed)")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--markdown", action="store_true", help="also print the results as a README table")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.default_run = args.default_run or args.quality
    from minigpt.training.run_config import load_run_config  # cheap: the config is checked first

    load_run_config(args.config, args.set)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="minigpt-benchmark-"))
    try:
        results = measure(args, workdir)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    print_results(results)
    if args.markdown:
        print(markdown_table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def measure(args: argparse.Namespace, workdir: Path) -> dict:
    from benchmarks.data_speed import compare_data
    from benchmarks.default_run import time_default_run
    from benchmarks.generation_speed import GenerationBenchmark, compare_generation
    from benchmarks.machine import describe_machine, load_average
    from benchmarks.quality import compare_quality
    from benchmarks.training_speed import CONTENDERS, TrainingBenchmark, compare_training
    from minigpt.training.hardware import apply_process_settings
    from minigpt.training.run_config import load_run_config

    training = TrainingBenchmark(
        config=args.config,
        workdir=workdir / "training",
        layers=args.layers,
        heads=args.heads,
        hidden=args.hidden,
        context=args.context,
        batch=args.batch,
        vocab=args.vocab,
        threads=args.threads,
        short_steps=args.short_steps,
        long_steps=args.long_steps,
        repeats=args.repeats,
        contenders=tuple(args.contenders or CONTENDERS),
        extra_overrides=list(args.set),
    )
    run = load_run_config(args.config, training.overrides())
    apply_process_settings(run.hardware)  # generation and data rows run here, with the run's CPU settings
    results: dict = {
        "command": "python scripts/benchmark.py " + " ".join(map(str, argv_of(args))),
        "machine": describe_machine(),  # after the run's CPU settings: its torch threads
        "load_before": load_average(),
    }
    if "training" in args.only:
        results["training"] = {**compare_training(training, progress=note), "shape": shape_of(training)}
    if "generation" in args.only:
        model = dataclasses.asdict(run.model)
        keep = ("position_embedding_type", "bias", "hidden_act", "rope_parameters", "tie_word_embeddings")
        generation = GenerationBenchmark(
            layers=args.layers,
            heads=args.heads,
            hidden=args.hidden,
            vocab=args.vocab,
            prompt_tokens=args.prompt_tokens,
            new_tokens=args.new_tokens,
            batches=tuple(args.gen_batches),
            repeats=args.gen_repeats,
            compiled=args.compile,
            model_overrides={k: model[k] for k in keep if k in model},
        )
        results["generation"] = compare_generation(generation, progress=note)
    if "data" in args.only:
        results["data"] = compare_data(run, workdir / "data-speed", repeats=args.data_repeats)
        throughput = format_spread(results["data"]["prepare_over_raw_throughput"], ".2f")
        note(f"data: prepare / raw throughput {throughput}")
    if args.default_run:
        results["default_run"] = time_default_run(
            args.config, workdir / "default-run", args.default_run_overrides
        )
        note(f"default run: {results['default_run']['eval_bpb']:.3f} bits/byte")
    if args.quality:
        results["quality"] = compare_quality(
            args.config,
            results["default_run"],
            workdir / "quality",
            args.default_run_overrides,
            seconds=args.quality_seconds,
        )
        gpt2 = results["quality"]["gpt2_trainer"]
        note(f"quality: GPT-2 + stock Trainer {gpt2['eval_bpb']:.3f} bits/byte in {gpt2['steps']} steps")
    results["load_after"] = load_average()
    return results


def argv_of(args: argparse.Namespace) -> list[str]:
    """The non-default options, to print the command that reproduces the table."""
    defaults = vars(parse_args([]))
    parts: list[str] = []
    for key, value in vars(args).items():
        if key in ("json", "markdown", "workdir") or value == defaults[key]:
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif isinstance(value, list):
            parts += [flag, *map(str, value)]
        else:
            parts += [flag, str(value)]
    return parts


def shape_of(bench) -> dict:
    keys = ("layers", "heads", "hidden", "context", "batch", "vocab", "threads", "short_steps", "long_steps")
    return {key: getattr(bench, key) for key in keys}


def note(line: str) -> None:
    print(line, flush=True)


def print_results(results: dict) -> None:
    print()
    for line in table_rows(results):
        print("  ".join(f"{cell:>22}" if i else f"{cell:<48}" for i, cell in enumerate(line)))


def table_rows(results: dict) -> list[list[str]]:
    """[what, value, ratio] rows shared by the terminal table and the markdown one; a timed value
    reads "median (min-max)" over its repeats."""
    from benchmarks.machine import describe_flags  # imports torch

    rows = [["", "value", "ratio"]]
    machine = results["machine"]
    rows.append(["machine: CPU", str(machine["cpu"]), ""])
    rows.append(["machine: speed flags", describe_flags(machine.get("cpu_flags")), ""])
    rows.append(["machine: precision of bf16 auto (CPU profile)", str(machine.get("bf16_auto")), ""])
    rows.append(["machine: cores / torch threads", f"{machine['cores']} / {machine['threads']}", ""])
    rows.append(["machine: torch / transformers", f"{machine['torch']} / {machine['transformers']}", ""])
    load = f"{results['load_before']:.2f} / {results['load_after']:.2f}"
    rows.append(["machine: load average before / after", load, ""])
    training = results.get("training")
    if training:
        unmeasured = training.get("unmeasured_repeats", {})
        for name, row in training["rows"].items():
            precision = training["precisions"][name]
            value = format_spread(row["ms_per_step"])
            if name in unmeasured:  # a long run no slower than its short one: the row is noise
                repeats = len(row["ms_per_step"]["values"])
                value += f", {unmeasured[name]} of {repeats} repeats <= 0: raise --long-steps"
            rows.append([f"training: {name} ({precision}), ms/step", value, ""])
        ratios = training["ratios"]
        if "training_path_over_plain_loop" in ratios:
            ratio = format_spread(ratios["training_path_over_plain_loop"], ".3f")
            rows.append(["training path time / plain loop time", "", ratio])
        for gpt2 in (GPT2_STOCK, GPT2_CPU_SETTINGS):
            if f"speedup_over_{gpt2}" in ratios:
                ratio = format_spread(ratios[f"speedup_over_{gpt2}"], ".2f", "x")
                rows.append([f"training path speedup over {gpt2}", "", ratio])
        own = ratios.get(f"own_precision_speedup_over_{GPT2_STOCK}")
        if own:
            precision = training["precisions"][OWN_PRECISION]
            what = f"training path at its own precision ({precision}) speedup over {GPT2_STOCK}"
            rows.append([what, "", format_spread(own, ".2f", "x")])
    for batch, contenders in (results.get("generation") or {}).items():
        for name, row in contenders.items():
            ratio = "" if name == "gpt2" else format_spread(row["speedup_over_gpt2"], ".2f", "x")
            what = f"generation {batch.replace('_', ' ')}: {name}, tok/s"
            rows.append([what, format_spread(row["tokens_per_s"], ".0f"), ratio])
    data = results.get("data")
    if data:
        rows.append(["data: tokenizer training, s", format_spread(data["tokenizer_s"], ".2f"), ""])
        rows.append(["data: prepare_corpus (cold), s", format_spread(data["prepare_s"], ".2f"), ""])
        rows.append(["data: prepare_corpus (cached), s", format_spread(data["cached_s"], ".3f"), ""])
        rows.append(["data: raw tokenizers encode, s", format_spread(data["raw_s"], ".2f"), ""])
        ratio = format_spread(data["prepare_over_raw_throughput"], ".2f")
        rows.append(["data: prepare / raw throughput", "", ratio])
    run = results.get("default_run")
    if run:
        rows.append(["default run: wall s (imports included)", f"{run['wall_s']:.0f}", ""])
        rows.append(["default run: validation bits/byte", f"{run['eval_bpb']:.3f}", ""])
    rows += quality_rows(results.get("quality"))
    return rows


def quality_rows(quality: dict | None) -> list[list[str]]:
    """The quality rows: the budget, each contender's bits/byte and steps, and the gap."""
    if not quality:
        return []
    default, gpt2 = quality["default_run"], quality["gpt2_trainer"]
    recipe = gpt2["recipe"]
    how = f"lr {recipe['learning_rate']:g} {recipe['lr_scheduler_type']}, {gpt2['precision']}"
    return [
        ["quality: budget (default run's Trainer.train()), s", f"{quality['budget_s']:.0f}", ""],
        ["quality: default run, validation bits/byte", f"{default['eval_bpb']:.3f}", ""],
        [f"quality: GPT-2 + stock Trainer ({how}), bits/byte", f"{gpt2['eval_bpb']:.3f}", ""],
        ["quality: steps in the budget, default run / GPT-2", f"{default['steps']} / {gpt2['steps']}", ""],
        ["quality: GPT-2 bits/byte - default run's", "", f"{quality['gpt2_minus_default_bpb']:+.3f}"],
    ]


def markdown_table(results: dict) -> str:
    rows = table_rows(results)
    lines = ["| " + " | ".join(rows[0]) + " |", "|---|---:|---:|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines)


if __name__ == "__main__":
    run_cli(main)
