"""The suites a report knows: those its runs recorded in ``config.json`` (``suites``), and nothing else.

Each is a :class:`ReportSuite`: the recorded members and description, and — for a suite with an
aggregate of its own — the aggregate's recorded declaration
(:class:`~evalpipe.rundir.suite_aggregates.SuiteAggregate`), evaluated on bootstrap replicates for
the aggregate's interval. The report never asks the task registry:

* a run written before config.json recorded suites contributes no suite (its aggregates in
  metrics.json are still shown, without an interval, and the leaderboard says why);
* a run written before declarations were recorded has ``has_aggregate`` without a declaration:
  its aggregate keeps its value and gets no interval (:data:`PREDATES_DECLARATIONS`);
* an unreadable declaration (hand-edited, or written by a newer evalpipe) is treated the same way,
  with its own reason, rather than failing the report.

Runs that disagree on a suite: the first run that records it wins for members and description; the
declaration is the first one recorded (the formula is the suite's, not the run's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evalpipe.rundir.suite_aggregates import MalformedAggregate, SuiteAggregate
from evalpipe.rundir.suites import SuiteRecord

if TYPE_CHECKING:
    from evalpipe.report.runs import ReportRun

__all__ = ["NO_SUITES_RECORDED", "PREDATES_DECLARATIONS", "ReportSuite", "recorded_suites", "report_suites"]

#: why an aggregate recorded without its declaration has no interval
PREDATES_DECLARATIONS = ("the run predates declared suite aggregates (its config.json records the suite without "
                         "the aggregate's formula), so the aggregate is not recomputed on resamples")
#: why an aggregate of a run that recorded no suites at all has no interval
NO_SUITES_RECORDED = ("the run predates recorded suites (its config.json has no 'suites'), so the aggregate is "
                      "not recomputed on resamples")


@dataclass(frozen=True)
class ReportSuite:
    name: str
    tasks: tuple[str, ...]
    description: str = ""
    #: the suite's recorded aggregate (None: it has none, or none was recorded or readable)
    aggregate: SuiteAggregate | None = None
    #: whether a run recorded an aggregate for the suite (true even when ``aggregate`` is None)
    has_aggregate: bool = False
    #: why the aggregate has no declaration although the suite has one ("" when it has)
    undeclared: str = ""


def _record(name: str, record: object) -> tuple[SuiteRecord, str]:
    """The recorded suite and, for a declaration this version cannot read, why it is left out."""
    if not isinstance(record, dict):
        return SuiteRecord(name, ()), ""
    try:
        return SuiteRecord.from_json(name, record), ""
    except MalformedAggregate as exc:
        rest = {k: v for k, v in record.items() if k != "aggregate"}
        return SuiteRecord.from_json(name, {**rest, "has_aggregate": True}), f"its recorded aggregate is unreadable: {exc}"


def _merged(runs: Sequence[ReportRun]) -> dict[str, tuple[SuiteRecord, str]]:
    found: dict[str, tuple[SuiteRecord, str]] = {}
    for run in runs:
        for name, record in (run.config.get("suites") or {}).items():
            suite, problem = _record(name, record)
            if name not in found:
                found[name] = (suite, problem)
            elif found[name][0].aggregate is None and suite.aggregate is not None:
                first = found[name][0]
                found[name] = (SuiteRecord(name, first.tasks, first.description, True, suite.aggregate), "")
    return dict(sorted(found.items()))


def recorded_suites(runs: Sequence[ReportRun]) -> dict[str, SuiteRecord]:
    """name → the suite as the runs recorded it (see the module docstring)."""
    return {name: suite for name, (suite, _) in _merged(runs).items()}


def report_suites(runs: Sequence[ReportRun]) -> dict[str, ReportSuite]:
    out = {}
    for name, (record, problem) in _merged(runs).items():
        undeclared = "" if record.aggregate is not None or not record.has_aggregate else \
            (f"the suite's aggregate has no interval: {problem}" if problem else PREDATES_DECLARATIONS)
        out[name] = ReportSuite(name, record.tasks, record.description, record.aggregate, record.has_aggregate,
                                undeclared)
    return out
