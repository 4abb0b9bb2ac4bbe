"""Report sections a task family contributes (e.g. a paper's published rows beside your runs).

The report knows no task or suite by name. A family that has something of its own to show — the
CBLUE paper's human and best-model rows, say — registers a :class:`SuiteSection` from its package
(``evalpipe/tasks/cblue/board.py``); :func:`evalpipe.report.build.build_report` asks every registered
contribution whether it applies to the runs at hand and, if so, adds its section after the
leaderboard and its reference rows to ``leaderboard.csv``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SuiteSection", "register_section", "sections"]


@dataclass(frozen=True)
class SuiteSection:
    """One family's contribution to a report.

    ``applies(runs)`` says whether the runs hold anything for it; ``section(runs, boots, level)``
    returns a :class:`evalpipe.report.document.Section`; ``reference_rows(runs, boots, level)``
    returns extra ``leaderboard.csv`` rows (a DataFrame with the leaderboard's columns and a
    ``source`` column that tells them apart from runs), or None.
    """

    name: str
    applies: Callable[[Sequence[Any]], bool]
    section: Callable[[Sequence[Any], Mapping[str, Any], float], Any]
    reference_rows: Callable[[Sequence[Any], Mapping[str, Any], float], Any] | None = None


_SECTIONS: dict[str, SuiteSection] = {}


def register_section(contribution: SuiteSection) -> SuiteSection:
    if contribution.name in _SECTIONS and _SECTIONS[contribution.name] is not contribution:
        raise ValueError(f"report section {contribution.name!r} registered twice")
    _SECTIONS[contribution.name] = contribution
    return contribution


def sections() -> list[SuiteSection]:
    """Every registered contribution (task families are imported first, so theirs are there)."""
    from evalpipe.tasks.registry import load_builtin_tasks

    load_builtin_tasks()
    return list(_SECTIONS.values())
