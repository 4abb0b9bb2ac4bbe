"""The CBLUE leaderboard: our runs' CBLUE metrics, in percent, beside the CBLUE paper's rows.

Shown when any run in the report evaluated a CBLUE task. One row per published reference
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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evalpipe.report.document import Cell, Paragraph, Section, Table
from evalpipe.tasks.cblue.reference import (
    BEST_BASELINE,
    BEST_BASELINE_AVERAGE,
    BEST_BASELINE_MODEL,
    HUMAN,
    HUMAN_AVERAGE,
    TASK_ORDER,
)
from evalpipe.report.contributions import SuiteSection, register_section
from evalpipe.tasks.cblue.suite import HEADLINE, SUITE

if TYPE_CHECKING:  # the registry imports this module for every command: numpy/pandas only when a report is made
    import pandas as pd

    from evalpipe.report.bootstrap import TaskBootstrap
    from evalpipe.report.runs import ReportRun

__all__ = ["AVERAGE", "REFERENCE_SOURCE", "BoardRow", "cblue_rows", "cblue_section", "has_cblue", "reference_frame",
           "split_label"]

#: CBLUE's short task names, in the paper's column order
DISPLAY: Mapping[str, str] = dict(zip(TASK_ORDER, ("CMeEE", "CMeIE", "CDN", "CTC", "STS", "QIC", "QTR", "QQR")))
AVERAGE = "average"
#: the ``source`` of reference rows in leaderboard.csv
REFERENCE_SOURCE = "reference: CBLUE paper, test split"


@dataclass(frozen=True)
class BoardRow:
    name: str
    #: ``reference`` (published) or ``run`` (ours)
    source: str
    split: str
    #: task name or :data:`AVERAGE` → percent (None: not run)
    values: Mapping[str, float | None]
    #: task name or :data:`AVERAGE` → (low, high) in percent
    intervals: Mapping[str, tuple[float, float]] = field(default_factory=dict)


def has_cblue(runs: Sequence[ReportRun]) -> bool:
    return any(t in TASK_ORDER for run in runs for t in run.tasks)


def _split(run: ReportRun) -> str:
    """The split(s) the run evaluated its CBLUE tasks on (config.json records it per task)."""
    recorded = run.config.get("tasks", {})
    splits = sorted({str(recorded.get(t, {}).get("split") or "dev") for t in run.tasks if t in TASK_ORDER})
    return "/".join(splits) or "dev"


def split_label(runs: Sequence[ReportRun]) -> str:
    """The section's label: where the reference rows and our rows come from."""
    splits = sorted({s for run in runs if any(t in TASK_ORDER for t in run.tasks) for s in _split(run).split("/")})
    ours = "/".join(splits) or "dev"
    return f"reference rows: CBLUE paper, test split; our runs: {ours} split — indicative"


def _reference_rows() -> list[BoardRow]:
    return [
        BoardRow("Human (CBLUE paper)", "reference", "test", {**HUMAN, AVERAGE: HUMAN_AVERAGE}),
        BoardRow(f"{BEST_BASELINE_MODEL} (best baseline, CBLUE paper)", "reference", "test",
                 {**BEST_BASELINE, AVERAGE: BEST_BASELINE_AVERAGE}),
    ]


def _run_row(run: ReportRun, boots: Mapping[str, TaskBootstrap], level: float) -> BoardRow:
    values: dict[str, float | None] = {}
    intervals: dict[str, tuple[float, float]] = {}
    import numpy as np

    from evalpipe.report.bootstrap import percentile_interval

    replicates: list[np.ndarray] = []
    for task in TASK_ORDER:
        metric = HEADLINE[task]
        value = run.metrics.get(task, {}).get(metric) if task in run.tasks else None
        values[task] = 100 * float(value) if value is not None else None
        boot = boots.get(task)
        ci = boot.intervals.get(metric) if boot else None
        if ci is not None and ci.low is not None and ci.high is not None:
            intervals[task] = (100 * ci.low, 100 * ci.high)
        reps = boot.replicates.values.get(metric) if boot else None
        if reps is not None and reps.size:
            replicates.append(reps)
    complete = all(values[t] is not None for t in TASK_ORDER)
    recorded = run.metrics.get(SUITE.name, {}).get(AVERAGE)
    if recorded is None and complete and SUITE.aggregate is not None:  # the eight tasks without --suite cblue
        recorded = SUITE.aggregate({t: run.metrics[t] for t in TASK_ORDER})[AVERAGE]
    values[AVERAGE] = 100 * float(recorded) if recorded is not None else None
    if complete and len(replicates) == len(TASK_ORDER):
        count = min(r.size for r in replicates)
        average = percentile_interval(np.mean([r[:count] for r in replicates], axis=0), level)
        if average is not None:
            intervals[AVERAGE] = (100 * average[0], 100 * average[1])
    return BoardRow(run.label, "run", _split(run), values, intervals)


def cblue_rows(runs: Sequence[ReportRun], boots: Mapping[str, Mapping[str, TaskBootstrap]],
               level: float = 0.95) -> list[BoardRow]:
    """The paper's rows, then one row per run that evaluated any CBLUE task."""
    ours = [_run_row(run, boots.get(run.label, {}), level)
            for run in runs if any(t in TASK_ORDER for t in run.tasks)]
    return [*_reference_rows(), *ours]


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _groups() -> tuple[tuple[str, int], ...]:
    """Header groups: the CBLUE metric over the consecutive tasks that use it."""
    groups: list[tuple[str, int]] = [("", 3)]
    for task in TASK_ORDER:
        metric = HEADLINE[task]
        if len(groups) > 1 and groups[-1][0] == metric:
            groups[-1] = (metric, groups[-1][1] + 1)
        else:
            groups.append((metric, 1))
    groups.append(("", 1))
    return tuple(groups)


def cblue_section(rows: Sequence[BoardRow], label: str) -> Section:
    table_rows = []
    for row in rows:
        cells = [Cell(row.name, numeric=False),
                 Cell("reference (CBLUE paper)" if row.source == "reference" else "our run", numeric=False),
                 Cell(row.split, numeric=False)]
        for key in (*TASK_ORDER, AVERAGE):
            ci = row.intervals.get(key)
            cells.append(Cell(_percent(row.values.get(key)), sub=f"[{ci[0]:.1f}, {ci[1]:.1f}]" if ci else ""))
        table_rows.append(tuple(cells))
    incomplete = [r.name for r in rows if r.source == "run" and r.values.get(AVERAGE) is None]
    note = (f"{label}. Percent (evalpipe's 0-1 metrics × 100); brackets: 95 % bootstrap interval over "
            "samples. Average: mean of the eight tasks, only when all eight ran.")
    table = Table(id="cblue-leaderboard", title="CBLUE leaderboard (percent)",
                  columns=("model", "rows", "split", *(DISPLAY[t] for t in TASK_ORDER), "Avg"),
                  rows=tuple(table_rows), groups=_groups(), note=note)
    section = Section("cblue", "CBLUE leaderboard", [Paragraph(label[0].upper() + label[1:] + "."), table])
    if incomplete:
        section.blocks.append(Paragraph(f"No CBLUE average for {', '.join(incomplete)}: not all eight tasks ran."))
    return section


def reference_frame(rows: Sequence[BoardRow]) -> pd.DataFrame:
    """The reference rows for leaderboard.csv, in its columns and its 0-1 scale (``source`` marks them).

    Task values go to ``<task>:<CBLUE metric>``, the average to ``cblue:average`` — the columns
    our runs' values have there.
    """
    import pandas as pd

    records = []
    for row in rows:
        if row.source != "reference":
            continue
        record: dict[str, object] = {"model": row.name, "run": "", "source": REFERENCE_SOURCE}
        for task in TASK_ORDER:
            value = row.values.get(task)
            record[f"{task}:{HEADLINE[task]}"] = value / 100 if value is not None else None
        average = row.values.get(AVERAGE)
        record[f"{SUITE.name}:{AVERAGE}"] = average / 100 if average is not None else None
        records.append(record)
    return pd.DataFrame(records)


def _section(runs: Sequence[ReportRun], boots: Mapping[str, Mapping[str, TaskBootstrap]], level: float) -> Section:
    return cblue_section(cblue_rows(runs, boots, level), split_label(runs))


def _reference(runs: Sequence[ReportRun], boots: Mapping[str, Mapping[str, TaskBootstrap]],
               level: float) -> pd.DataFrame:
    return reference_frame(cblue_rows(runs, boots, level))


SECTION = register_section(SuiteSection(name=SUITE.name, applies=has_cblue, section=_section,
                                        reference_rows=_reference))
