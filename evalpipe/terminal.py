"""Metrics as terminal tables (rich): the one layout ``run``, ``score``, ``show`` and ``retrieve`` print."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

#: metrics that are counts: printed as integers, not as 0.0000-style fractions
COUNT_METRICS = {"n", "errors", "tp", "fp", "fn", "pool_size", "datasets"}


def format_cell(name: str, value: float | None) -> str:
    """A count as an integer, a score with four decimals, a missing value as an en dash."""
    if value is None:
        return "–"
    if name in COUNT_METRICS or (isinstance(value, int) and not isinstance(value, bool)):
        return str(int(value))
    return f"{value:.4f}"


def metrics_table(metrics: dict[str, dict[str, float]], title: str | None = None) -> Table:
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
