"""A suite as a run directory records it (``config.json`` ``suites``): its members, what it is, and
its aggregate's formula.

The report needs a suite's member tasks (column order, suite averages) and, for a suite with an
aggregate of its own, the aggregate's declaration (:mod:`evalpipe.rundir.suite_aggregates`): its
*value* is in ``metrics.json``, and the declaration lets the report recompute it on bootstrap
replicates without the task registry. A run written before declarations were recorded has
``has_aggregate`` without ``aggregate``: its aggregate keeps its value and gets no interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalpipe.rundir.suite_aggregates import SuiteAggregate

__all__ = ["SuiteRecord"]


@dataclass(frozen=True)
class SuiteRecord:
    name: str
    tasks: tuple[str, ...]
    description: str = ""
    #: whether the suite computes an aggregate of its own (CLUE's level score, CBLUE's average)
    has_aggregate: bool = False
    #: the aggregate's declaration (None: the suite has none, or the run predates declared aggregates)
    aggregate: SuiteAggregate | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tasks": list(self.tasks), "description": self.description,
                               "has_aggregate": self.has_aggregate or self.aggregate is not None}
        if self.aggregate is not None:
            out["aggregate"] = self.aggregate.to_json()
        return out

    @classmethod
    def from_json(cls, name: str, record: Mapping[str, Any]) -> SuiteRecord:
        """:class:`~evalpipe.rundir.suite_aggregates.MalformedAggregate` for an unreadable declaration."""
        declared = record.get("aggregate")
        aggregate = None if declared is None else SuiteAggregate.from_json(declared)
        return cls(name=name, tasks=tuple(str(t) for t in record.get("tasks") or ()),
                   description=str(record.get("description") or ""),
                   has_aggregate=bool(record.get("has_aggregate")) or aggregate is not None, aggregate=aggregate)
