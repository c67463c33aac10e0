"""Shape x learning-rate sweeps at fixed compute on four corpora, then the sizing rule's fit.

    python scripts/sweep_sizes.py --workdir /tmp/sweep --results docs/sweeps/2026-12-04-sizes.jsonl
    python scripts/sweep_sizes.py --results docs/sweeps/2026-12-04-sizes.jsonl --fit-only

Corpora, built in --workdir from what is on this machine (nothing downloaded):
  shakespeare  data/tinyshakespeare.txt (1.1 MB of verse and prose, one text file)
  prose        every Markdown, reST and text file of 500 bytes or more under site-packages, as JSON
               lines (package documentation and licences; about 10 MB)
  code         site-packages' Python sources cut to --code-mb (a folder, one document a file)
  c            the C and C++ headers under /usr/include, read in place (a folder, one document a
               file; about 130 MB on Debian 12): another language's code
Each point trains the default config's model at one shape for the steps a FLOP budget buys
(benchmarks/size_sweep.py), appends its validation bits/byte to --results, and is skipped
when the file has it already; then the rule of minigpt/training/sizing.py is fitted to all points.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: beside the package, not in the wheel

from minigpt.errors import run_cli

REPO_ROOT = Path(__file__).resolve().parent.parent
SHAPES = ["2x64", "3x96", "4x128", "4x192", "6x256", "8x384"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/minigpt-sweep"))
    parser.add_argument("--results", type=Path, required=True, help="JSON lines of the points (appended)")
    parser.add_argument("--corpora", nargs="+", default=["shakespeare", "prose", "code"])
    parser.add_argument("--flops", type=float, nargs="+", default=[3e12, 1.2e13], help="compute budgets")
    parser.add_argument("--shapes", nargs="+", default=SHAPES, help="LAYERSxWIDTH")
    parser.add_argument("--lr-scales", type=float, nargs="+", default=[1.0], help="x the rule's learning rate")
    parser.add_argument("--batches", type=int, nargs="+", default=[8], help="blocks a step (8: the plan's; others join the grid, not the fit)")
    parser.add_argument("--code-mb", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=1337, help="training.seed; another than 1337 repeats points (the fit takes each point's mean over its seeds)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads a point (default: one a core); 1 to run two sweeps side by side")
    parser.add_argument("--set", nargs="+", default=[], metavar="SECTION.KEY=VALUE",
                        help="overrides every point trains with on top of the plan's settings (an ablation: kept out of the fit)")
    parser.add_argument("--fit-only", action="store_true", help="only fit the rule to --results")
    parser.add_argument(
        "--fit-corpora", nargs="+", default=["shakespeare", "prose", "code", "c"],
        help="the corpora the printed fit (sizing.FITTED_RULE's) is made on; the others are held out "
        "(the choice tables hold out each corpus, or budget, in turn whatever this says)",
    )
    return parser.parse_args()


def prose_corpus(path: Path) -> Path:
    from benchmarks.python_corpus import site_packages

    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        files = sorted(p for suffix in ("*.md", "*.rst", "*.txt") for p in site_packages().rglob(suffix))
        with path.open("w", encoding="utf-8") as out:
            for file in files:
                if file.is_file() and 500 <= file.stat().st_size <= 500_000:
                    out.write(json.dumps({"text": file.read_text(encoding="utf-8", errors="replace")}) + "\n")
    return path


def corpora(args: argparse.Namespace):
    from benchmarks.python_corpus import build_python_corpus
    from benchmarks.size_sweep import SweepCorpus

    made = {}
    for name in args.corpora:
        if name == "shakespeare":
            made[name] = SweepCorpus(name, (f"data.train_files={REPO_ROOT / 'data' / 'tinyshakespeare.txt'}",))
        elif name == "prose":
            path = prose_corpus(args.workdir / "prose.jsonl")
            made[name] = SweepCorpus(name, (f"data.train_files={path}", "data.validation_split=random"))
        elif name == "c":
            made[name] = SweepCorpus(name, ("data.train_files=/usr/include", "data.validation_split=random"))
        elif name == "code":
            folder = args.workdir / "code"
            if not folder.exists():
                build_python_corpus(folder, max_bytes=int(args.code_mb * 1e6))
            made[name] = SweepCorpus(name, (f"data.train_files={folder}", "data.validation_split=random"))
        else:
            raise SystemExit(f"unknown corpus {name!r}")
    return made


def main() -> None:
    args = parse_args()
    from benchmarks.size_sweep import (
        at_rule_settings,
        average_seeds,
        choice_table,
        corpus_facts,
        fit_ratio,
        ladder,
        points_table,
        run_point,
    )

    if not args.fit_only:
        args.results.parent.mkdir(parents=True, exist_ok=True)
        for corpus in corpora(args).values():
            facts = corpus_facts(corpus, args.workdir)
            print(f"{corpus.name}: {facts['train_tokens']:,} training tokens, vocabulary {facts['vocab']}", flush=True)
            for flops in args.flops:
                for shape in args.shapes:
                    layers, width = map(int, shape.split("x"))
                    for scale, batch in ((s, b) for s in args.lr_scales for b in args.batches):
                        point = run_point(
                            corpus, facts, layers, width, flops, scale, args.workdir, args.results, batch=batch,
                            seed=args.seed, threads=args.threads, recipe=tuple(args.set),
                        )
                        if point:
                            print(
                                f"  {point['key']}: {point['steps']} steps, {point['epochs']:.2f} epochs, "
                                f"bits/byte {point['eval_bpb']:.4f} ({point['wall_s']:.0f} s)",
                                flush=True,
                            )
    every = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
    points = average_seeds(every)  # the fit and the tables take each place's mean over its seeds
    for point in (p for p in points if len(p["seed_bpb"]) > 1):
        each = ", ".join(f"{bpb:.4f}" for bpb in point["seed_bpb"])
        print(f"{point['key']}: bits/byte {point['eval_bpb']:.4f}, the mean of {len(point['seed_bpb'])} seeds ({each})")
    fit = fit_ratio([p for p in points if at_rule_settings(p) and p["corpus"] in args.fit_corpora])
    print(json.dumps(fit, indent=2))
    print(points_table(points, fit))
    shapes = ladder()  # the rule chooses among the plan's shapes, run or not, as a run would
    for hold_out in ("corpus", "budget"):
        print(
            f"\n| corpus | FLOPs | runs (shapes) | plan's choice (rule fitted without this {hold_out}) | grid's best "
            "| 4x128 (default) | choice - best | choice - default |"
        )
        print("|---|---:|---:|---|---|---:|---:|---:|")
        for row in choice_table(points, hold_out=hold_out, shapes=shapes):
            chosen, default = row["chosen_bpb"], row["default_bpb"]
            print(
                f"| {row['corpus']} | {row['flops']:.3g} | {row['grid']} ({row['shapes']}) | {row['chosen']} "
                + (f"{chosen:.4f}" if chosen is not None else "(not run)")
                + f" | {row['best']} {row['best_bpb']:.4f} | "
                + (f"{default:.4f}" if default is not None else "-")
                + " | " + (f"{chosen - row['best_bpb']:+.4f}" if chosen is not None else "-")
                + " | " + (f"{chosen - default:+.4f}" if chosen is not None and default is not None else "-") + " |"
            )


if __name__ == "__main__":
    run_cli(main)
