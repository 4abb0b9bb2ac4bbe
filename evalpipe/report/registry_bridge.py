"""The one place the report reads the task registry — a documented exception to "the report renders
from the run directory alone" (``tests/test_architecture.py`` allows this module, and only it).

Two things are reached through it, both lazily (only when a report needs them):

* **a suite's Python aggregate**, to recompute it on bootstrap replicates of its member tasks (the
  interval of CLUE's level score, CBLUE's average as a suite aggregate). Its *value* is the run's
  own (``metrics.json``), and the suite's members and whether it has an aggregate are recorded in
  ``config.json`` (``suites``); but an aggregate such as CLUE's level score is Python, not a
  declarative formula, so its replicates need the function. A suite no longer registered gets no
  aggregate interval, and the leaderboard says why.
* **run directories written before config.json recorded ``suites`` and ``boards``**: the registered
  suites and boards stand in for them, so the report of an older run is what it always was.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from evalpipe.rundir.boards import ReferenceBoard
from evalpipe.rundir.suites import SuiteRecord

__all__ = ["Aggregate", "registered_boards", "registered_suites", "suite_aggregate"]

Aggregate = Callable[[Mapping[str, Mapping[str, float]]], dict[str, float]]


def suite_aggregate(name: str) -> Aggregate | None:
    """The registered suite's aggregate function (None: not registered, or it has none)."""
    from evalpipe.tasks.registry import suites

    suite = suites().get(name)
    return suite.aggregate if suite is not None else None


def registered_suites() -> dict[str, SuiteRecord]:
    """Every registered suite as a run directory would record it (fallback for older runs)."""
    from evalpipe.tasks.registry import suites

    return {name: SuiteRecord(name, s.tasks, s.description, s.aggregate is not None) for name, s in suites().items()}


def registered_boards() -> list[ReferenceBoard]:
    """Every registered reference board (fallback for older runs)."""
    from evalpipe.tasks.registry import boards

    return boards()
