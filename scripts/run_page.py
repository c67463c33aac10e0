"""Write (or rewrite) the page of a run: RUN_DIR/run.html, from the files in RUN_DIR alone.

    python scripts/run_page.py runs/smoke

The end of a run writes it (with loss.png) through the same `write_report`; this draws both again
for a run folder written before there was one, or after adding a file the page shows
(corpus_report.json, plan.json). It prints the page's path.
"""

from __future__ import annotations

import argparse

from minigpt.errors import run_cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("run_dir", help="a training run's output folder (training.output_dir)")
    args = parser.parse_args(argv)

    from minigpt.reporting.report import write_report  # matplotlib: only once the arguments are fine

    print(write_report(args.run_dir))
    return 0


if __name__ == "__main__":
    run_cli(main)
