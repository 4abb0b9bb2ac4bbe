"""Reports people read: leaderboard with bootstrap intervals, paired comparison, NER error analysis.

Entry points (wired into the CLI as ``evalpipe report`` and ``evalpipe compare``):
:func:`evalpipe.report.build.build_report`, :func:`evalpipe.report.build.compare_runs` and
:func:`evalpipe.report.compare.render_compare_terminal`. Modules, one concept each:
``bootstrap`` (intervals, paired test, from the per-sample parts and declared aggregations),
``runs`` (a run as the report reads it: its directory only), ``leaderboard``, ``suites`` (the
suites the runs recorded, with their aggregates' declarations), ``boards`` (a family's published rows,
recorded as data, e.g. the CBLUE paper's), ``operations`` (failures, tokens,
latency), ``ner_errors``, ``compare``, ``variants`` (robustness across prompt conditions),
``judging`` (judges' ratings, agreement and bias checks), ``summary`` (the plain-language summary at the
top), ``glossary`` (what each metric means), ``browser`` (the sample browser component) and
``browser_data`` (the runs' samples as its data, and the links from numbers into it), ``plots``
(inline SVG), ``document`` (format-neutral blocks), ``markdown`` and ``html`` (renderers), ``build``.

The entry points are imported on first use: importing a light module of this package must not load
pandas and matplotlib — ``evalpipe tasks`` would pay for them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BuildResult", "CompareResult", "build_report", "compare_runs", "render_compare_terminal"]


def __getattr__(name: str) -> Any:
    if name in ("BuildResult", "build_report", "compare_runs"):
        from evalpipe.report import build

        return getattr(build, name)
    if name in ("CompareResult", "render_compare_terminal"):
        from evalpipe.report import compare

        return getattr(compare, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
