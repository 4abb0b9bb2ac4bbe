"""Reports people read: leaderboard with bootstrap intervals, paired comparison, NER error analysis.

Entry points (wired into the CLI as ``evalpipe report`` and ``evalpipe compare``):
:func:`evalpipe.report.build.build_report`, :func:`evalpipe.report.build.compare_runs` and
:func:`evalpipe.report.compare.render_compare_terminal`. Modules, one concept each:
``bootstrap`` (intervals, paired test, from the per-sample parts and declared aggregations),
``runs`` (a run as the report reads it: its directory only), ``leaderboard``, ``contributions``
(sections a task family registers, e.g. the CBLUE paper's rows), ``operations`` (failures, tokens,
latency), ``ner_errors``, ``compare``, ``summary`` (the plain-language summary at the top),
``glossary`` (what each metric means), ``browser`` (the sample browser component) and
``browser_data`` (the runs' samples as its data, and the links from numbers into it), ``plots``
(inline SVG), ``document`` (format-neutral blocks), ``markdown`` and ``html`` (renderers), ``build``.
"""

from evalpipe.report.build import BuildResult, build_report, compare_runs
from evalpipe.report.compare import CompareResult, render_compare_terminal

__all__ = ["BuildResult", "CompareResult", "build_report", "compare_runs", "render_compare_terminal"]
