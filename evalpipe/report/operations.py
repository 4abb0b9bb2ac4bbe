"""How each run went, per task: failures, truncation, tokens and latency.

Definitions (all per run and task):

* ``errors`` — samples without an answer (request failed for good or never sent);
  ``error rate`` = errors / n.
* ``parse failures`` — answered samples whose answer could not be parsed;
  ``parse-failure rate`` = parse failures / answered samples (as the runner defines it).
* ``input truncated`` — share of samples with ``truncated_tokens > 0`` among samples that
  record it; ``–`` when the run records no truncation.
* ``hit max_tokens`` — share of answered samples with ``finish_reason == "length"`` among
  those that record a finish reason; ``–`` when none does.
* tokens — prompt and completion tokens summed over answered samples, and their mean per
  answered sample, as reported by the endpoint.
* latency — p50/p90/p99 of answered requests' latency in seconds, from ``summary.json`` (the
  runner's inclusive percentiles); recomputed from the samples when the summary lacks them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from evalpipe.report.document import Cell, Table, fmt
from evalpipe.report.runs import ReportRun

__all__ = ["TaskOperations", "operations_table", "task_operations"]


@dataclass(frozen=True)
class TaskOperations:
    run: str
    task: str
    n: int
    errors: int
    parse_failures: int
    parse_failure_rate: float | None
    input_truncated: float | None
    hit_max_tokens: float | None
    prompt_tokens: float
    completion_tokens: float
    mean_prompt_tokens: float | None
    mean_completion_tokens: float | None
    latency_p50: float | None
    latency_p90: float | None
    latency_p99: float | None

    @property
    def error_rate(self) -> float | None:
        return self.errors / self.n if self.n else None


def _flag(value: object) -> bool:
    """True only for a recorded True (None = not answered, never a parse failure)."""
    return isinstance(value, (bool, np.bool_)) and bool(value)


def _share(mask: pd.Series) -> float | None:
    return float(mask.mean()) if len(mask) else None


def _latency(run: ReportRun, task: str, answered: pd.DataFrame) -> tuple[float | None, ...]:
    recorded = run.task_summary(task).latency_s or {}
    stated = [v for k in ("p50", "p90", "p99") if (v := recorded.get(k)) is not None]
    if len(stated) == 3:
        return tuple(float(v) for v in stated)
    values = answered["latency_s"].dropna().astype(float).to_numpy()
    if values.size == 0:
        return (None, None, None)
    return tuple(float(np.percentile(values, q)) for q in (50, 90, 99))


def task_operations(run: ReportRun, task: str) -> TaskOperations:
    rows = run.samples[run.samples["task"] == task]
    answered = rows[rows["error"].isna()]
    parse_failed = answered["parse_failed"].map(_flag).astype(bool)
    truncated = rows["truncated_tokens"].dropna()
    finish = answered["finish_reason"].dropna()
    p50, p90, p99 = _latency(run, task, answered)
    prompt = answered["prompt_tokens"].dropna()
    completion = answered["completion_tokens"].dropna()
    return TaskOperations(
        run=run.label, task=task, n=len(rows), errors=len(rows) - len(answered),
        parse_failures=int(parse_failed.sum()),
        parse_failure_rate=_share(parse_failed),
        input_truncated=_share(truncated > 0),
        hit_max_tokens=_share(finish == "length"),
        prompt_tokens=float(prompt.sum()), completion_tokens=float(completion.sum()),
        mean_prompt_tokens=float(prompt.mean()) if len(prompt) else None,
        mean_completion_tokens=float(completion.mean()) if len(completion) else None,
        latency_p50=p50, latency_p90=p90, latency_p99=p99,
    )


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def operations_table(ops: Sequence[TaskOperations], table_id: str = "operations") -> Table:
    columns = ("model", "task", "n", "errors", "error rate", "parse failures", "parse-failure rate",
               "input truncated", "hit max_tokens", "prompt tokens", "completion tokens",
               "mean prompt tok.", "mean completion tok.", "latency p50 s", "p90 s", "p99 s")
    rows = []
    for o in ops:
        rows.append((
            Cell(o.run, numeric=False), Cell(o.task, numeric=False), Cell(str(o.n)), Cell(str(o.errors)),
            Cell(_pct(o.error_rate)), Cell(str(o.parse_failures)), Cell(_pct(o.parse_failure_rate)),
            Cell(_pct(o.input_truncated)), Cell(_pct(o.hit_max_tokens)),
            Cell(fmt(int(o.prompt_tokens))), Cell(fmt(int(o.completion_tokens))),
            Cell(fmt(o.mean_prompt_tokens, 1)), Cell(fmt(o.mean_completion_tokens, 1)),
            Cell(fmt(o.latency_p50, 2)), Cell(fmt(o.latency_p90, 2)), Cell(fmt(o.latency_p99, 2)),
        ))
    return Table(id=table_id, title="Operations", columns=columns, rows=tuple(rows),
                 note="Parse-failure rate over answered samples; truncation shares over samples that record it.")
