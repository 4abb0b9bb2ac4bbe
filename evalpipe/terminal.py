"""Metrics as terminal tables (rich) and the lines under them: the one layout ``run``, ``score`` and
``show`` print."""

from __future__ import annotations

from typing import Any

from collections.abc import Mapping

from rich.table import Table
from rich.text import Text

from evalpipe.coverage import Coverage
from evalpipe.results import RunSummary, TaskSummary
from evalpipe.variants.robustness import AXIS_LABELS, level_label

#: metrics that are counts: printed as integers, not as 0.0000-style fractions
COUNT_METRICS = {"n", "errors", "answered", "tp", "fp", "fn", "pool_size", "datasets"}


def format_cell(name: str, value: float | None) -> str:
    """A count as an integer, a score with four decimals, a missing value as an en dash (a metric
    not computed — null in metrics.json — included: never a 0)."""
    if value is None:
        return "–"
    if name in COUNT_METRICS or (isinstance(value, int) and not isinstance(value, bool)):
        return str(int(value))
    return f"{value:.4f}"


def metrics_table(metrics: Mapping[str, Mapping[str, float | None]], title: str | None = None) -> Table:
    """Metrics as rows and tasks (or suites) as columns: readable however many metrics a task has."""
    table = Table(title=Text(title) if title else None, title_justify="left")
    table.add_column("metric", style="bold", no_wrap=True)
    for task in metrics:
        table.add_column(Text(task), justify="right", no_wrap=True)
    names: list[str] = []
    for values in metrics.values():
        for name in values:
            if name not in names:
                names.append(name)
    for name in names:
        # Text, not markup: metric names carry brackets, e.g. bertscore[all-MiniLM-L6-v2@L6]_f1
        table.add_row(Text(name), *(format_cell(name, values.get(name)) for values in metrics.values()))
    return table


def task_coverage(values: Mapping[str, float | None], info: TaskSummary | None) -> Coverage | None:
    """The task's coverage from summary.json, or (older runs) from metrics.json's ``n`` and ``errors``."""
    found = Coverage.from_json(info.coverage) if info is not None else None
    n, errors = values.get("n"), values.get("errors")
    if found is None and isinstance(n, (int, float)) and isinstance(errors, (int, float)):
        found = Coverage(int(n), int(n - errors), dict(info.error_kinds) if info is not None else {})
    return found


def coverage_line(task: str, coverage: Coverage) -> str:
    """What a task's partial (or empty) coverage means for its numbers, in one line."""
    if not coverage.answered:
        return f"{task}: no metric computed — {coverage.not_computed_reason()}"
    return (f"{task}: {coverage.sentence()} — its metrics are measured on the {coverage.answered} answered "
            "samples only (docs/coverage.md)")


#: the parser flag (summed in summary.json's diagnostics) of an answer that stopped inside an unclosed
#: ``<think>`` block with nothing before it (:func:`evalpipe.text.reasoning.strip_reasoning`)
TRUNCATED_IN_REASONING = "truncated_in_reasoning"

#: a parse-failure rate above this is flagged under the table: the metrics then measure format
#: compliance as much as the task
HIGH_PARSE_FAILURE = 0.2


def summary_lines(metrics: Mapping[str, Mapping[str, float | None]], summary: RunSummary | None,
                  compat: str | None = None) -> list[tuple[str, str]]:
    """What to say under the metrics table, as ``(level, text)`` with level ``info`` or ``warn``.

    One function for ``run``'s closing output, ``score`` and ``show``, so the three say the same
    things about the same run directory.
    """
    lines: list[tuple[str, str]] = []
    tasks = summary.tasks if summary is not None else {}
    for task, values in metrics.items():
        info = tasks.get(task)
        coverage = task_coverage(values, info)
        if coverage is not None and not coverage.complete:
            lines.append(("warn", coverage_line(task, coverage)))
        rate = values.get("parse_failure_rate")
        if isinstance(rate, (int, float)) and rate > HIGH_PARSE_FAILURE:
            lines.append(("warn", f"{task}: {rate:.0%} of answers could not be parsed — its metrics measure "
                                  "answer-format compliance as much as the task (see summary.json diagnostics)"))
        if info is None:
            continue
        stuck = info.diagnostics.get(TRUNCATED_IN_REASONING)
        if stuck:
            lines.append(("warn", f"{task}: {int(stuck)} answer(s) truncated in reasoning — the model was still in "
                                  "its <think> block when it stopped (scored as wrong); give it more room with "
                                  "--max-tokens"))
        for metric, why in info.not_computed.items():
            if coverage is not None and not coverage.answered and why == coverage.not_computed_reason():
                continue  # said once, by the coverage line
            lines.append(("info", f"{task}: {metric} not computed: {why}"))
        if info.truncated_share:
            lines.append(("info", f"{task}: {info.truncated_share:.1%} of prompts were shortened to fit the context "
                                  f"({info.truncated_tokens} tokens cut)"))
    if summary is None:
        return lines
    run = summary.run
    budget = run.budget
    if budget is not None and budget.not_applied:
        lines.append(("warn", f"context budgeting not applied: {budget.not_applied}"))
    elif budget is not None and budget.context_length:
        counted = "the model's tokenizer" if budget.token_counter == "server" else \
            "an estimate (characters / 3.5; no tokenizer endpoint)"
        if budget.chat_counting == "template":
            counted += " and its chat template"
        extra = f", {budget.estimated_counts} counts estimated" if budget.estimated_counts else ""
        lines.append(("info", f"long inputs fitted to a {budget.context_length}-token context, counted with "
                              f"{counted}{extra}"))
    for name, why in run.skipped_tasks.items():
        lines.append(("info", f"skipped {name}: {why}"))
    for note in run.notes:
        lines.append(("warn", f"note: {note}"))
    for name, why in run.incomplete_suites.items():
        lines.append(("info", f"suite {name}: aggregate incomplete: {why}"))
    return lines


def robustness_table(variants: Mapping[str, Mapping[str, Any]], metrics: Mapping[str, Mapping[str, float | None]]) -> Table:
    """Per task and varied axis (prompt variants, shot orders, shot counts): the headline metric's —
    and the parse-failure rate's, which prompts move most — reference value, mean ± population std
    over the axis' levels, its lowest and highest level, the spread (max − min), and how
    consistently samples were answered (``variants.json``)."""
    table = Table(title=Text("robustness across prompt conditions (variants.json)"), title_justify="left")
    for column in ("task", "across", "metric", "reference", "mean ± std", "min", "max", "spread",
                   "agreement", "flips"):
        table.add_column(column, justify="left" if column in ("task", "across", "metric") else "right", no_wrap=True)
    for task, doc in variants.items():
        shown = doc.get("metrics") or []
        headline = doc.get("primary_metric") if doc.get("primary_metric") in shown else (shown[0] if shown else None)
        for axis in doc.get("axes") or {}:
            consistency = (doc.get("consistency") or {}).get(axis, {})
            flip = consistency.get("flip_rate")
            for metric in dict.fromkeys(m for m in (headline, "parse_failure_rate") if m is not None and m in shown):
                stats = (doc.get("spread") or {}).get(axis, {}).get(metric)
                if not stats:
                    continue
                first = metric == headline

                def at(value: float, level: str, axis: str = axis, spread: float = stats["spread"]) -> Text:
                    return Text(f"{value:.4f} ({level_label(axis, level) if spread else 'all equal'})")

                table.add_row(
                    Text(task if first else ""), AXIS_LABELS.get(axis, axis) if first else "", Text(metric),
                    format_cell(metric, metrics.get(task, {}).get(metric)),
                    f"{stats['mean']:.4f} ± {stats['std']:.4f}",
                    at(stats["min"], stats["min_at"]), at(stats["max"], stats["max_at"]), f"{stats['spread']:.4f}",
                    format_cell("agreement", consistency.get("agreement")) if first else "",
                    (format_cell("flip_rate", flip) if flip is not None else "–") if first else "",
                )
    return table
