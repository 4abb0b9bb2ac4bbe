"""A suite as a run directory records it (``config.json`` ``suites``): its members and what it is.

The report needs a suite's member tasks (column order, suite averages) and whether the suite has an
aggregate of its own (then the aggregate, from ``metrics.json``, stands for it instead of an
average). The aggregate's *value* is in ``metrics.json``; only recomputing it on bootstrap replicates
needs its Python function, which the report reaches through one documented exception
(:mod:`evalpipe.report.registry_bridge`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["SuiteRecord"]


@dataclass(frozen=True)
class SuiteRecord:
    name: str
    tasks: tuple[str, ...]
    description: str = ""
    #: whether the suite computes an aggregate of its own (CLUE's level score, CBLUE's average)
    has_aggregate: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"tasks": list(self.tasks), "description": self.description, "has_aggregate": self.has_aggregate}

    @classmethod
    def from_json(cls, name: str, record: Mapping[str, Any]) -> SuiteRecord:
        return cls(name=name, tasks=tuple(str(t) for t in record.get("tasks") or ()),
                   description=str(record.get("description") or ""),
                   has_aggregate=bool(record.get("has_aggregate")))
