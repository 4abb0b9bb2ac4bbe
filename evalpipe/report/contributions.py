"""Report sections that read something a run directory may hold besides its metrics (a run's cost,
a contamination probe's ``contamination.json``).

Each is a report module that registers a :class:`SuiteSection` on import
(:mod:`evalpipe.report.costs`, :mod:`evalpipe.report.contamination`);
:func:`evalpipe.report.build.build_report` asks every registered section whether it applies to the
runs at hand and, if so, adds it after the leaderboard (and its reference rows, if any, to
``leaderboard.csv``). Task families do not register here: what a family shows (the CBLUE paper's
rows) is data recorded in the run directory (:mod:`evalpipe.rundir.boards`, rendered by
:mod:`evalpipe.report.boards`), so no module of ``evalpipe.tasks`` imports the report.
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
    """Every registered section (the report's own modules register theirs when imported)."""
    return list(_SECTIONS.values())
