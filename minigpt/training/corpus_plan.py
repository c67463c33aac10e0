"""The corpus report with the run's plan: how many epochs and tokens per parameter its steps imply.

The data stage reports the corpus (`minigpt.data.corpus_report`); only training knows the model's
parameters, the tokens its steps read and the sizing rule, so it adds the plan (in the rule's
terms: effective tokens per matmul parameter, as `sizing.plan_run` weighs shapes), prints the
report at the run's start and writes it into the run's folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..atomic import atomic_write_file
from ..data.corpus_report import CorpusReport
from ..run_layout import CORPUS_REPORT_FILE
from .settings import RunConfig, effective_batch_size
from .sizing import FITTED_RULE


def planned_tokens(run: RunConfig, world_size: int) -> int:
    """Tokens the run trains on if it reaches training.max_steps: blocks per step x tokens per block x steps."""
    return effective_batch_size(run.hardware, world_size) * run.data.block_size * run.training.max_steps


def report_corpus(report: CorpusReport, run: RunConfig, matmul_parameters: int, world_size: int) -> CorpusReport:
    """`report` with the run's plan, written to <output_dir>/corpus_report.json and printed."""
    tokens = planned_tokens(run, world_size)
    ratio = FITTED_RULE.tokens_per_parameter(matmul_parameters, tokens, report.train["tokens"])
    report = report.with_plan(tokens, matmul_parameters, ratio, FITTED_RULE.ratio)
    with atomic_write_file(Path(run.training.output_dir) / CORPUS_REPORT_FILE) as handle:
        json.dump(report.to_dict(), handle, indent=2)
    for line in report.lines():
        print(line, flush=True)
    return report


__all__ = ["planned_tokens", "report_corpus"]
