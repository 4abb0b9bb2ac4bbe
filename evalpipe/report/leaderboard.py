"""The leaderboard: models × (task, metric) with intervals, suite aggregates and suite averages.

Layout follows the result tables of the CLUE paper: one row per model, one column group per
dataset holding its metrics, and after the member datasets of a suite its aggregate (the CLUE
level score, whatever metrics the suite's ``aggregate`` returns). The best value of each column
is marked (bold); "best" is the highest value, or the lowest for metrics where lower is better
(:data:`LOWER_IS_BETTER`), and ties are all marked. Nothing is marked with a single model.

Which metrics a task shows: those in ``TaskInfo.metrics`` (its display order) that the runs
have — a declared name may be a pattern with ``*`` (``bertscore[*]_f1``) — followed by any
``family[settings]_f1`` metric (BERTScore, UMLS-concept F1: keys that name their settings and so
cannot be declared literally); for a task no longer registered, every metric except the
bookkeeping ones.

Coverage: a task that some run did not answer in full (failed requests, evalpipe.coverage) gets a
``coverage`` column after its metrics — ``answered/evaluated`` per run, its share in leaderboard.csv —
since its metrics are measured on the answered samples only. A metric not computed (no answered
sample) reads "not computed", with the reason on hover, never a number.

Suite averages: for each suite the runs recorded (:mod:`evalpipe.report.suites`) *without* an
aggregate of its own (a suite with one, like a CLUE level, is summarised by that aggregate) and with at least two member tasks, the
unweighted mean of each member's *primary* metric (the task's ``primary_metric`` when a task declares one; else
``f1`` if the task has it, else the first of its leaderboard metrics containing ``f1``, else its
first leaderboard metric). A model gets an average only if it ran every member. Intervals for averages
and aggregates come from the same resamples: replicate ``b`` of each member task is combined
exactly as the point values are (members are independent samples, so this is the bootstrap of
the combined score).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np
import pandas as pd

from evalpipe.report.bootstrap import TaskBootstrap, percentile_interval
from evalpipe.report.document import Cell, Table, fmt, fmt_interval
from evalpipe.report.runs import RUNNER_METRICS, ReportRun, TaskInfo
from evalpipe.report.suites import NO_SUITES_RECORDED, PREDATES_DECLARATIONS
from evalpipe.metrics.names import metric_matches

__all__ = ["BOOKKEEPING", "LOWER_IS_BETTER", "Column", "Entry", "Leaderboard", "build_leaderboard",
           "primary_metric", "shown_metrics"]

#: metrics the runner adds; they belong to the operations table, not the leaderboard
BOOKKEEPING = RUNNER_METRICS
#: metric names (exact, or as a ``_``-separated suffix) for which a lower value is better
LOWER_IS_BETTER = frozenset({"errors", "parse_failure_rate", "wer", "cer", "ter", "mae", "mse", "rmse",
                             "loss", "perplexity", "fp", "fn", "ece", "brier"})


class Suite(Protocol):
    """What the leaderboard reads of a suite (:class:`evalpipe.report.suites.ReportSuite`)."""

    @property
    def tasks(self) -> tuple[str, ...]: ...

    @property
    def aggregate(self) -> Any: ...


def _has_aggregate(suite: Suite) -> bool:
    """A suite summarised by its own aggregate (recorded so, even where its function is not at hand)."""
    return bool(getattr(suite, "has_aggregate", False)) or suite.aggregate is not None


def lower_is_better(metric: str) -> bool:
    return metric in LOWER_IS_BETTER or metric.rsplit("_", 1)[-1] in LOWER_IS_BETTER


@dataclass(frozen=True)
class Column:
    group: str
    metric: str
    #: ``task``, ``aggregate`` (a suite's own score), ``average`` (mean of primary metrics),
    #: ``stability`` (a yes/no verdict, e.g. evalpipe.report.variants' "rank stable across variants?"),
    #: ``coverage`` (a task's answered share, shown when below 100 % for some run) or
    #: ``flag`` (true/false in leaderboard.csv, without interval columns: evalpipe.report.ties)
    kind: str

    @property
    def key(self) -> str:
        return f"{self.group}:{self.metric}"


@dataclass(frozen=True)
class Entry:
    value: float | None
    low: float | None = None
    high: float | None = None
    #: shown instead of the value (leaderboard.csv keeps the value)
    text: str | None = None
    #: why a value has no interval (shown as "no interval" with this reason, never as a bare number)
    reason: str = ""


@dataclass(frozen=True)
class Leaderboard:
    rows: tuple[str, ...]
    runs: tuple[str, ...]
    columns: tuple[Column, ...]
    entries: Mapping[tuple[str, str], Entry]
    #: what added columns mean, appended to the table's note
    notes: tuple[str, ...] = ()

    def entry(self, row: str, column: Column) -> Entry:
        return self.entries.get((row, column.key), Entry(None))

    def best(self, column: Column) -> set[str]:
        """Rows holding the best value of ``column`` (empty with fewer than two values, and for a verdict)."""
        if column.kind in ("stability", "coverage", "flag"):
            return set()
        values = {r: self.entry(r, column).value for r in self.rows}
        present = {r: v for r, v in values.items() if v is not None and v == v}
        if len(present) < 2:
            return set()
        target = (min if lower_is_better(column.metric) else max)(present.values())
        return {r for r, v in present.items() if abs(v - target) <= 1e-12}

    def to_frame(self) -> pd.DataFrame:
        """Wide: one row per model; ``source`` = ``run`` (a report may add published reference rows
        with another source); ``group:metric``, ``…:ci_low``, ``…:ci_high`` per column (a coverage
        column has its value only)."""
        records = []
        for row, run in zip(self.rows, self.runs):
            record: dict[str, object] = {"model": row, "run": run, "source": "run"}
            for column in self.columns:
                e = self.entry(row, column)
                if column.kind == "flag":
                    record[column.key] = None if e.value is None else ("true" if e.value else "false")
                    continue
                record[column.key] = e.value
                if column.kind == "coverage":  # a share fixed by the run: no interval columns
                    continue
                record[f"{column.key}:ci_low"] = e.low
                record[f"{column.key}:ci_high"] = e.high
            records.append(record)
        return pd.DataFrame(records)

    def to_table(self, table_id: str = "leaderboard") -> Table:
        groups: list[tuple[str, int]] = [("", 1)]
        for column in self.columns:
            label = column.group if column.kind != "average" else f"{column.group} (average)"
            if groups[-1][0] == label and len(groups) > 1:
                groups[-1] = (label, groups[-1][1] + 1)
            else:
                groups.append((label, 1))
        best = {c.key: self.best(c) for c in self.columns}
        rows = []
        for row in self.rows:
            cells = [Cell(row, numeric=False)]
            for column in self.columns:
                e = self.entry(row, column)
                interval = fmt_interval(e.low, e.high)
                missing = e.value is not None and e.text is None and not interval
                cells.append(Cell(e.text if e.text is not None else fmt(e.value), bold=row in best[column.key],
                                  sub="no interval" if missing else interval,
                                  title=(e.reason or "no interval could be computed") if missing else
                                  (e.reason if e.text is not None else "")))
            rows.append(tuple(cells))
        return Table(
            id=table_id, title="Leaderboard", columns=("model", *(c.metric for c in self.columns)),
            rows=tuple(rows), groups=tuple(groups),
            note=" ".join(("Bold: best in column. Brackets: 95 % bootstrap interval over samples; a value without "
                           "one says \"no interval\" (the reason shows on hover, and in the task's section).",
                           *self.notes)),
        )


def primary_metric(spec: TaskInfo | None, present: Sequence[str]) -> str | None:
    """The metric that stands for a task in a suite average (see the module docstring)."""
    declared = getattr(spec, "primary_metric", None)
    if declared and declared in present:
        return cast("str | None", declared)
    order = shown_metrics(spec, present)
    if "f1" in order:
        return "f1"
    return next((m for m in order if "f1" in m), order[0] if order else None)


_TAGGED_F1 = re.compile(r".+\[.*\]_f1")


def shown_metrics(spec: TaskInfo | None, present: Sequence[str]) -> list[str]:
    """The task's leaderboard metrics, in its display order (see the module docstring)."""
    shown: list[str] = []
    for declared in (spec.metrics if spec else ()):
        shown.extend(m for m in present if metric_matches(declared, m) and m not in shown)
    if not shown:
        return [m for m in present if m not in BOOKKEEPING]
    # metrics whose key carries the settings that produced them (``bertscore[<encoder>]_f1``) cannot
    # be declared by name; their F1 is shown when the spec does not name them by pattern
    shown.extend(m for m in present if _TAGGED_F1.fullmatch(m) and m not in shown)
    return shown


def _present(runs: Sequence[ReportRun], task: str) -> list[str]:
    names: list[str] = []
    for run in runs:
        for metric in run.metrics.get(task, {}):
            if metric not in names:
                names.append(metric)
    return names


def _common(arrays: Sequence[np.ndarray]) -> int:
    return min((a.size for a in arrays), default=0)


def _aggregate_replicates(suite: Suite, run: ReportRun, boots: Mapping[str, TaskBootstrap],
                          ) -> dict[str, np.ndarray] | None:
    """The suite aggregate recomputed on replicate b of every member, for each b."""
    members = [t for t in suite.tasks if t in run.tasks]
    aggregate = _run_aggregate(suite, run)
    if aggregate is None or not members or any(t not in boots for t in members):
        return None
    arrays = [a for t in members for a in boots[t].replicates.values.values() if a.size]
    count = _common(arrays)
    if count == 0:
        return None
    out: dict[str, list[float]] = {}
    for b in range(count):
        by_task = {t: {**run.metrics.get(t, {}),
                       **{m: float(v[b]) for m, v in boots[t].replicates.values.items() if v.size}}
                   for t in members}
        try:
            values = aggregate(by_task)
        except (KeyError, TypeError, ValueError, ZeroDivisionError):  # IncompleteSuite is a ValueError
            return None
        for metric, value in values.items():
            out.setdefault(metric, []).append(float(value))
    return {m: np.array(v) for m, v in out.items()}


def _run_aggregate(suite: Suite, run: ReportRun) -> Any:
    """The aggregate recomputed for ``run``: the declaration its own config.json records (a recorded
    :class:`~evalpipe.report.suites.ReportSuite`), or the aggregate of a suite given directly."""
    aggregate_for = getattr(suite, "aggregate_for", None)
    return aggregate_for(run) if aggregate_for is not None else suite.aggregate


def _no_aggregate_interval(suite: Suite | None, run: ReportRun) -> str:
    """Why an aggregate has no interval: the run predates declared aggregates (the report never asks
    the task registry for a formula), or its declaration could not be evaluated on the resamples."""
    undeclared = getattr(suite, "undeclared", None)
    if (suite is None or undeclared is not None) and "suites" not in run.config:
        return NO_SUITES_RECORDED
    if undeclared and run.label in undeclared:
        return str(undeclared[run.label])
    return "the suite aggregate could not be recomputed on resamples of its member tasks"


def _partly_answered(run: ReportRun, task: str) -> bool:
    values = run.metrics.get(task, {})
    coverage = values.get("coverage")
    return task in run.tasks and (isinstance(coverage, (int, float)) and coverage < 1
                                  or coverage is None and bool(values.get("errors")))


def _coverage_entry(run: ReportRun, task: str) -> Entry:
    """``answered/evaluated`` (its share in leaderboard.csv); a run written before coverage was
    recorded shows it from ``n`` and ``errors``."""
    values = run.metrics.get(task, {})
    n, errors = values.get("n"), values.get("errors")
    if not isinstance(n, (int, float)) or task not in run.tasks:
        return Entry(None)
    answered = values.get("answered")
    answered = answered if isinstance(answered, (int, float)) else n - (errors or 0)
    share = answered / n if n else None
    return Entry(share, text=f"{int(answered)}/{int(n)}",
                 reason="answered samples over evaluated samples: the task's metrics are measured on the "
                        "answered ones only (docs/coverage.md)")


def build_leaderboard(runs: Sequence[ReportRun], boots: Mapping[str, Mapping[str, TaskBootstrap]],
                      suites: Mapping[str, Suite], specs: Mapping[str, TaskInfo],
                      level: float = 0.95) -> Leaderboard:
    """``boots``: run label → task → bootstrap; ``specs``: task → spec for registered tasks."""
    tasks: list[str] = []
    for run in runs:
        tasks.extend(t for t in run.tasks if t not in tasks)
    aggregate_names: list[str] = []
    for run in runs:
        aggregate_names.extend(s for s in run.aggregates if s not in aggregate_names)
    average_names = [
        name for name, suite in suites.items()
        if not _has_aggregate(suite) and len(suite.tasks) >= 2
        and any(all(t in run.tasks for t in suite.tasks) for run in runs)
    ]
    primaries = {t: primary_metric(specs.get(t), _present(runs, t)) for t in tasks}

    columns: list[Column] = []
    placed: set[str] = set()

    def place(task: str) -> None:
        if task in placed or task not in tasks:
            return
        placed.add(task)
        columns.extend(Column(task, m, "task") for m in shown_metrics(specs.get(task), _present(runs, task)))
        if any(_partly_answered(run, task) for run in runs):
            columns.append(Column(task, "coverage", "coverage"))

    for name in [*aggregate_names, *[n for n in average_names if n not in aggregate_names]]:
        suite = suites.get(name)
        for task in (suite.tasks if suite else ()):
            place(task)
        if name in aggregate_names:
            columns.extend(Column(name, m, "aggregate") for m in _present(runs, name))
        if name in average_names:
            metric = "/".join(dict.fromkeys(str(primaries[t]) for t in suites[name].tasks))
            columns.append(Column(name, metric, "average"))
    for task in tasks:
        place(task)

    entries: dict[tuple[str, str], Entry] = {}
    for run in runs:
        run_boots = boots.get(run.label, {})
        suite_reps: dict[str, dict[str, np.ndarray] | None] = {}  # one pass over the resamples per suite, not per aggregate column
        for column in columns:
            if column.kind == "coverage":
                entries[(run.label, column.key)] = _coverage_entry(run, column.group)
            elif column.kind == "task":
                value = run.metrics.get(column.group, {}).get(column.metric)
                interval = run_boots.get(column.group)
                ci = interval.intervals.get(column.metric) if interval else None
                why = (ci.reason if ci is not None else "no bootstrap for this task") or ""
                if value is not None:
                    entries[(run.label, column.key)] = Entry(value, ci.low if ci else None, ci.high if ci else None,
                                                             reason=why)
                elif column.metric in run.metrics.get(column.group, {}):  # null: not computed
                    not_computed = run.task_summary(column.group).not_computed.get(column.metric)
                    entries[(run.label, column.key)] = Entry(None, text="not computed", reason=not_computed or why)
                else:
                    entries[(run.label, column.key)] = Entry(None)
            elif column.kind == "aggregate":
                value = run.metrics.get(column.group, {}).get(column.metric)
                if column.group in suites and column.group not in suite_reps:
                    suite_reps[column.group] = _aggregate_replicates(suites[column.group], run, run_boots)
                reps = suite_reps.get(column.group)
                bounds = percentile_interval(reps[column.metric], level) if reps and column.metric in reps else None
                low, high = bounds or (None, None)
                entries[(run.label, column.key)] = Entry(value, low, high, reason="" if bounds else (
                    _no_aggregate_interval(suites.get(column.group), run)))
            else:
                members = suites[column.group].tasks
                if not all(t in run.tasks for t in members):
                    continue
                # a member without a primary metric, or without its value, leaves the average out
                primary = {t: p for t in members if (p := primaries[t]) is not None}
                values = [v for t in primary if (v := run.metrics.get(t, {}).get(primary[t])) is not None]
                if len(values) < len(members):
                    continue
                arrays = [run_boots[t].replicates.values.get(primary[t]) if t in run_boots else None for t in members]
                found = [a for a in arrays if a is not None and a.size]
                bounds = None
                if len(found) == len(arrays):
                    count = _common(found)
                    bounds = percentile_interval(np.mean([a[:count] for a in found], axis=0), level)
                low, high = bounds or (None, None)
                entries[(run.label, column.key)] = Entry(float(np.mean(values)), low, high, reason="" if bounds else (
                    "a member task's primary metric has no resamples"))
    notes: tuple[str, ...] = ("coverage: answered/evaluated samples of a task some run did not answer in full; its metrics are "
             "measured on the answered samples only (docs/coverage.md).",) if any(c.kind == "coverage" for c in columns) else ()
    if any(e.reason in (NO_SUITES_RECORDED, PREDATES_DECLARATIONS) for e in entries.values()):  # old run directories
        notes += ("A suite aggregate without an interval comes from a run that predates declared suite aggregates: "
                  "its value is the run's own, and the report does not guess its formula.",)
    return Leaderboard(rows=tuple(r.label for r in runs), runs=tuple(r.path.name for r in runs),
                       columns=tuple(columns), entries=entries, notes=notes)
