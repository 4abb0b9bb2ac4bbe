"""The ``cblue`` suite: CBLUE's eight tasks and their average, as the CBLUE leaderboard scores it.

Aggregate: the plain mean of the eight tasks' headline metrics (:data:`HEADLINE`), defined only
when all eight were run — a mean over a subset would not be comparable with anything, so a
partial run raises :class:`~evalpipe.tasks.base.IncompleteSuite` naming what is missing. Published
human and baseline rows for comparison are in :mod:`evalpipe.tasks.cblue.reference`. The aggregate is
a declaration (:mod:`evalpipe.rundir.suite_aggregates`), recorded in ``config.json`` for the report.
"""

from __future__ import annotations

from collections.abc import Mapping

from evalpipe.rundir.suite_aggregates import Mean, Metric, Output, OutputGroup, SuiteAggregate
from evalpipe.tasks.base import SuiteSpec
from evalpipe.tasks.cblue.reference import TASK_ORDER
from evalpipe.tasks.registry import register_suite

#: each task's CBLUE metric (name in that task's metrics.json)
HEADLINE: Mapping[str, str] = {
    "cmeee": "f1", "cmeie": "f1", "chip_cdn": "f1", "chip_ctc": "macro_f1", "chip_sts": "macro_f1",
    "kuake_qic": "accuracy", "kuake_qtr": "accuracy", "kuake_qqr": "accuracy",
}

_HEADLINES = tuple(Metric(t, HEADLINE[t]) for t in TASK_ORDER)

#: ``{"average": mean of the 8 headline metrics, <task>: its headline metric, …}`` (0-1), as data
AGGREGATE = SuiteAggregate((OutputGroup(
    name="the CBLUE average", requires="all 8 tasks",
    outputs=(Output("average", Mean(_HEADLINES)), *(Output(m.task, m) for m in _HEADLINES)),
),))
#: called like the Python function it replaced
aggregate = AGGREGATE


SUITE = register_suite(SuiteSpec(
    name="cblue",
    tasks=TASK_ORDER,
    description="CBLUE (ACL 2022): 8 Chinese biomedical tasks; average of CMeEE/CMeIE/CDN micro-F1, "
    "CTC/STS macro-F1, QIC/QTR/QQR accuracy (dev split by default).",
    aggregate=AGGREGATE,
))
