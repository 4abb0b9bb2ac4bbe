"""Reference boards: a family's published rows beside the runs' numbers, rendered from the run directory.

A board is data (:class:`evalpipe.rundir.boards.ReferenceBoard`) recorded in a run's ``config.json``
(``boards``) by the runner for the families it evaluated; this module renders every recorded board
the same way, knowing none of them:

* one row per published reference row, then one per run that evaluated any of the board's tasks,
  each task's headline metric in the board's scale (× ``scale``) with its 95 % bootstrap interval;
* the average (``average == "mean"``): the suite aggregate ``<board>:<average_key>`` in the run's
  metrics.json when recorded, else the plain mean of the headline metrics — only when every task
  ran; its interval is the mean of replicate ``b`` of every task;
* ``leaderboard.csv`` gets the reference rows back in the 0-1 scale, in the columns the runs' values
  have there (``<task>:<metric>``, ``<board>:<average_key>``), marked by ``source``.

Which boards a report shows: those recorded by its runs (first recording wins, by name). A run
directory written before boards were recorded shows none: the report never asks the task registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evalpipe.report.document import Cell, Paragraph, Section, Table
from evalpipe.rundir.boards import ReferenceBoard

if TYPE_CHECKING:
    import pandas as pd

    from evalpipe.report.bootstrap import TaskBootstrap
    from evalpipe.report.runs import ReportRun

__all__ = ["BoardRow", "board_reference_frame", "board_rows", "board_section", "recorded_boards", "split_label"]


@dataclass(frozen=True)
class BoardRow:
    name: str
    #: ``reference`` (published) or ``run`` (ours)
    source: str
    split: str
    #: task name or the board's average key → value in the board's scale (None: not run)
    values: Mapping[str, float | None]
    #: task name or the average key → (low, high) in the board's scale
    intervals: Mapping[str, tuple[float, float]] = field(default_factory=dict)


def recorded_boards(runs: Sequence[ReportRun]) -> list[ReferenceBoard]:
    """The boards the runs recorded (config.json ``boards``), in order of first appearance (a run
    written before boards were recorded contributes none)."""
    found: dict[str, ReferenceBoard] = {}
    for run in runs:
        for record in run.config.get("boards") or ():
            board = ReferenceBoard.from_json(record)
            found.setdefault(board.name, board)
    return [b for b in found.values() if any(b.applies(run.tasks) for run in runs)]


def _split(board: ReferenceBoard, run: ReportRun) -> str:
    """The split(s) the run evaluated the board's tasks on (config.json records it per task)."""
    recorded = run.config.get("tasks", {})
    splits = sorted({str(recorded.get(t, {}).get("split") or "dev") for t in run.tasks if t in board.tasks})
    return "/".join(splits) or "dev"


def split_label(board: ReferenceBoard, runs: Sequence[ReportRun]) -> str:
    """The section's label: where the reference rows and our rows come from."""
    splits = sorted({s for run in runs if board.applies(run.tasks) for s in _split(board, run).split("/")})
    return board.label.format(splits="/".join(splits) or "dev")


def _reference_rows(board: ReferenceBoard) -> list[BoardRow]:
    return [BoardRow(row.name, "reference", row.split, dict(row.values)) for row in board.rows]


def _run_row(board: ReferenceBoard, run: ReportRun, boots: Mapping[str, TaskBootstrap], level: float) -> BoardRow:
    import numpy as np

    from evalpipe.report.bootstrap import percentile_interval

    values: dict[str, float | None] = {}
    intervals: dict[str, tuple[float, float]] = {}
    replicates: list[np.ndarray] = []
    scale = board.scale
    for task in board.tasks:
        metric = board.headline[task]
        value = run.metrics.get(task, {}).get(metric) if task in run.tasks else None
        values[task] = scale * float(value) if value is not None else None
        boot = boots.get(task)
        ci = boot.intervals.get(metric) if boot else None
        if ci is not None and ci.low is not None and ci.high is not None:
            intervals[task] = (scale * ci.low, scale * ci.high)
        reps = boot.replicates.values.get(metric) if boot else None
        if reps is not None and reps.size:
            replicates.append(reps)
    complete = all(values[t] is not None for t in board.tasks)
    recorded = run.metrics.get(board.name, {}).get(board.average_key)
    if recorded is None and complete:  # a run of every task without the suite: the mean, as the suite computes it
        scores = [float(run.metrics[t][board.headline[t]]) for t in board.tasks]
        recorded = sum(scores) / len(scores)
    values[board.average_key] = scale * float(recorded) if recorded is not None else None
    if complete and len(replicates) == len(board.tasks):
        count = min(r.size for r in replicates)
        average = percentile_interval(np.mean([r[:count] for r in replicates], axis=0), level)
        if average is not None:
            intervals[board.average_key] = (scale * average[0], scale * average[1])
    return BoardRow(run.label, "run", _split(board, run), values, intervals)


def board_rows(board: ReferenceBoard, runs: Sequence[ReportRun],
               boots: Mapping[str, Mapping[str, TaskBootstrap]], level: float = 0.95) -> list[BoardRow]:
    """The published rows, then one row per run that evaluated any of the board's tasks."""
    ours = [_run_row(board, run, boots.get(run.label, {}), level) for run in runs if board.applies(run.tasks)]
    return [*_reference_rows(board), *ours]


def _value(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _groups(board: ReferenceBoard) -> tuple[tuple[str, int], ...]:
    """Header groups: the headline metric over the consecutive tasks that use it."""
    groups: list[tuple[str, int]] = [("", 3)]
    for task in board.tasks:
        metric = board.headline[task]
        if len(groups) > 1 and groups[-1][0] == metric:
            groups[-1] = (metric, groups[-1][1] + 1)
        else:
            groups.append((metric, 1))
    groups.append(("", 1))
    return tuple(groups)


def board_section(board: ReferenceBoard, rows: Sequence[BoardRow], label: str) -> Section:
    table_rows = []
    for row in rows:
        cells = [Cell(row.name, numeric=False),
                 Cell(board.reference_cell if row.source == "reference" else "our run", numeric=False),
                 Cell(row.split, numeric=False)]
        for key in (*board.tasks, board.average_key):
            ci = row.intervals.get(key)
            cells.append(Cell(_value(row.values.get(key)), sub=f"[{ci[0]:.1f}, {ci[1]:.1f}]" if ci else ""))
        table_rows.append(tuple(cells))
    incomplete = [r.name for r in rows if r.source == "run" and r.values.get(board.average_key) is None]
    note = f"{label}. {board.note}" if board.note else f"{label}."
    table = Table(id=f"{board.name}-leaderboard", title=board.table_title,
                  columns=("model", "rows", "split", *(board.display[t] for t in board.tasks), board.average_column),
                  rows=tuple(table_rows), groups=_groups(board), note=note)
    section = Section(board.name, board.title, [Paragraph(label[0].upper() + label[1:] + "."), table])
    if incomplete:
        section.blocks.append(Paragraph(board.incomplete.format(runs=", ".join(incomplete))))
    return section


def board_reference_frame(board: ReferenceBoard, rows: Sequence[BoardRow]) -> pd.DataFrame:
    """The reference rows for leaderboard.csv, in its columns and its 0-1 scale (``source`` marks them)."""
    import pandas as pd

    records = []
    for row in rows:
        if row.source != "reference":
            continue
        record: dict[str, object] = {"model": row.name, "run": "", "source": board.source}
        for task in board.tasks:
            value = row.values.get(task)
            record[f"{task}:{board.headline[task]}"] = value / board.scale if value is not None else None
        average = row.values.get(board.average_key)
        record[f"{board.name}:{board.average_key}"] = average / board.scale if average is not None else None
        records.append(record)
    return pd.DataFrame(records)
