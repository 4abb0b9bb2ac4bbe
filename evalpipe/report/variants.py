"""The report's robustness section: every score with its spread across prompt variants, shot orders
and shot counts, and whether a ranking of models survives them.

Reads only the run directories: ``variants.json`` (each condition's metrics, the spread along each
axis) and the records of every condition in ``samples.jsonl`` (see :mod:`evalpipe.variants.robustness`).
For each task and each axis a run varied — ``variant``, ``order`` (shot orders), ``shots`` (shot
counts) — it shows, for the task's headline metric:

* **between-level spread** (the prompt's effect): the reference value, mean ± population std over
  the levels, the worst and the best level by name, the spread max − min, and a paired bootstrap
  interval of best − worst (same resampled samples for both levels: an interval that excludes 0
  says the spread is more than sampling noise);
* **within-level uncertainty** (sampling noise), kept apart: each level's value with its own 95 %
  bootstrap interval over samples, recomputed from the level's records by the metric's declared
  aggregation (a level that is the mean of several conditions — variants × shot orders — averages
  their replicates, drawn on the same samples);
* a strip plot: per model a row, one point per level with its interval as a thin line, the mean
  as a black tick and the min–max range shaded;
* **consistency**: the mean share of levels agreeing with a sample's majority prediction, and for
  tasks with a 0/1 per-sample correctness the share of samples correct under some levels only;
* with several models, **rank stability**: models are ranked by the headline metric under each
  level the runs share (rank 1 = best; ties share the best rank); Kendall's τ-b between the
  rankings of every pair of levels (mean and minimum), and per model whether its rank is the same
  under every level. The leaderboard gets a column per task and axis, "rank stable across
  variants?": *yes* when the model's rank is identical under every shared level, else *no* with
  the ranks it takes (in leaderboard.csv 1 or 0).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from evalpipe.metrics.spread import competition_ranks, kendall_tau_b
from evalpipe.report.bootstrap import TaskBootstrap, bootstrap_task, percentile_interval
from evalpipe.report.document import Cell, Paragraph, Plot, Section, Table, fmt, fmt_interval
from evalpipe.report.leaderboard import Column, Entry, Leaderboard, lower_is_better
from evalpipe.report.plots import figure, to_svg
from evalpipe.report.runs import ReportRun, resample_task
from evalpipe.results import TaskSummary
from evalpipe.variants.robustness import AXES, AXIS_LABELS, level_label

__all__ = ["AxisView", "add_rank_stability", "axis_views", "rank_stability", "robustness_section"]

_PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
            "#ccb974", "#64b5cd")
#: the leaderboard column of an axis
STABLE_TITLE = {axis: f"rank stable across {label.removeprefix('prompt ')}?" for axis, label in AXIS_LABELS.items()}

STABLE_NOTE = ("Rank stable across variants / shot orders / shot counts?: models ranked by the task's headline "
               "metric under each level the runs share; yes when the model's rank is the same under every level "
               "(see the robustness section for Kendall's τ-b between levels).")

READING = (
    "How to read this: the reference is the canonical prompt (the number in the leaderboard). Mean ± std and "
    "spread (max − min) are taken over the levels — the prompt variants, shot orders or shot counts the run "
    "evaluated — and measure how much of the score is the prompt. The intervals next to each level are 95 % "
    "bootstrap intervals over samples and measure sampling noise only; when best − worst has an interval that "
    "excludes 0 the prompt's effect is larger than that noise. Agreement is the mean share of levels giving a "
    "sample its majority prediction; flip rate the share of samples right under some levels and wrong under "
    "others."
)


@dataclass(frozen=True)
class LevelValue:
    level: str
    value: float
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class AxisView:
    """One run's task along one axis: the headline metric per level, with intervals."""

    run: str
    task: str
    axis: str
    metric: str
    reference: float | None
    levels: tuple[LevelValue, ...]
    stats: Mapping[str, Any]
    consistency: Mapping[str, float]
    #: best − worst level on the same resampled samples: (diff, low, high)
    best_minus_worst: tuple[float, float | None, float | None] | None = None
    replicates: Mapping[str, np.ndarray] = field(default_factory=dict, repr=False)

    def value(self, level: str) -> float | None:
        return next((lv.value for lv in self.levels if lv.level == level), None)


def _headline(doc: Mapping[str, Any]) -> str | None:
    shown = list(doc.get("metrics") or [])
    primary = doc.get("primary_metric")
    return primary if primary in shown else (shown[0] if shown else None)


def _condition_summary(base: TaskSummary, condition: Mapping[str, Any]) -> TaskSummary:
    if "aggregations" not in condition:
        return base
    return replace(base, aggregations=dict(condition["aggregations"]), no_interval=dict(condition.get("no_interval") or {}))


def _condition_boots(run: ReportRun, task: str, doc: Mapping[str, Any], resamples: int, seed: int,
                     level: float) -> dict[str, TaskBootstrap]:
    """Each condition's bootstrap, all on the same draws (the stream is the task's name)."""
    out = {}
    for cid, condition in (doc.get("conditions") or {}).items():
        records = run.condition_records.get(task, {}).get(cid, [])
        notes: list[str] = []
        sample = resample_task(task, records, condition.get("metrics") or {},
                               _condition_summary(run.task_summary(task), condition), notes)
        out[cid] = bootstrap_task(sample, resamples=resamples, seed=seed, level=level)
    return out


def axis_views(run: ReportRun, task: str, *, resamples: int = 1000, seed: int = 0,
               level: float = 0.95) -> list[AxisView]:
    """The run's task along each axis it varies (empty for a task without prompt conditions)."""
    doc = run.variants.get(task)
    metric = _headline(doc) if doc else None
    if not doc or metric is None:
        return []
    boots = _condition_boots(run, task, doc, resamples, seed, level) if resamples > 0 else {}
    conditions = doc.get("conditions") or {}
    views = []
    for axis, levels in (doc.get("axes") or {}).items():
        by_level = doc.get(f"by_{axis}") or {}
        stats = (doc.get("spread") or {}).get(axis, {}).get(metric)
        if not stats:
            continue
        values, replicates = [], {}
        for lv in levels:
            members = [cid for cid, c in conditions.items() if _level_of(axis, c) == lv]
            arrays = [boots[c].replicates.values.get(metric) for c in members if c in boots]
            interval = None
            if arrays and all(a is not None and a.size for a in arrays):
                count = min(a.size for a in arrays)  # type: ignore[union-attr]
                replicates[lv] = np.mean([a[:count] for a in arrays], axis=0)  # type: ignore[index]
                interval = percentile_interval(replicates[lv], level)
            point = (by_level.get(lv) or {}).get(metric)
            if point is not None:
                values.append(LevelValue(lv, float(point), *(interval or (None, None))))
        worst, best = (stats["max_at"], stats["min_at"]) if lower_is_better(metric) else (stats["min_at"], stats["max_at"])
        difference = None
        if worst in replicates and best in replicates and worst != best:
            diff = replicates[best] - replicates[worst]
            interval = percentile_interval(diff, level)
            point_best = next(v.value for v in values if v.level == best)
            point_worst = next(v.value for v in values if v.level == worst)
            difference = (point_best - point_worst, *(interval or (None, None)))
        views.append(AxisView(run=run.label, task=task, axis=axis, metric=metric,
                              reference=run.metrics.get(task, {}).get(metric), levels=tuple(values),
                              stats=stats, consistency=(doc.get("consistency") or {}).get(axis, {}),
                              best_minus_worst=difference, replicates=replicates))
    return views


def _level_of(axis: str, condition: Mapping[str, Any]) -> str:
    key = {"variant": "variant", "order": "shot_order", "shots": "shots"}[axis]
    return str(condition.get(key))


def _worst_best(view: AxisView) -> tuple[str, str]:
    low, high = view.stats["min_at"], view.stats["max_at"]
    return (high, low) if lower_is_better(view.metric) else (low, high)


# ---- rank stability --------------------------------------------------------------------------

@dataclass(frozen=True)
class RankStability:
    """Models ranked by the headline metric under each shared level of one axis of one task."""

    task: str
    axis: str
    metric: str
    levels: tuple[str, ...]
    #: model → level → rank (1 = best)
    ranks: Mapping[str, Mapping[str, int]]
    #: Kendall's τ-b between the rankings of each pair of levels (None where undefined)
    taus: Mapping[tuple[str, str], float | None]

    @property
    def identical(self) -> bool:
        return all(len(set(by_level.values())) == 1 for by_level in self.ranks.values())

    def stable(self, model: str) -> bool:
        return len(set(self.ranks[model].values())) == 1

    def rank_text(self, model: str) -> str:
        values = sorted(set(self.ranks[model].values()))
        if len(values) == 1:
            return f"yes (rank {values[0]})"
        return f"no (ranks {values[0]}–{values[-1]})"

    @property
    def mean_tau(self) -> float | None:
        defined = [t for t in self.taus.values() if t is not None]
        return float(np.mean(defined)) if defined else None


def rank_stability(views: Sequence[AxisView]) -> RankStability | None:
    """Ranks under the levels every model shares (one task, one axis); None for fewer than two
    models or two shared levels."""
    if len({v.run for v in views}) < 2:
        return None
    shared = [lv.level for lv in views[0].levels if all(v.value(lv.level) is not None for v in views)]
    if len(shared) < 2:
        return None
    metric = views[0].metric
    higher = not lower_is_better(metric)
    ranks: dict[str, dict[str, int]] = {v.run: {} for v in views}
    for level in shared:
        for model, rank in competition_ranks({v.run: float(v.value(level)) for v in views}, higher).items():  # type: ignore[arg-type]
            ranks[model][level] = rank
    taus = {(a, b): kendall_tau_b([ranks[m][a] for m in ranks], [ranks[m][b] for m in ranks])
            for a, b in itertools.combinations(shared, 2)}
    return RankStability(task=views[0].task, axis=views[0].axis, metric=metric, levels=tuple(shared),
                         ranks=ranks, taus=taus)


def _stabilities(views: Mapping[tuple[str, str], Sequence[AxisView]]) -> dict[tuple[str, str], RankStability]:
    out = {}
    for key, group in views.items():
        stability = rank_stability(group)
        if stability is not None:
            out[key] = stability
    return out


def _all_views(runs: Sequence[ReportRun], resamples: int, seed: int, level: float,
               ) -> dict[tuple[str, str], list[AxisView]]:
    """(task, axis) → every run's view of it, in run order."""
    views: dict[tuple[str, str], list[AxisView]] = {}
    for run in runs:
        for task in run.tasks:
            for view in axis_views(run, task, resamples=resamples, seed=seed, level=level):
                views.setdefault((task, view.axis), []).append(view)
    return views


def add_rank_stability(board: Leaderboard, runs: Sequence[ReportRun]) -> Leaderboard:
    """The leaderboard with a "rank stable across …?" column after each task's columns, for every
    axis along which at least two of its models were evaluated under the same levels."""
    stabilities = _stabilities(_all_views(runs, resamples=0, seed=0, level=0.95))
    if not stabilities:
        return board
    columns: list[Column] = []
    entries = dict(board.entries)
    for i, column in enumerate(board.columns):
        columns.append(column)
        last_of_task = column.kind == "task" and (i + 1 == len(board.columns) or board.columns[i + 1].group != column.group)
        if not last_of_task:
            continue
        for axis in AXES:
            stability = stabilities.get((column.group, axis))
            if stability is None:
                continue
            added = Column(column.group, STABLE_TITLE[axis], "stability")
            columns.append(added)
            for model in board.rows:
                if model in stability.ranks:
                    entries[(model, added.key)] = Entry(float(stability.stable(model)), text=stability.rank_text(model))
    return replace(board, columns=tuple(columns), entries=entries, notes=(*board.notes, STABLE_NOTE))


# ---- the section -----------------------------------------------------------------------------

def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def strip_plot(task: str, axis: str, views: Sequence[AxisView]) -> str:
    """Per model a row: each level a point with its 95 % interval (thin line), the mean a black
    tick, the min–max range shaded."""
    levels: list[str] = []
    for view in views:
        levels.extend(lv.level for lv in view.levels if lv.level not in levels)
    fig = figure(figsize=(6.4, 0.9 + 0.55 * len(views) + 0.12 * len(levels)))
    ax = fig.add_subplot()
    offsets = np.linspace(-0.25, 0.25, len(levels)) if len(levels) > 1 else np.zeros(1)
    labelled: set[str] = set()
    for row, view in enumerate(views):
        y = len(views) - 1 - row
        ax.fill_betweenx([y - 0.32, y + 0.32], view.stats["min"], view.stats["max"], color="#dddddd", zorder=0)
        ax.plot([view.stats["mean"]] * 2, [y - 0.34, y + 0.34], color="black", linewidth=1.6, zorder=3)
        for lv in view.levels:
            k = levels.index(lv.level)
            yy = y + offsets[k]
            if lv.low is not None and lv.high is not None:
                ax.plot([lv.low, lv.high], [yy, yy], color=_PALETTE[k % len(_PALETTE)], linewidth=0.8, alpha=0.7)
            ax.scatter([lv.value], [yy], color=_PALETTE[k % len(_PALETTE)], s=22, zorder=4,
                       label=None if lv.level in labelled else level_label(axis, lv.level))
            labelled.add(lv.level)
    ax.set_yticks(range(len(views)), [v.run for v in reversed(views)])
    ax.set_xlabel(f"{views[0].metric} (point: level, line: 95 % interval, tick: mean, band: min–max)")
    ax.set_title(f"{task}: {views[0].metric} across {AXIS_LABELS[axis]}")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return to_svg(fig, f"strip-{_slug(task)}-{axis}")


def _summary_table(task: str, views: Sequence[AxisView]) -> Table:
    rows = []
    for view in views:
        worst, best = _worst_best(view)
        diff = view.best_minus_worst
        stats = view.stats
        widths = [lv.high - lv.low for lv in view.levels if lv.low is not None and lv.high is not None]
        flip = view.consistency.get("flip_rate")
        rows.append((
            Cell(view.run, numeric=False), Cell(AXIS_LABELS[view.axis], numeric=False), Cell(str(len(view.levels))),
            Cell(fmt(view.reference)), Cell(f"{fmt(stats['mean'])} ± {fmt(stats['std'])}"),
            Cell(fmt(stats["max"] if lower_is_better(view.metric) else stats["min"]),
                 sub=level_label(view.axis, worst) if stats["spread"] else "all equal"),
            Cell(fmt(stats["min"] if lower_is_better(view.metric) else stats["max"]),
                 sub=level_label(view.axis, best) if stats["spread"] else "all equal"),
            Cell(fmt(stats["spread"])),
            Cell(fmt(diff[0]) if diff else "–", sub=fmt_interval(diff[1], diff[2]) if diff else ""),
            Cell(fmt(float(np.median(widths))) if widths else "–"),
            Cell(fmt(view.consistency.get("agreement"))), Cell(fmt(flip) if flip is not None else "–"),
        ))
    return Table(
        id=f"robustness-{_slug(task)}", title=f"{task}: {views[0].metric} across prompt conditions",
        columns=("model", "across", "levels", "reference", "mean ± std", "worst", "best", "spread (max − min)",
                 "best − worst [95 % CI]", "median 95 % CI width", "agreement", "flip rate"),
        rows=tuple(rows),
        note="Between levels: mean ± population std, worst, best, spread. Sampling noise: the median width of the "
             "levels' own 95 % bootstrap intervals; best − worst is a paired bootstrap on the same samples.",
    )


def _all_metrics_table(task: str, runs: Sequence[ReportRun]) -> Table | None:
    """Every displayed metric's spread (and the parse-failure rate's, which prompts often move
    most), per model and axis, from variants.json."""
    rows = []
    for run in runs:
        doc = run.variants.get(task) or {}
        for axis in doc.get("axes") or {}:
            for metric, stats in ((doc.get("spread") or {}).get(axis) or {}).items():
                equal = "" if stats["spread"] else "all equal"
                rows.append((
                    Cell(run.label, numeric=False), Cell(AXIS_LABELS.get(axis, axis), numeric=False),
                    Cell(metric, numeric=False), Cell(fmt(run.metrics.get(task, {}).get(metric))),
                    Cell(f"{fmt(stats['mean'])} ± {fmt(stats['std'])}"),
                    Cell(fmt(stats["min"]), sub=equal or level_label(axis, stats["min_at"])),
                    Cell(fmt(stats["max"]), sub=equal or level_label(axis, stats["max_at"])),
                    Cell(fmt(stats["spread"])),
                ))
    if not rows:
        return None
    return Table(id=f"robustness-{_slug(task)}-metrics", title=f"{task}: every metric across prompt conditions",
                 columns=("model", "across", "metric", "reference", "mean ± std", "min", "max", "spread (max − min)"),
                 rows=tuple(rows), note="From variants.json: population std; the level holding the min and max.")


def _levels_table(task: str, axis: str, views: Sequence[AxisView]) -> Table:
    levels: list[str] = []
    for view in views:
        levels.extend(lv.level for lv in view.levels if lv.level not in levels)
    rows = []
    for level in levels:
        cells = [Cell(level_label(axis, level), numeric=False)]
        for view in views:
            lv = next((x for x in view.levels if x.level == level), None)
            worst, best = _worst_best(view)
            note = "" if not view.stats["spread"] else " (worst)" if level == worst else " (best)" if level == best else ""
            cells.append(Cell(fmt(lv.value) + note if lv else "–", sub=fmt_interval(lv.low, lv.high) if lv else ""))
        rows.append(tuple(cells))
    return Table(id=f"robustness-{_slug(task)}-{axis}-levels",
                 title=f"{task}: {views[0].metric} under each of the {AXIS_LABELS[axis]} with its 95 % interval",
                 columns=(AXIS_LABELS[axis], *(v.run for v in views)), rows=tuple(rows),
                 note="Each interval: bootstrap over samples within that level (sampling noise only).")


def _stability_blocks(stability: RankStability) -> list[Table | Paragraph]:
    rows = []
    for model, by_level in stability.ranks.items():
        rows.append((Cell(model, numeric=False), *(Cell(str(by_level[lv])) for lv in stability.levels),
                     Cell(stability.rank_text(model), numeric=False)))
    table = Table(id=f"robustness-{_slug(stability.task)}-{stability.axis}-ranks",
                  title=f"{stability.task}: rank by {stability.metric} under each of the {AXIS_LABELS[stability.axis]}",
                  columns=("model", *(level_label(stability.axis, lv) for lv in stability.levels),
                           STABLE_TITLE[stability.axis]), rows=tuple(rows))
    defined = [t for t in stability.taus.values() if t is not None]
    tau = (f"Kendall's τ-b between the rankings of every pair of levels: mean {stability.mean_tau:.2f}, "
           f"minimum {min(defined):.2f} ({len(defined)} pairs)" if defined else
           "Kendall's τ-b is undefined (a ranking without any order: all models tied)")
    verdict = "identical under every level" if stability.identical else "not the same under every level"
    return [table, Paragraph(f"{stability.task} across {AXIS_LABELS[stability.axis]}: the ranking is {verdict}. {tau}.")]


def robustness_section(runs: Sequence[ReportRun], *, resamples: int = 1000, seed: int = 0,
                       level: float = 0.95) -> Section | None:
    """The robustness section, or None when no run has prompt conditions."""
    views = _all_views(runs, resamples, seed, level)
    if not views:
        return None
    section = Section("robustness", "Robustness across prompt variants, shot orders and shot counts",
                      [Paragraph(READING)])
    stabilities = _stabilities(views)
    tasks = list(dict.fromkeys(task for task, _ in views))
    for task in tasks:
        task_views = [v for (t, _), group in views.items() if t == task for v in group]
        section.blocks.append(_summary_table(task, task_views))
        every = _all_metrics_table(task, runs)
        if every is not None:
            section.blocks.append(every)
        for axis in AXES:
            group = views.get((task, axis))
            if not group:
                continue
            section.blocks.append(Plot(f"plot-robustness-{_slug(task)}-{axis}",
                                       f"{task}: {group[0].metric} across {AXIS_LABELS[axis]}",
                                       strip_plot(task, axis, group)))
            section.blocks.append(_levels_table(task, axis, group))
            if (task, axis) in stabilities:
                section.blocks.extend(_stability_blocks(stabilities[(task, axis)]))
    return section
