"""Models tied with the best: Holm's correction and McNemar's exact test by hand, the tied group of
three NCBI runs (two that differ on one sentence, one that answers nothing), leaderboard.csv's
``tied_with_best`` column, and a model whose primary metric is null (not computed)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from evalpipe.report import build_report
from evalpipe.report.runs import load_report_runs
from evalpipe.report.ties import add_ties, holm, mcnemar_exact, task_ties
from tests.report.support import gold_answers, make_run
from tests.support.scripted_backend import query_text

LIMIT = 30


def test_holm_by_hand():
    # sorted: 0.01 (×3 = 0.03), 0.02 (×2 = 0.04), 0.04 (×1 = 0.04); back in input order
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    # monotone: a later step never goes below an earlier one
    assert holm([0.02, 0.021]) == pytest.approx([0.04, 0.04])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])
    assert holm([]) == []


def test_mcnemar_exact_by_hand():
    # b = 1, c = 5: 2 · P(X ≤ 1) for X ~ Bin(6, 1/2) = 2 · (1 + 6) / 64
    assert mcnemar_exact(1, 5) == pytest.approx(14 / 64)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 7) == pytest.approx(2 / 128)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("ties")
    gold = gold_answers()
    first = next(text for text in list(gold)[:LIMIT] if "<disease>" in gold[text])  # in the run, with entities

    def one_off(prompt):  # the gold answers, but the first sentence's entities dropped
        text = query_text(prompt)
        return "<response>" + text + "</response>" if text == first else gold[text]

    perfect = make_run(root, "perfect", lambda p: gold[query_text(p)], limit=LIMIT)
    near = make_run(root, "near", one_off, limit=LIMIT)
    silent = make_run(root, "silent", lambda p: RuntimeError("HTTP 500 after 3 attempts"), limit=LIMIT)
    return perfect, near, silent


def test_two_that_differ_on_one_sentence_are_tied_and_the_one_that_answers_nothing_is_not(three_runs, tmp_path):
    out = tmp_path / "report"
    build_report(list(three_runs), out, resamples=300)
    with (out / "leaderboard.csv").open() as handle:
        rows = {r["model"]: r for r in csv.DictReader(handle)}
    column = "ncbi_disease:f1:tied_with_best"
    assert {m: rows[m][column] for m in rows} == {"perfect": "true", "near": "true", "silent": "false"}
    assert f"{column}:ci_low" not in next(iter(rows.values()))
    md = (out / "report.md").read_text()
    assert "Models tied with the best" in md

    runs = load_report_runs(list(three_runs))
    ties = task_ties("ncbi_disease", runs, runs[0].info.get("ncbi_disease"), resamples=300)
    assert ties is not None and ties.best == "perfect" and ties.metric == "f1"
    near, silent = ties.of("near"), ties.of("silent")
    assert near.shared == LIMIT and near.p_holm is not None and near.p_holm >= 0.05 and near.diff > 0
    # the silent model answered nothing: its F1 is not computed (null, docs/coverage.md), so it is not
    # compared with the best (no p-value) and not tied, with the reason shown
    assert silent.p_value is None and silent.p_holm is None and not silent.tied and silent.reason


def test_a_model_with_a_null_primary_metric_is_not_tied_and_not_compared(three_runs, tmp_path):
    copy = tmp_path / "nothing"
    import shutil

    shutil.copytree(three_runs[2], copy)
    metrics = json.loads((copy / "metrics.json").read_text())
    metrics["ncbi_disease"]["f1"] = None  # "not computed", as a run with no answered sample reports it
    (copy / "metrics.json").write_text(json.dumps(metrics))
    runs = load_report_runs([three_runs[0], three_runs[1], copy])
    ties = task_ties("ncbi_disease", runs, runs[0].info.get("ncbi_disease"), resamples=200)
    comparison = ties.of(runs[2].label)
    assert not comparison.tied and comparison.p_value is None and "not computed" in comparison.reason
    assert ties.of("near").tied  # one comparison left: Holm has nothing to multiply by

    from evalpipe.report.leaderboard import build_leaderboard

    board = add_ties(build_leaderboard(runs, {}, {}, {}), {"ncbi_disease": ties})
    frame = board.to_frame()
    assert list(frame["ncbi_disease:f1:tied_with_best"]) == ["true", "true", "false"]
