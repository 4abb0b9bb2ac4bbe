"""Models tied with the best: which models of a leaderboard are really different from the top one.

For each task, on its **primary metric** (:func:`evalpipe.report.leaderboard.primary_metric`):

1. **The best** is the model with the highest value (the lowest for a lower-is-better metric; the
   first in report order among equal values), over its own samples.
2. **Each other model is compared with the best on their shared samples** (same sample ids): both
   are restricted to them, their metric recomputed from the parts by its declared aggregation, and
   the difference ``d = m_best − m_model`` is resampled by the paired bootstrap
   (:func:`evalpipe.report.bootstrap.paired_bootstrap`: the same resampled positions for both).
   Its two-sided p-value is the share of resampled differences on the far side of 0, doubled, with
   the +1 correction: ``p = min(1, 2 (min(#{d* ≤ 0}, #{d* ≥ 0}) + 1) / (B + 1))`` (so the smallest
   p that ``B`` resamples can give is ``2 / (B + 1)``).
3. **Holm's step-down correction** over the task's ``m`` comparisons (Holm 1979): with the p-values
   sorted ``p_(1) ≤ … ≤ p_(m)``, ``p̃_(i) = max_{j ≤ i} min(1, (m − j + 1) p_(j))``. It controls the
   family-wise error rate at α without assuming the comparisons are independent (they are not:
   each involves the best).
4. **Tied with the best** = the best itself, and every model whose Holm-adjusted p ≥ α = 0.05 (the
   test could not tell it from the best). Not rejecting is not proof of equality: a small task
   ties many models. A model without a value of the metric (no answered sample: *not computed*),
   without a declared aggregation, or with no sample shared with the best is **not tied and not
   compared**, with the reason shown.

**McNemar's exact test** as a cross-check where the metric is the mean of a 0/1 per-sample score
(accuracy): on the shared samples, ``b`` = right for the best and wrong for the model, ``c`` =
the reverse; ``p = `` two-sided exact binomial test of ``b`` successes in ``b + c`` trials at 1/2
(``scipy.stats.binomtest``; 1 when ``b + c = 0``), Holm-corrected the same way. It is shown beside
the bootstrap's verdict, which is the one the leaderboard uses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from evalpipe.metrics.aggregation import Aggregation, Mean
from evalpipe.report.bootstrap import ResampleTask, paired_bootstrap, restrict
from evalpipe.report.document import Cell, Paragraph, Section, Table, fmt, fmt_interval
from evalpipe.report.leaderboard import Column, Entry, Leaderboard, lower_is_better, primary_metric
from evalpipe.report.runs import ReportRun, TaskInfo

__all__ = ["ALPHA", "Comparison", "TaskTies", "add_ties", "holm", "mcnemar_exact", "ties_section", "tied_with_best"]

#: the family-wise error rate of the comparisons with the best
ALPHA = 0.05
#: the leaderboard column's metric suffix: ``<task>:<metric>:tied_with_best``
SUFFIX = "tied_with_best"


@dataclass(frozen=True)
class Comparison:
    """One model against the best on one task's primary metric."""

    model: str
    value: float | None
    tied: bool
    #: best − model on the shared samples, with its paired bootstrap interval
    diff: float | None = None
    low: float | None = None
    high: float | None = None
    p_value: float | None = None
    p_holm: float | None = None
    mcnemar_p: float | None = None
    mcnemar_holm: float | None = None
    #: discordant pairs (best right / model wrong, the reverse)
    discordant: tuple[int, int] | None = None
    shared: int = 0
    #: why the model is not compared (or that it is the best)
    reason: str = ""


@dataclass(frozen=True)
class TaskTies:
    task: str
    metric: str
    best: str
    lower_is_better: bool
    comparisons: tuple[Comparison, ...]
    resamples: int

    def of(self, model: str) -> Comparison | None:
        return next((c for c in self.comparisons if c.model == model), None)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order (module docstring)."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts (1 when there are none)."""
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(b, b + c, 0.5).pvalue)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _only(task: ResampleTask, metric: str, aggregation: Aggregation, value: float) -> ResampleTask:
    """The task with only ``metric`` (what the comparison resamples: nothing else is recomputed)."""
    return replace(task, aggregations={metric: aggregation}, corpus={metric: value}, no_interval={})


def _binary(task: ResampleTask, aggregation: Aggregation) -> np.ndarray | None:
    """The per-sample 0/1 scores when the metric is their plain mean, else None."""
    if not isinstance(aggregation, Mean) or aggregation.key not in task.keys:
        return None
    column = task.parts[:, task.keys.index(aggregation.key)]
    return column if np.isin(column, (0.0, 1.0)).all() else None


def _compare(best: ResampleTask, other: ResampleTask, metric: str, aggregation: Aggregation, *,
             resamples: int, seed: int) -> tuple[Comparison, bool]:
    positions = {sid: i for i, sid in enumerate(other.ids)}
    shared = [(i, positions[sid]) for i, sid in enumerate(best.ids) if sid in positions]
    if not shared:
        return Comparison(other.name, None, False, reason="no sample shared with the best"), False
    a = restrict(best, [i for i, _ in shared])
    b = restrict(other, [j for _, j in shared])
    diffs = [d for d in paired_bootstrap(a, b, resamples=resamples, seed=seed) if d.metric == metric]
    if not diffs or diffs[0].p_value is None:
        why = diffs[0].reason if diffs else "the metric cannot be recomputed on the shared samples"
        return Comparison(other.name, None, False, shared=len(shared), reason=why or "no resamples"), False
    d = diffs[0]
    mcnemar = None
    xa, xb = _binary(a, aggregation), _binary(b, aggregation)
    if xa is not None and xb is not None:
        mcnemar = (int(np.sum((xa == 1) & (xb == 0))), int(np.sum((xa == 0) & (xb == 1))))
    return Comparison(other.name, None, False, diff=d.diff, low=d.low, high=d.high, p_value=d.p_value,
                      discordant=mcnemar, mcnemar_p=mcnemar_exact(*mcnemar) if mcnemar else None,
                      shared=len(shared)), True


def task_ties(task: str, runs: Sequence[ReportRun], spec: TaskInfo | None, *, resamples: int = 1000,
              seed: int = 0, alpha: float = ALPHA) -> TaskTies | None:
    """The tied group of one task (module docstring); None when fewer than two models ran it."""
    having = [r for r in runs if task in r.tasks]
    if len(having) < 2:
        return None
    present: list[str] = []
    for run in having:
        present.extend(m for m in run.metrics.get(task, {}) if m not in present)
    metric = primary_metric(spec, present)
    if metric is None:
        return None
    lower = lower_is_better(metric)
    values = {r.label: _number(r.metrics.get(task, {}).get(metric)) for r in having}
    why_not: dict[str, str] = {}
    usable: dict[str, tuple[ResampleTask, Aggregation, float]] = {}
    for run in having:
        value, sample = values[run.label], run.resample.get(task)
        aggregation = sample.aggregations.get(metric) if sample is not None else None
        if value is None:
            why_not[run.label] = f"{metric} not computed (no value), so not compared"
        elif sample is None or aggregation is None:
            why_not[run.label] = f"{metric} has no declared aggregation in this run, so it cannot be resampled"
        else:
            usable[run.label] = (replace(sample, name=task), aggregation, value)
    if not usable:
        return TaskTies(task, metric, "", lower, tuple(Comparison(r.label, values[r.label], False,
                                                                  reason=why_not.get(r.label, "")) for r in having),
                        resamples)
    target = (min if lower else max)(v for _, _, v in usable.values())
    best = next(label for label in usable if usable[label][2] == target)
    best_task, best_agg, best_value = usable[best]
    found: dict[str, Comparison] = {}
    tested: list[str] = []
    for label, (sample, aggregation, value) in usable.items():
        if label == best:
            continue
        comparison, ok = _compare(_only(best_task, metric, best_agg, best_value), _only(sample, metric, aggregation, value),
                                  metric, aggregation, resamples=resamples, seed=seed)
        found[label] = replace(comparison, model=label, value=value)
        if ok:
            tested.append(label)
    adjusted = holm([found[m].p_value or 1.0 for m in tested])
    with_mcnemar = [m for m in tested if found[m].mcnemar_p is not None]
    adjusted_mcnemar = holm([found[m].mcnemar_p or 1.0 for m in with_mcnemar])
    for label, p in zip(tested, adjusted):
        found[label] = replace(found[label], p_holm=p, tied=p >= alpha)
    for label, p in zip(with_mcnemar, adjusted_mcnemar):
        found[label] = replace(found[label], mcnemar_holm=p)
    comparisons = []
    for run in having:
        label = run.label
        if label == best:
            comparisons.append(Comparison(label, best_value, True, reason="the best"))
        elif label in found:
            comparisons.append(found[label])
        else:
            comparisons.append(Comparison(label, values[label], False, reason=why_not.get(label, "")))
    return TaskTies(task, metric, best, lower, tuple(comparisons), resamples)


def tied_with_best(runs: Sequence[ReportRun], specs: Mapping[str, TaskInfo], *, resamples: int = 1000, seed: int = 0,
                   alpha: float = ALPHA) -> dict[str, TaskTies]:
    """Task → its tied group, for every task at least two runs evaluated."""
    tasks: list[str] = []
    for run in runs:
        tasks.extend(t for t in run.tasks if t not in tasks)
    out = {}
    for task in tasks:
        ties = task_ties(task, runs, specs.get(task), resamples=resamples, seed=seed, alpha=alpha)
        if ties is not None:
            out[task] = ties
    return out


def _verdict(c: Comparison) -> str:
    if c.reason == "the best":
        return "best"
    if c.tied:
        return "tied"
    return "not tied" if c.p_holm is not None else "not compared"


def add_ties(board: Leaderboard, ties: Mapping[str, TaskTies]) -> Leaderboard:
    """The leaderboard with a ``<task>:<metric>:tied_with_best`` column after each task's primary
    metric (kind ``flag``: true/false in leaderboard.csv; "best", "tied", "not tied", "not compared"
    in the table, the reason on hover)."""
    if not ties:
        return board
    columns: list[Column] = []
    entries = dict(board.entries)
    for column in board.columns:
        columns.append(column)
        found = ties.get(column.group)
        if column.kind != "task" or found is None or column.metric != found.metric:
            continue
        added = Column(column.group, f"{found.metric}:{SUFFIX}", "flag")
        columns.append(added)
        for c in found.comparisons:
            title = c.reason if c.reason and c.reason != "the best" else (
                f"Holm-adjusted p = {fmt(c.p_holm)} (paired bootstrap, {found.best} − this model)"
                if c.p_holm is not None else "")
            entries[(c.model, added.key)] = Entry(float(c.tied), text=_verdict(c), reason=title)
    note = (f"tied_with_best: the model with the best primary metric, and every model a paired bootstrap on shared "
            f"samples could not tell from it (Holm-adjusted p ≥ {ALPHA}); see the section \"Models tied with the best\".")
    return replace(board, columns=tuple(columns), entries=entries, notes=(*board.notes, note))


def _p(p: float | None) -> str:
    if p is None:
        return "–"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def ties_section(ties: Mapping[str, TaskTies]) -> Section | None:
    """The "Models tied with the best" section, or None when no task has two models."""
    if not ties:
        return None
    section = Section("ties", "Models tied with the best", [Paragraph(
        "Per task, on its primary metric: each model against the best on their shared samples by a paired "
        "bootstrap of the difference (best − model; the metric recomputed from the samples' parts on every "
        "resample); two-sided p = min(1, 2 (min(#d*≤0, #d*≥0) + 1) / (B + 1)); Holm-corrected over the task's "
        f"comparisons; tied = Holm-adjusted p ≥ {ALPHA}. McNemar's exact test on the discordant pairs is a "
        "cross-check for 0/1 metrics. Not rejecting is not proof of equality; a model without a value is not "
        "compared.")])
    for task, found in ties.items():
        rows = []
        for c in found.comparisons:
            rows.append((
                Cell(c.model, numeric=False, bold=c.tied), Cell(fmt(c.value)), Cell(_verdict(c), numeric=False, bold=c.tied),
                Cell(str(c.shared) if c.shared else "–"), Cell("–" if c.diff is None else f"{c.diff:+.4g}"),
                Cell(fmt_interval(c.low, c.high) or "–"), Cell(_p(c.p_value)), Cell(_p(c.p_holm)),
                Cell("–" if c.discordant is None else f"{c.discordant[0]} / {c.discordant[1]}"),
                Cell(_p(c.mcnemar_p)), Cell(_p(c.mcnemar_holm)), Cell(c.reason if c.reason != "the best" else "",
                                                                     numeric=False),
            ))
        direction = "lowest" if found.lower_is_better else "highest"
        section.blocks.append(Table(
            id=f"ties-{task}", title=f"{task}: {found.metric} — best {found.best or '(none)'} ({direction})",
            columns=("model", found.metric, "verdict", "shared", "best − model", "95 % CI", "p", "p (Holm)",
                     "discordant b / c", "McNemar p", "McNemar p (Holm)", "note"),
            rows=tuple(rows), note=f"Paired bootstrap, {found.resamples} resamples. Bold: the tied group."))
    return section
