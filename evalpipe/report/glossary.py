"""The metric glossary: what each number in the report means, in words, from the run directory alone.

One row per (task, metric) the report shows, with three things a reader needs:

* **definition** — the task's own one-line words (``TaskSpec.metric_definitions``, recorded in
  ``config.json`` as ``metric_definitions``), or, for the metrics every task gets from the runner
  (``n``, ``errors``, ``parse_failure_rate``), :data:`RUNNER_DEFINITIONS`; a metric its task does not
  define says so rather than guessing;
* **over samples** — how the corpus value is made from per-sample parts: the declared aggregation's
  ``describe()`` (``summary.json``), e.g. "micro f1 from tp/fp/fn summed over samples";
* **interval** — the bootstrap method, or why the metric has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evalpipe.report.bootstrap import TaskBootstrap
from evalpipe.report.document import Cell, Section, Table
from evalpipe.report.leaderboard import shown_metrics
from evalpipe.report.runs import RUNNER_METRICS, ReportRun, TaskInfo
from evalpipe.metrics.names import metric_matches

__all__ = ["RUNNER_DEFINITIONS", "definition", "glossary_section"]

#: the runner's own metrics, the same for every task
RUNNER_DEFINITIONS = {
    "n": "the number of evaluated samples",
    "errors": "samples without an answer: the request failed for good (re-running the same command retries them); "
              "they are left out of every metric of the task (coverage says how many were answered)",
    "answered": "samples with an answer (parsable or not): the samples every metric of the task is measured on",
    "coverage": "answered samples over evaluated samples; below 1, the task's metrics describe only the answered "
                "samples (docs/coverage.md)",
    "parse_failure_rate": "share of answered samples whose answer could not be parsed into a prediction "
                          "(errors excluded); such a sample still counts, as a wrong or empty prediction",
}


def definition(info: TaskInfo | None, metric: str) -> str:
    """The one-line definition of ``metric`` (exact name first, then ``*`` patterns), or ""."""
    if metric in RUNNER_DEFINITIONS:
        return RUNNER_DEFINITIONS[metric]
    definitions = info.metric_definitions if info else {}
    if metric in definitions:
        return definitions[metric]
    return next((text for pattern, text in definitions.items() if metric_matches(pattern, metric)), "")


def _metrics(task: str, runs: Sequence[ReportRun], info: TaskInfo | None) -> list[str]:
    present: list[str] = []
    for run in runs:
        present.extend(m for m in run.metrics.get(task, {}) if m not in present)
    shown = shown_metrics(info, [m for m in present if m not in RUNNER_METRICS])
    rest = [m for m in present if m not in shown and m not in RUNNER_METRICS]
    return [*shown, *rest, *[m for m in ("parse_failure_rate", "coverage", "answered", "errors", "n") if m in present]]


def glossary_section(runs: Sequence[ReportRun], boots: Mapping[str, Mapping[str, TaskBootstrap]],
                     infos: Mapping[str, TaskInfo]) -> Section:
    """The glossary table (see the module docstring); the first run that has a task describes it."""
    tasks: list[str] = []
    for run in runs:
        tasks.extend(t for t in run.tasks if t not in tasks)
    rows = []
    for task in tasks:
        info = infos.get(task)
        owner = next(r for r in runs if task in r.tasks)
        resample = owner.resample.get(task)
        boot = boots.get(owner.label, {}).get(task)
        for metric in _metrics(task, runs, info):
            aggregation = resample.aggregations.get(metric) if resample else None
            ci = boot.intervals.get(metric) if boot else None
            if ci is not None and ci.available:
                interval = f"95 % bootstrap ({ci.method}, {ci.resamples} resamples)"
            else:
                interval = "none: " + (ci.reason if ci is not None and ci.reason else
                                       (resample.no_interval.get(metric, "") if resample else "") or "no aggregation")
            words = definition(info, metric) or "(the task gives no definition; see its documentation)"
            rows.append((Cell(task, numeric=False), Cell(metric, numeric=False), Cell(words, numeric=False),
                         Cell(aggregation.describe() if aggregation else "not an aggregate of samples", numeric=False),
                         Cell(interval, numeric=False)))
    table = Table(id="glossary", title="What each metric means", rows=tuple(rows),
                  columns=("task", "metric", "definition", "over samples", "interval"),
                  note="Definitions are the tasks' own words recorded in config.json; 'over samples' is the "
                       "aggregation each metric was declared with in summary.json — what the bootstrap recomputes.")
    return Section("glossary", "Metric glossary", [table])
