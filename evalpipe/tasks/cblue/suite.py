"""The ``cblue`` suite: CBLUE's eight tasks and their average, as the CBLUE leaderboard scores it.

Aggregate: the plain mean of the eight tasks' headline metrics (:data:`HEADLINE`), defined only
when all eight were run — a mean over a subset would not be comparable with anything, so a
partial run raises :class:`~evalpipe.tasks.base.IncompleteSuite` naming what is missing. Published
human and baseline rows for comparison are in :mod:`evalpipe.tasks.cblue.reference`.
"""

from __future__ import annotations

from collections.abc import Mapping

from evalpipe.tasks.base import IncompleteSuite, SuiteSpec
from evalpipe.tasks.cblue.reference import TASK_ORDER
from evalpipe.tasks.registry import register_suite

#: each task's CBLUE metric (name in that task's metrics.json)
HEADLINE: Mapping[str, str] = {
    "cmeee": "f1", "cmeie": "f1", "chip_cdn": "f1", "chip_ctc": "macro_f1", "chip_sts": "macro_f1",
    "kuake_qic": "accuracy", "kuake_qtr": "accuracy", "kuake_qqr": "accuracy",
}


def aggregate(metrics_by_task: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """``{"average": mean of the 8 headline metrics, <task>: its headline metric, …}`` (0-1)."""
    missing = [t for t in TASK_ORDER if HEADLINE[t] not in metrics_by_task.get(t, {})]
    if missing:
        raise IncompleteSuite(f"the CBLUE average needs all 8 tasks; missing: {', '.join(missing)}")
    scores = {t: float(metrics_by_task[t][HEADLINE[t]]) for t in TASK_ORDER}
    return {"average": sum(scores.values()) / len(scores), **scores}


SUITE = register_suite(SuiteSpec(
    name="cblue",
    tasks=TASK_ORDER,
    description="CBLUE (ACL 2022): 8 Chinese biomedical tasks; average of CMeEE/CMeIE/CDN micro-F1, "
    "CTC/STS macro-F1, QIC/QTR/QQR accuracy (dev split by default).",
    aggregate=aggregate,
))
