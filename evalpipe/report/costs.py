"""The report's cost section (issue 25): what each run's answers cost, per sample and per correct answer.

Definitions (per run and task, from ``metrics.json`` and ``samples.jsonl``):

* ``cost`` — ``cost_usd``: the cost of the task's answers at the prices recorded with the run
  (:mod:`evalpipe.cost`: tokens × prices, batch discount applied to batch answers);
* ``per sample`` — cost / n (every evaluated sample, answered or not);
* ``correct`` — samples whose per-sample score of the task's primary metric is 1 (a right letter or
  label; a sentence whose entities are all found exactly); ``per correct`` — cost / correct (``–``
  when none is correct, or the primary metric has no per-sample score);
* ``reasoning tokens`` — as the endpoint reported them (``–`` when it did not).

The section appears only when some run was priced. Registered as a report contribution, so the
report's builder names no cost field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe.report.contributions import SuiteSection, register_section
from evalpipe.report.document import Cell, Section, Table, fmt

__all__ = ["cost_rows"]


def _priced(runs: Sequence[Any]) -> bool:
    return any("cost_usd" in values for run in runs for values in run.metrics.values())


def _correct(run: Any, task: str) -> int | None:
    info = run.info.get(task)
    primary = info.primary_metric if info is not None else None
    column = f"score.{primary}" if primary else None
    rows = run.samples[run.samples["task"] == task]
    if column is None or column not in rows.columns:
        return None
    return int((rows[column] == 1.0).sum())


def cost_rows(runs: Sequence[Any]) -> list[dict[str, Any]]:
    """One row per priced run and task (the module docstring's definitions)."""
    out = []
    for run in runs:
        for task in run.tasks:
            values = run.metrics.get(task, {})
            if "cost_usd" not in values:
                continue
            cost, n = float(values["cost_usd"]), int(values.get("n") or 0)
            correct = _correct(run, task)
            out.append({"run": run.label, "task": task, "cost_usd": cost, "n": n,
                        "per_sample": cost / n if n else None, "correct": correct,
                        "per_correct": cost / correct if correct else None,
                        "reasoning_tokens": values.get("reasoning_tokens")})
    return out


def _money(value: float | None) -> str:
    return "–" if value is None else f"${value:.6f}" if value < 0.01 else f"${value:.4f}"


def _section(runs: Sequence[Any], boots: Mapping[str, Any], level: float) -> Section:
    rows = tuple((Cell(r["run"], numeric=False), Cell(r["task"], numeric=False), Cell(_money(r["cost_usd"])),
                  Cell(str(r["n"])), Cell(_money(r["per_sample"])),
                  Cell("–" if r["correct"] is None else str(r["correct"])), Cell(_money(r["per_correct"])),
                  Cell("–" if r["reasoning_tokens"] is None else fmt(int(r["reasoning_tokens"]))))
                 for r in cost_rows(runs))
    table = Table(id="cost", title="Cost", columns=("model", "task", "cost", "n", "per sample", "correct",
                                                   "per correct", "reasoning tokens"), rows=rows,
                  note="USD at the prices recorded with each run (config.json); correct = per-sample primary "
                       "score 1.")
    return Section("cost", "Cost", [table])


SECTION = register_section(SuiteSection(name="cost", applies=_priced, section=_section))
