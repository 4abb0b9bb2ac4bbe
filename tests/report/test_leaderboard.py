"""Leaderboard layout: column groups, best per column, suite aggregates and averages with intervals."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evalpipe.report.bootstrap import MetricInterval, Replicates, TaskBootstrap
from evalpipe.report.leaderboard import Entry, build_leaderboard, primary_metric, shown_metrics
from evalpipe.report.runs import ReportRun
from evalpipe.tasks.base import IncompleteSuite, SuiteSpec


def run(label, metrics, tasks=("a", "b")):
    return ReportRun(path=Path(f"/runs/{label}"), label=label, model=label, compat=None, config={},
                     tasks=tasks, metrics=metrics, summary={}, samples=pd.DataFrame())


def boot(task, **values):
    """A bootstrap whose replicates are the given arrays (intervals = their min/max)."""
    arrays = {m: np.asarray(v, dtype=float) for m, v in values.items()}
    intervals = {m: MetricInterval(m, float(np.mean(v)), float(v.min()), float(v.max()), "mean", v.size)
                 for m, v in arrays.items()}
    return TaskBootstrap(task, 10, intervals, Replicates(arrays, {m: "mean" for m in arrays}))


def level_score(by_task):
    return {"level": (by_task["a"]["f1"] + by_task["b"]["acc"]) / 2}


SUITES = {"lvl": SuiteSpec("lvl", ("a", "b"), aggregate=level_score), "plain": SuiteSpec("plain", ("a", "b"))}


def test_columns_grouped_by_suite_with_aggregate_and_average():
    x = run("x", {"a": {"f1": 0.8, "n": 10}, "b": {"acc": 0.6, "parse_failure_rate": 0.1}, "lvl": {"level": 0.7}})
    y = run("y", {"a": {"f1": 0.9}, "b": {"acc": 0.5}, "lvl": {"level": 0.7}})
    boots = {"x": {"a": boot("a", f1=[0.7, 0.8, 0.9]), "b": boot("b", acc=[0.5, 0.6, 0.7])},
             "y": {"a": boot("a", f1=[0.9, 0.9, 0.9]), "b": boot("b", acc=[0.4, 0.5, 0.6])}}
    board = build_leaderboard([x, y], boots, SUITES, {})
    # members, then the suite's own aggregate; the suite without one gets the average of primaries
    assert [c.key for c in board.columns] == ["a:f1", "b:acc", "lvl:level", "plain:f1/acc"]
    assert [c.kind for c in board.columns] == ["task", "task", "aggregate", "average"]
    a_f1, b_acc, level, average = board.columns
    assert board.best(a_f1) == {"y"} and board.best(b_acc) == {"x"}
    assert board.best(level) == {"x", "y"}  # ties are all marked
    # aggregate interval: replicate b of both members → x: (0.7+0.5)/2, (0.8+0.6)/2, (0.9+0.7)/2
    # = 0.6, 0.7, 0.8; 2.5 % quantile (linear) at position 0.025·2 = 0.05 → 0.6 + 0.05·0.1 = 0.605
    e = board.entry("x", level)
    assert e.value == 0.7 and (e.low, e.high) == pytest.approx((0.605, 0.795))
    # average of primary metrics: x (0.8 + 0.6) / 2 = 0.7; y (0.9 + 0.5) / 2 = 0.7; same replicates
    assert board.entry("x", average).value == pytest.approx(0.7)
    assert (board.entry("x", average).low, board.entry("x", average).high) == pytest.approx((0.605, 0.795))
    table = board.to_table()
    assert table.groups == (("", 1), ("a", 1), ("b", 1), ("lvl", 1), ("plain (average)", 1))
    assert [c.bold for c in table.rows[1]] == [False, True, False, True, True]
    frame = board.to_frame()
    assert frame.shape == (2, 3 + 3 * 4) and frame.loc[1, "a:f1"] == 0.9


def test_aggregate_that_cannot_be_computed_has_no_interval():
    def incomplete(by_task):
        raise IncompleteSuite("b missing")

    x = run("x", {"a": {"f1": 0.8}, "b": {"acc": 0.6}, "lvl": {"level": 0.7}})
    boots = {"x": {"a": boot("a", f1=[0.7, 0.9]), "b": boot("b", acc=[0.5, 0.7])}}
    board = build_leaderboard([x], boots, {"lvl": SuiteSpec("lvl", ("a", "b"), aggregate=incomplete)}, {})
    assert board.entry("x", board.columns[2]) == Entry(
        0.7, reason="the suite aggregate could not be recomputed on resamples of its member tasks")
    cell = board.to_table().rows[0][3]  # says "no interval", and why on hover
    assert (cell.text, cell.sub, cell.title) == ("0.700", "no interval", board.entry("x", board.columns[2]).reason)


def test_lower_is_better_and_single_model_marks_nothing():
    x = run("x", {"a": {"wer": 0.2}}, tasks=("a",))
    y = run("y", {"a": {"wer": 0.3}}, tasks=("a",))
    board = build_leaderboard([x, y], {}, {}, {})
    assert board.best(board.columns[0]) == {"x"}
    alone = build_leaderboard([x], {}, {}, {})
    assert alone.best(alone.columns[0]) == set()


def test_average_only_for_models_that_ran_every_member():
    x = run("x", {"a": {"f1": 0.8}, "b": {"acc": 0.6}})
    partial = run("p", {"a": {"f1": 0.9}}, tasks=("a",))
    board = build_leaderboard([x, partial], {}, {"s": SuiteSpec("s", ("a", "b"))}, {})
    average = board.columns[-1]
    assert average.kind == "average" and board.entry("p", average).value is None


def test_primary_metric_prefers_declared_then_f1():
    class Spec:
        metrics = ("precision", "recall", "f1")

    assert primary_metric(Spec(), ["precision", "recall", "f1"]) == "f1"
    Spec.metrics = ("rouge1", "bertscore_f1")
    assert primary_metric(Spec(), ["rouge1", "bertscore_f1"]) == "bertscore_f1"
    Spec.primary_metric = "rouge1"
    assert primary_metric(Spec(), ["rouge1", "bertscore_f1"]) == "rouge1"
    assert primary_metric(None, ["n", "accuracy"]) == "accuracy"


def test_shown_metrics_declared_order_patterns_and_tagged_f1():
    class Spec:
        metrics = ("rouge1", "rougeL")

    present = ["rougeL", "rouge1", "rouge2", "bertscore[enc@L6]_precision", "bertscore[enc@L6]_f1", "n"]
    assert shown_metrics(Spec(), present) == ["rouge1", "rougeL", "bertscore[enc@L6]_f1"]
    Spec.metrics = ("bertscore[*]_precision", "rouge2")
    assert shown_metrics(Spec(), present) == ["bertscore[enc@L6]_precision", "rouge2", "bertscore[enc@L6]_f1"]
    assert shown_metrics(None, present) == present[:-1]  # unregistered task: all but bookkeeping


def test_declared_primary_metric_drives_averages_and_disagreement_ranking():
    from evalpipe.report.compare import _score_key
    from evalpipe.tasks.registry import get_task

    ncbi = get_task("ncbi_disease")
    assert ncbi.primary_metric == "f1"
    # declared wins even where the heuristic would pick another F1 first
    assert primary_metric(ncbi, ["partial_f1", "accuracy", "f1"]) == "f1"

    class Spec:
        metrics = ("macro_f1", "accuracy")
        primary_metric = "accuracy"

    # suite average: the heuristic would average macro_f1 (first F1-like); the declared metric is used
    x = run("x", {"a": {"macro_f1": 0.2, "accuracy": 0.8}, "b": {"macro_f1": 0.4, "accuracy": 0.6}})
    board = build_leaderboard([x], {}, {"s": SuiteSpec("s", ("a", "b"))}, {"a": Spec(), "b": Spec()})
    average = board.columns[-1]
    assert average.metric == "accuracy" and board.entry("x", average).value == pytest.approx(0.7)
    # disagreements are ranked by the primary metric's per-sample score when both runs have it
    records = {"0": {"scores": {"macro_f1": 0.0, "accuracy": 1.0}}}
    corpus = ["macro_f1", "accuracy"]
    assert _score_key("a", records, records, primary_metric(Spec(), corpus), corpus) == "accuracy"
    # without a declaration: the first F1-like metric
    assert _score_key("a", records, records, primary_metric(None, corpus), corpus) == "macro_f1"


def _recorded(aggregate=None, has_aggregate=True):
    from evalpipe.rundir.suites import SuiteRecord

    return {"lvl": SuiteRecord("lvl", ("a", "b"), "", has_aggregate, aggregate).to_json()}


def test_a_recorded_declaration_gives_the_aggregate_its_interval():
    """The level of the first test, declared as data in config.json: the same value and interval."""
    import json

    from evalpipe.report.suites import report_suites
    from evalpipe.rundir.suite_aggregates import Mean, Metric, Output, OutputGroup, SuiteAggregate

    declared = SuiteAggregate((OutputGroup("lvl", "a and b", (
        Output("level", Mean((Metric("a", "f1"), Metric("b", "acc")))),)),))
    x = run("x", {"a": {"f1": 0.8}, "b": {"acc": 0.6}, "lvl": {"level": 0.7}})
    x.config["suites"] = json.loads(json.dumps(_recorded(declared)))
    older = run("old", {"a": {"f1": 0.8}, "b": {"acc": 0.6}, "lvl": {"level": 0.7}})
    older.config["suites"] = _recorded()  # recorded before declarations: no formula
    oldest = run("oldest", {"a": {"f1": 0.8}, "b": {"acc": 0.6}, "lvl": {"level": 0.7}})  # no suites at all
    boots = {r: {"a": boot("a", f1=[0.7, 0.8, 0.9]), "b": boot("b", acc=[0.5, 0.6, 0.7])} for r in ("x", "old", "oldest")}
    board = build_leaderboard([x, older, oldest], boots, report_suites([x, older, oldest]), {})
    level = next(c for c in board.columns if c.kind == "aggregate")
    e = board.entry("x", level)
    assert e.value == 0.7 and (e.low, e.high) == pytest.approx((0.605, 0.795))
    # the older runs keep their values, without an interval, and say why; the note says it once
    assert board.entry("old", level).value == 0.7 and board.entry("old", level).low is None
    assert "predates declared suite aggregates" in board.entry("old", level).reason
    assert "predates recorded suites" in board.entry("oldest", level).reason
    assert any("predates declared suite aggregates" in note for note in board.notes)
    assert all(c.kind != "average" for c in board.columns)  # a suite with an aggregate gets no average
