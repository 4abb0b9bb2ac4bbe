"""The suites a report knows: those its runs recorded in ``config.json`` (``suites``), and nothing else.

Each is a :class:`ReportSuite`: the recorded members and description (the first run that records
the suite wins), and each run's own recorded aggregate declaration
(:class:`~evalpipe.rundir.suite_aggregates.SuiteAggregate`), evaluated on that run's bootstrap
replicates for the aggregate's interval. A run's interval comes from its own directory only, and
the report never asks the task registry:

* a run written before config.json recorded suites contributes no suite (its aggregates in
  metrics.json are still shown, without an interval, and the leaderboard says why:
  :data:`NO_SUITES_RECORDED`);
* a run written before declarations were recorded has ``has_aggregate`` without a declaration:
  its aggregate keeps its value and gets no interval (:data:`PREDATES_DECLARATIONS`), even when
  another run of the report declares the same suite;
* an unreadable declaration (hand-edited, or written by a newer evalpipe) is treated the same way,
  with its own reason, rather than failing the report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
    #: the first recorded declaration (None: no run recorded a readable one)
    aggregate: SuiteAggregate | None = None
    #: whether a run recorded an aggregate for the suite (true even when ``aggregate`` is None)
    has_aggregate: bool = False
    #: run label → that run's own declaration (None: it recorded the suite without a readable one)
    declared: Mapping[str, SuiteAggregate | None] = field(default_factory=dict)
    #: run label → why that run's aggregate has no declaration
    undeclared: Mapping[str, str] = field(default_factory=dict)

    def aggregate_for(self, run: ReportRun) -> SuiteAggregate | None:
        """The declaration recorded by ``run`` itself (None: it recorded none)."""
        return self.declared.get(run.label)


def _record(name: str, record: object) -> tuple[SuiteRecord, str]:
    """The recorded suite and, for a declaration this version cannot read, why it is left out."""
    if not isinstance(record, dict):
        return SuiteRecord(name, ()), ""
    try:
        return SuiteRecord.from_json(name, record), ""
    except MalformedAggregate as exc:
        rest = {k: v for k, v in record.items() if k != "aggregate"}
        return SuiteRecord.from_json(name, {**rest, "has_aggregate": True}), f"its recorded aggregate is unreadable ({exc})"


def _by_run(runs: Sequence[ReportRun]) -> dict[str, dict[str, tuple[SuiteRecord, str]]]:
    """suite name → run label → (the run's record of it, why its declaration is unreadable)."""
    found: dict[str, dict[str, tuple[SuiteRecord, str]]] = {}
    for run in runs:
        for name, record in (run.config.get("suites") or {}).items():
            found.setdefault(name, {})[run.label] = _record(name, record)
    return dict(sorted(found.items()))


def recorded_suites(runs: Sequence[ReportRun]) -> dict[str, SuiteRecord]:
    """name → the suite as the first run recording it recorded it (see the module docstring)."""
    return {name: next(iter(records.values()))[0] for name, records in _by_run(runs).items()}


def report_suites(runs: Sequence[ReportRun]) -> dict[str, ReportSuite]:
    out = {}
    for name, records in _by_run(runs).items():
        first = next(iter(records.values()))[0]
        declared = {label: record.aggregate for label, (record, _) in records.items()}
        undeclared = {label: problem or PREDATES_DECLARATIONS for label, (record, problem) in records.items()
                      if record.has_aggregate and record.aggregate is None}
        out[name] = ReportSuite(
            name, first.tasks, first.description,
            aggregate=next((a for a in declared.values() if a is not None), None),
            has_aggregate=any(record.has_aggregate for record, _ in records.values()),
            declared=declared, undeclared=undeclared)
    return out
