"""The CBLUE leaderboard, declared as data: our runs' CBLUE metrics, in percent, beside the paper's rows.

Shown when any run in the report evaluated a CBLUE task (the runner records this board in the
run's ``config.json``; :mod:`evalpipe.report.boards` renders it). One row per published reference
(:mod:`evalpipe.tasks.cblue.reference`: human performance and the best pre-trained baseline,
**test split**, percent) and one per run, with each task's CBLUE metric
(:data:`evalpipe.tasks.cblue.suite.HEADLINE`: CMeEE/CMeIE/CDN micro-F1, CTC/STS macro-F1,
QIC/QTR/QQR accuracy) multiplied by 100 and its 95 % bootstrap interval.

A run's average is the plain mean of the eight headline metrics — the ``cblue`` aggregate in its
metrics.json when recorded, else computed the same way — and only exists when all eight ran
(a mean over a subset compares with nothing). Its interval combines replicate ``b`` of the eight
tasks, as the leaderboard's suite aggregates do.

The comparison is indicative, never like for like: the paper's rows are on the hidden test split
and from fine-tuned models; evalpipe scores the dev split by default (the split each run used is
shown) with prompted models. The section says so in its label, and the CSV marks reference rows
(``source``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from evalpipe.rundir.boards import ReferenceBoard, ReferenceRow
from evalpipe.tasks.cblue.reference import (
    BEST_BASELINE,
    BEST_BASELINE_AVERAGE,
    BEST_BASELINE_MODEL,
    HUMAN,
    HUMAN_AVERAGE,
    TASK_ORDER,
)
from evalpipe.tasks.cblue.suite import HEADLINE, SUITE
from evalpipe.tasks.registry import register_board

__all__ = ["AVERAGE", "BOARD", "DISPLAY", "REFERENCE_SOURCE"]

#: CBLUE's short task names, in the paper's column order
DISPLAY: Mapping[str, str] = MappingProxyType(dict(zip(TASK_ORDER, ("CMeEE", "CMeIE", "CDN", "CTC", "STS", "QIC",
                                                                    "QTR", "QQR"))))
AVERAGE = "average"
#: the ``source`` of reference rows in leaderboard.csv
REFERENCE_SOURCE = "reference: CBLUE paper, test split"

BOARD = register_board(ReferenceBoard(
    name=SUITE.name,
    title="CBLUE leaderboard",
    table_title="CBLUE leaderboard (percent)",
    tasks=TASK_ORDER,
    display=DISPLAY,
    headline=HEADLINE,
    rows=(
        ReferenceRow("Human (CBLUE paper)", "test", MappingProxyType({**HUMAN, AVERAGE: HUMAN_AVERAGE})),
        ReferenceRow(f"{BEST_BASELINE_MODEL} (best baseline, CBLUE paper)", "test",
                     MappingProxyType({**BEST_BASELINE, AVERAGE: BEST_BASELINE_AVERAGE})),
    ),
    scale=100.0,
    average="mean",
    average_key=AVERAGE,
    average_column="Avg",
    source=REFERENCE_SOURCE,
    reference_cell="reference (CBLUE paper)",
    label="reference rows: CBLUE paper, test split; our runs: {splits} split — indicative",
    note="Percent (evalpipe's 0-1 metrics × 100); brackets: 95 % bootstrap interval over samples. "
         "Average: mean of the eight tasks, only when all eight ran.",
    incomplete="No CBLUE average for {runs}: not all eight tasks ran.",
))
