"""The few sentences at the top of the report: which model is best where, and which differences hold up.

Per task, the task's primary metric (:func:`evalpipe.report.leaderboard.primary_metric`) ranks the
models (highest first, lowest first for a lower-is-better metric). Whether the best model is really
better than the next one is said in one of two ways, and the sentence says which:

* **paired comparison** — exactly two runs that share samples of the task: the paired bootstrap of
  :mod:`evalpipe.report.compare` (both runs on the same resampled samples). A difference is called
  significant when its two-sided p < 0.05 (equivalently, its 95 % interval excludes 0).
* **non-overlapping intervals** — otherwise (one run, three or more, or no shared samples): the best
  model's 95 % interval does not overlap the runner-up's. That check is conservative (two intervals
  can overlap while the difference is significant), so overlapping intervals are reported as "not
  shown to differ", never as "equal".

First of all, when a run did not answer every sample of a task (evalpipe.coverage), a sentence per
run says how many were answered — the numbers that follow are measured on those only — and which
tasks got no answer at all (no metric computed). Then: the other metrics a paired comparison finds significant, and each run-task whose
parse-failure rate is above :data:`evalpipe.terminal.HIGH_PARSE_FAILURE` (its metrics then measure
answer format as much as the task). Nothing here computes a new number: values are the runs' own,
intervals the report's bootstrap, differences the comparison's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evalpipe.report.bootstrap import PairedDifference, TaskBootstrap
from evalpipe.report.compare import CompareResult
from evalpipe.report.document import Paragraph, Section, fmt, fmt_interval
from evalpipe.report.leaderboard import BOOKKEEPING, lower_is_better, primary_metric, shown_metrics
from evalpipe.report.operations import TaskOperations
from evalpipe.report.runs import ReportRun, TaskInfo
from evalpipe.terminal import HIGH_PARSE_FAILURE, task_coverage

__all__ = ["SIGNIFICANCE", "summary_section", "summary_sentences"]

#: two-sided p below which a paired difference is called significant
SIGNIFICANCE = 0.05


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _value(run: ReportRun, task: str, metric: str, boots: Mapping[str, Mapping[str, TaskBootstrap]]) -> str:
    value = run.metrics.get(task, {}).get(metric)
    boot = boots.get(run.label, {}).get(task)
    ci = boot.intervals.get(metric) if boot else None
    interval = fmt_interval(ci.low, ci.high) if ci is not None and ci.available else "(no interval)"
    return f"{run.label} {fmt(value)} {interval}"


def _interval(run: ReportRun, task: str, metric: str,
              boots: Mapping[str, Mapping[str, TaskBootstrap]]) -> tuple[float, float] | None:
    boot = boots.get(run.label, {}).get(task)
    ci = boot.intervals.get(metric) if boot else None
    return (ci.low, ci.high) if ci is not None and ci.available else None  # type: ignore[return-value]


def _paired(compare: CompareResult | None, task: str, metric: str) -> tuple[PairedDifference, int] | None:
    """The paired difference of ``metric`` on ``task`` and the number of shared samples, if compared."""
    if compare is None:
        return None
    for t in compare.tasks:
        if t.task == task and t.shared:
            found = next((d for d in t.differences if d.metric == metric), None)
            return (found, t.shared) if found is not None else None
    return None


def _size(diff: float) -> str:
    return f"{abs(diff):.3f}" if abs(diff) < 1 or not float(diff).is_integer() else f"{abs(int(diff))}"


def _paired_sentence(head: str, d: PairedDifference, shared: int, best: str, second: str) -> str:
    how = f"paired bootstrap on the {shared} shared samples"
    if d.p_value is None or d.low is None:
        return f"{head}: {best} and {second} cannot be compared ({d.reason or 'no paired interval'})."
    ci = f"95 % CI of A − B {fmt_interval(d.low, d.high)}"
    if d.diff == 0:
        return f"{head}: {best} and {second} score the same on the shared samples ({how}, p = {_p(d.p_value)})."
    if d.p_value < SIGNIFICANCE:
        return (f"{head}: {best} is better than {second} — a significant difference of {_size(d.diff)} "
                f"({ci}, {how}, p = {_p(d.p_value)}).")
    return (f"{head}: {best} is not shown to be better than {second} — the difference of {_size(d.diff)} is not "
            f"significant ({ci}, {how}, p = {_p(d.p_value)}).")


def _ranked(task: str, metric: str, runs: Sequence[ReportRun]) -> list[ReportRun]:
    having = [r for r in runs if isinstance(r.metrics.get(task, {}).get(metric), (int, float))]
    sign = 1.0 if lower_is_better(metric) else -1.0
    return sorted(having, key=lambda r: sign * float(r.metrics[task][metric]))


def _task_sentence(task: str, runs: Sequence[ReportRun], boots: Mapping[str, Mapping[str, TaskBootstrap]],
                   compare: CompareResult | None, info: TaskInfo | None) -> str | None:
    present = [m for r in runs for m in r.metrics.get(task, {}) if m not in BOOKKEEPING]
    metric = primary_metric(info, present) if present else None
    if metric is None:
        return None
    ranked = _ranked(task, metric, runs)
    if not ranked:
        return None
    direction = " (lower is better)" if lower_is_better(metric) else ""
    if len(ranked) == 1:
        alone = "" if len(runs) == 1 else " (the only run with this task)"
        return f"{task}, {metric}{direction}: {_value(ranked[0], task, metric, boots)}{alone}."
    best, second = ranked[0], ranked[1]
    tie = ranked[0].metrics[task][metric] == ranked[1].metrics[task][metric]
    values = ", ".join(_value(r, task, metric, boots) for r in ranked)
    head = f"{task}, {metric}{direction}: {values}"
    paired = _paired(compare, task, metric) if len(ranked) == 2 else None
    if paired is not None:
        return _paired_sentence(head, paired[0], paired[1], best.label, second.label)
    a, b = _interval(best, task, metric, boots), _interval(second, task, metric, boots)
    if a is None or b is None:
        return f"{head}. Without intervals for both, whether {best.label} is ahead of {second.label} cannot be said."
    how = ("judged by non-overlapping 95 % intervals, a conservative check, not a paired test"
           + ("; a paired test needs exactly two runs sharing samples: evalpipe compare A B" if len(ranked) > 2 else ""))
    if tie:
        return f"{head}: a tie at the top ({how})."
    if a[1] < b[0] or b[1] < a[0]:
        return f"{head}: {best.label} is clearly ahead of {second.label} — their intervals do not overlap ({how})."
    return f"{head}: {best.label} is not shown to be better than {second.label} — their intervals overlap ({how})."


def _other_significant(compare: CompareResult | None, primaries: Mapping[str, str | None],
                       shown: Mapping[str, Sequence[str]]) -> str | None:
    if compare is None:
        return None
    found = [f"{task} {d.metric} ({d.diff:+.3f}, p = {_p(d.p_value)})" for task, d in compare.differences
             if d.p_value is not None and d.p_value < SIGNIFICANCE and d.metric != primaries.get(task)
             and d.metric in shown.get(task, ())]
    if not found:
        return None
    listed = "; ".join(found[:12]) + (f"; and {len(found) - 12} more" if len(found) > 12 else "")
    return (f"Other significant paired differences of headline metrics (A = {compare.label_a} − "
            f"B = {compare.label_b}, p < 0.05): {listed}. The comparison section has every metric.")


def coverage_sentences(runs: Sequence[ReportRun]) -> list[str]:
    """One sentence per run with a task not answered in full (none when every sample was answered)."""
    out = []
    for run in runs:
        partial, empty = [], []
        for task in run.tasks:
            coverage = task_coverage(run.metrics.get(task, {}), run.task_summary(task))
            if coverage is None or coverage.complete:
                continue
            if coverage.answered:
                partial.append(f"{task} {coverage.sentence()}")
            else:
                empty.append(f"{task} ({coverage.why_unanswered()})")
        if not partial and not empty:
            continue
        said = []
        if empty:
            said.append("no answered samples, so no metric computed, for " + "; ".join(empty))
        if partial:
            said.append("; ".join(partial) + " — those tasks' metrics are measured on the answered samples only")
        out.append(f"Coverage below 100 % in {run.label}: " + ". ".join(said) + ".")
    return out


def summary_sentences(runs: Sequence[ReportRun], boots: Mapping[str, Mapping[str, TaskBootstrap]],
                      compare: CompareResult | None, infos: Mapping[str, TaskInfo],
                      operations: Sequence[TaskOperations] = ()) -> list[str]:
    """The summary as plain sentences (see the module docstring)."""
    tasks: list[str] = []
    for run in runs:
        tasks.extend(t for t in run.tasks if t not in tasks)
    sentences = []
    if compare is not None and not any(t.shared for t in compare.tasks):
        compare = None
    primaries: dict[str, str | None] = {}
    shown: dict[str, list[str]] = {}
    for task in tasks:
        present = list(dict.fromkeys(m for r in runs for m in r.metrics.get(task, {}) if m not in BOOKKEEPING))
        primaries[task] = primary_metric(infos.get(task), present) if present else None
        shown[task] = shown_metrics(infos.get(task), present)
        sentence = _task_sentence(task, runs, boots, compare, infos.get(task))
        if sentence:
            sentences.append(sentence)
    if len(runs) > 1 and len(tasks) > 1:
        wins: dict[str, int] = {}
        for task in tasks:
            metric = primaries[task]
            if not metric:
                continue
            ranked = _ranked(task, metric, runs)
            if len(ranked) > 1 and ranked[0].metrics[task][metric] != ranked[1].metrics[task][metric]:
                wins[ranked[0].label] = wins.get(ranked[0].label, 0) + 1
        if wins:
            sentences.insert(0, "Best on the primary metric: " + "; ".join(
                f"{label} on {count} of {len(tasks)} tasks" for label, count in sorted(wins.items(), key=lambda w: -w[1]))
                + ".")
    if len(runs) == 1:
        sentences.insert(0, f"One run, {runs[0].label}: each task's primary metric with its 95 % interval "
                            "(nothing to compare it with; give two runs to `evalpipe report` for a paired comparison).")
    sentences[:0] = coverage_sentences(runs)
    other = _other_significant(compare, primaries, shown)
    if other:
        sentences.append(other)
    for o in operations:
        if o.parse_failure_rate is not None and o.parse_failure_rate > HIGH_PARSE_FAILURE:
            sentences.append(f"Warning: {o.parse_failure_rate:.0%} of {o.run}'s answers on {o.task} could not be "
                             "parsed — its metrics measure answer-format compliance as much as the task.")
    return sentences


def summary_section(runs: Sequence[ReportRun], boots: Mapping[str, Mapping[str, TaskBootstrap]],
                    compare: CompareResult | None, infos: Mapping[str, TaskInfo],
                    operations: Sequence[TaskOperations] = ()) -> Section:
    """The summary as the report's first section (one paragraph per sentence)."""
    sentences = summary_sentences(runs, boots, compare, infos, operations)
    return Section("summary", "Summary", [Paragraph(s) for s in sentences]
                   or [Paragraph("No metric to summarise.")])
