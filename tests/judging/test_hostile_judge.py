"""A hostile judge cannot stop judging (issue 22, item 10): a NaN or Infinity rating and a reply nested
50,000 deep are unusable judgements — stored as received, retried once, counted — never a crash."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from evalpipe.judging.panel import Judge
from evalpipe.judging.run import JudgeOptions, execute_judging
from tests.judging.test_judge_run import Judges, metrics_of

HOSTILE = {
    "nan": '{"accuracy": NaN, "relevance": NaN, "completeness": NaN, "clarity": NaN}',
    "infinity": '{"accuracy": Infinity, "relevance": 1, "completeness": 1, "clarity": 1}',
    "deep": '{"accuracy": ' + "[" * 50_000 + "]" * 50_000 + "}",
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_hostile_judge_is_counted_unusable_and_its_replies_are_stored(run_copy, kind):
    panel = [Judge("judge-a", "http://127.0.0.1:9/v1")]
    factory = Judges(lambda name, prompt: HOSTILE[kind])
    outcome = asyncio.run(execute_judging(run_copy, panel, JudgeOptions(), backend_factory=factory))
    with sqlite3.connect(run_copy / "responses.sqlite") as db:
        rows = db.execute("SELECT attempt, ratings, problem, text FROM judgements").fetchall()
    items = outcome.sent // 2  # each pair: the reply and its one retry
    assert items > 0 and outcome.unusable == items and outcome.failed_requests == 0
    assert len(rows) == 2 * items and all(r[1] is None and r[2] for r in rows)
    assert all(r[3] == HOSTILE[kind] for r in rows)  # stored as received
    assert metrics_of(run_copy)["judge_failures"] == items
