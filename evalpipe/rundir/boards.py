"""A reference board: a task family's published rows beside the runs' numbers, declared as data.

A family with a paper to compare against (CBLUE's human and best-baseline rows) declares a
:class:`ReferenceBoard` — title, its tasks in the paper's column order, their short names, the
headline metric of each, the published rows, the scale they are written in, how the average is
defined and the texts that say where the rows come from. The runner records the boards of the
families a run evaluated in ``config.json`` (``boards``), and the report renders every recorded
board with one renderer (:mod:`evalpipe.report.boards`): no task module imports the report, and
the report loads no task.

Texts may hold ``{splits}`` (our runs' splits, ``dev`` or ``dev/test``) in ``label`` and ``{runs}``
(the runs without an average) in ``incomplete``; ``note`` follows the label in the table's note.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["AVERAGES", "ReferenceBoard", "ReferenceRow"]

#: how a board's average over its tasks is defined: ``mean`` — the unweighted mean of every task's
#: headline metric, only when all of them ran (a mean over a subset compares with nothing)
AVERAGES = frozenset({"mean"})


@dataclass(frozen=True)
class ReferenceRow:
    """One published row: its name, the split it was measured on, task (or the average key) → value
    in the board's scale."""

    name: str
    split: str
    values: Mapping[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "split": self.split, "values": dict(self.values)}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> ReferenceRow:
        return cls(str(record["name"]), str(record["split"]),
                   MappingProxyType({str(k): float(v) for k, v in (record.get("values") or {}).items()}))


@dataclass(frozen=True)
class ReferenceBoard:
    #: the section's id; also the suite whose ``metrics.json`` aggregate holds a run's average
    name: str
    #: the section's title (``CBLUE leaderboard``)
    title: str
    #: the table's title
    table_title: str
    #: the board's tasks, in column order
    tasks: tuple[str, ...]
    #: task → its short name in the column header
    display: Mapping[str, str]
    #: task → the metric (a key of its metrics.json) the board shows
    headline: Mapping[str, str]
    rows: tuple[ReferenceRow, ...]
    #: what the rows' values are multiplied from (evalpipe's metrics are 0-1; 100: percent)
    scale: float = 100.0
    #: how the average column is defined (:data:`AVERAGES`)
    average: str = "mean"
    #: the average's key in the rows, in the suite's metrics.json aggregate and in leaderboard.csv
    average_key: str = "average"
    #: the average's column header
    average_column: str = "Avg"
    #: ``leaderboard.csv``'s ``source`` of the reference rows
    source: str = "reference"
    #: the ``rows`` cell of a reference row
    reference_cell: str = "reference"
    #: where the rows and ours come from (``{splits}``: our runs' splits)
    label: str = "our runs: {splits} split"
    #: after the label in the table's note: the scale and the average's definition
    note: str = ""
    #: shown for runs without an average (``{runs}``)
    incomplete: str = "No average for {runs}: not every task ran."

    def __post_init__(self) -> None:
        missing = [t for t in self.tasks if t not in self.headline or t not in self.display]
        if missing:
            raise ValueError(f"board {self.name!r}: no headline metric or display name for {', '.join(missing)}")
        if self.average not in AVERAGES:
            raise ValueError(f"board {self.name!r}: unknown average {self.average!r} (known: {sorted(AVERAGES)})")

    def applies(self, tasks: Iterable[str]) -> bool:
        """Whether a run of these tasks has anything for the board."""
        return any(t in self.tasks for t in tasks)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "table_title": self.table_title, "tasks": list(self.tasks),
                "display": dict(self.display), "headline": dict(self.headline),
                "rows": [r.to_json() for r in self.rows], "scale": self.scale, "average": self.average,
                "average_key": self.average_key, "average_column": self.average_column, "source": self.source,
                "reference_cell": self.reference_cell, "label": self.label, "note": self.note,
                "incomplete": self.incomplete}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> ReferenceBoard:
        text = {k: str(record[k]) for k in ("average", "average_key", "average_column", "source", "reference_cell",
                                             "label", "note", "incomplete") if k in record}
        return cls(name=str(record["name"]), title=str(record["title"]), table_title=str(record["table_title"]),
                   tasks=tuple(str(t) for t in record["tasks"]),
                   display=MappingProxyType({str(k): str(v) for k, v in record["display"].items()}),
                   headline=MappingProxyType({str(k): str(v) for k, v in record["headline"].items()}),
                   rows=tuple(ReferenceRow.from_json(r) for r in record.get("rows") or ()),
                   scale=float(record.get("scale", 100.0)), **text)
