"""Check a GPU in one command: the GPT-2 small benchmark, a training.budget run, the GPU tests.

    python3 scripts/gpu_check.py --fetch-wheels      # here, once: the packages a bare GPU image lacks, into .whl/
    python3 scripts/gpu_check.py                     # there: under 8 minutes, one dated Markdown file of figures
    python3 scripts/gpu_check.py --only bench --set training.logging_nan_inf_filter=false   # one change, measured
    python3 scripts/gpu_check.py --dry-run --out /tmp/x   # every step at toy size on the CPU (the suite's test)

The report goes to $OUT when set (the device tool returns that folder), else docs/benchmarks/; what
each step does and how long it may take: benchmarks/gpu_check.py. On the device tool, carry `.whl`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: beside the package, not in the wheel

from benchmarks.gpu_check import LIMIT_SECONDS, check, fetch_wheels  # stdlib only: runs before the install


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fetch-wheels", action="store_true", help="download the wheels into .whl/ and stop")
    parser.add_argument("--dry-run", action="store_true", help="toy sizes on the CPU: the code paths, no figures")
    parser.add_argument("--out", type=Path, default=None, help="the report's folder (default: $OUT, else docs/benchmarks)")
    parser.add_argument("--limit", type=float, default=LIMIT_SECONDS, help="seconds for the whole check")
    parser.add_argument("--only", nargs="+", choices=("bench", "budget", "tests"), default=None,
                        help="run these steps (and the install)")
    parser.add_argument("--commit", default=None, help="the checkout's commit, for a copy without git")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                        help="run-config overrides of the benchmark's run (a change to measure)")
    args = parser.parse_args(argv)
    if args.fetch_wheels:
        return fetch_wheels()
    _, every_step_passed = check(args.out, args.dry_run, args.limit, args.only, args.set, argv, args.commit)
    return 0 if every_step_passed else 1


if __name__ == "__main__":
    sys.exit(main())
