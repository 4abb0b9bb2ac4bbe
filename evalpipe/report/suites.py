"""The suites a report knows: those its runs recorded in ``config.json`` (``suites``).

Each is a :class:`ReportSuite`: the recorded members and description, and — for a suite with an
aggregate of its own — the aggregate function, used only to recompute it on bootstrap replicates
(:mod:`evalpipe.report.registry_bridge`, the documented exception). A run written before
config.json recorded suites contributes the registered suites instead (its report is unchanged).
Runs that disagree on a suite's members: the first run that records it wins.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evalpipe.rundir.suites import SuiteRecord

if TYPE_CHECKING:
    from evalpipe.report.runs import ReportRun

__all__ = ["ReportSuite", "recorded_suites", "report_suites"]


@dataclass(frozen=True)
class ReportSuite:
    name: str
    tasks: tuple[str, ...]
    description: str = ""
    #: the suite's own aggregate (None: it has none, or it is no longer registered)
    aggregate: Callable[[Mapping[str, Mapping[str, float]]], dict[str, float]] | None = None
    #: whether the run recorded an aggregate for the suite (true even when ``aggregate`` could not be found)
    has_aggregate: bool = False


def recorded_suites(runs: Sequence[ReportRun]) -> dict[str, SuiteRecord]:
    """name → the suite as the runs recorded it (see the module docstring for older runs)."""
    found: dict[str, SuiteRecord] = {}
    for run in runs:
        recorded = run.config.get("suites")
        if recorded is None:
            from evalpipe.report.registry_bridge import registered_suites

            for name, record in registered_suites().items():
                found.setdefault(name, record)
            continue
        for name, record in recorded.items():
            found.setdefault(name, SuiteRecord.from_json(name, record))
    return dict(sorted(found.items()))


def report_suites(runs: Sequence[ReportRun]) -> dict[str, ReportSuite]:
    out = {}
    for name, record in recorded_suites(runs).items():
        aggregate = None
        if record.has_aggregate:
            from evalpipe.report.registry_bridge import suite_aggregate

            aggregate = suite_aggregate(name)
        out[name] = ReportSuite(name, record.tasks, record.description, aggregate, record.has_aggregate)
    return out
