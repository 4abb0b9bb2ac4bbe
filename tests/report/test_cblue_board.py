"""The CBLUE leaderboard section on synthetic CBLUE runs: our rows ×100 beside the paper's rows."""

import asyncio

import pandas as pd
import pytest

from evalpipe.config import RunConfig
from evalpipe.report import build_report
from evalpipe.report.boards import board_rows, split_label
from evalpipe.tasks.cblue.board import BOARD, REFERENCE_SOURCE
from evalpipe.report.runs import load_report_runs
from evalpipe.pipeline.execute import execute
from evalpipe.tasks.cblue.reference import BEST_BASELINE, HUMAN, TASK_ORDER
from tests.cblue import synthetic as syn
from tests.cblue.test_cblue_tasks import answers_by_text, first_field
from tests.support.scripted_backend import ScriptedBackend, last_user_text

RESAMPLES = 200
LABEL = "reference rows: CBLUE paper, test split; our runs: dev split — indicative"


def run(data, root, model, tasks, answers, **kw):
    config = RunConfig(tasks=tuple(tasks), model=model, base_url="http://127.0.0.1:1/v1", data_dir=str(data), **kw)
    responder = lambda prompt: answers[first_field(last_user_text(prompt))]  # noqa: E731
    outcome = asyncio.run(execute(config, lambda _: ScriptedBackend(responder, model=model), root))
    return outcome.run_dir.path


@pytest.fixture(scope="module")
def cblue_runs(tmp_path_factory):
    """All eight tasks answered perfectly (with the suite aggregate), and a partial run with one miss."""
    root = tmp_path_factory.mktemp("cblue_runs")
    data = syn.write_cblue(root / "CBLUEDatasets")
    perfect = answers_by_text(data, TASK_ORDER)
    full = run(data, root, "full", TASK_ORDER, perfect, suites=("cblue",))
    partial_tasks = ("kuake_qic", "kuake_qqr")
    answers = answers_by_text(data, partial_tasks)
    first_qic = next(iter(answers_by_text(data, ("kuake_qic",))))
    answers[first_qic] = "医疗费用"  # gold 治疗方案: one of the two QIC answers wrong → accuracy 0.5
    partial = run(data, root, "partial", partial_tasks, answers)
    return full, partial


@pytest.fixture(scope="module")
def cblue_report(cblue_runs, tmp_path_factory):
    return build_report(list(cblue_runs), tmp_path_factory.mktemp("cblue_report"), resamples=RESAMPLES)


def test_rows_put_our_headline_metrics_in_percent_beside_the_papers(cblue_runs):
    runs = load_report_runs(list(cblue_runs))
    human, baseline, full, partial = board_rows(BOARD, runs, {})
    assert (human.source, human.split, human.values["cmeee"], human.values["average"]) == ("reference", "test", 67.0, 77.1)
    assert baseline.values["chip_sts"] == BEST_BASELINE["chip_sts"] and baseline.values["average"] == 70.0
    # the perfect run: every headline metric 1.0 → 100.0; its average is metrics.json's cblue average × 100
    assert [full.values[t] for t in TASK_ORDER] == [100.0] * 8 and full.values["average"] == 100.0
    assert (full.source, full.split) == ("run", "dev")
    # the partial run: QIC accuracy 1/2 → 50.0, QQR 2/2 → 100.0; tasks not run and the average are empty
    assert partial.values["kuake_qic"] == 50.0 and partial.values["kuake_qqr"] == 100.0
    assert partial.values["cmeee"] is None and partial.values["average"] is None
    assert split_label(BOARD, runs) == LABEL


def test_report_has_the_cblue_section_in_markdown_html_and_csv(cblue_report):
    md = cblue_report.markdown.read_text(encoding="utf-8")
    section = md.split("## CBLUE leaderboard")[1].split("\n## ")[0]
    assert LABEL[0].upper() + LABEL[1:] + "." in section
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    assert lines[0].startswith("| model | rows | split | f1 / CMeEE | f1 / CMeIE | f1 / CDN | macro_f1 / CTC")
    human = "| Human (CBLUE paper) | reference (CBLUE paper) | test | " + " | ".join(
        f"{HUMAN[t]:.1f}" for t in TASK_ORDER) + " | 77.1 |"
    assert human in lines
    full = next(line for line in lines if line.startswith("| full |"))
    assert full.startswith("| full | our run | dev | 100.0 [100.0, 100.0] |") and full.endswith("| 100.0 [100.0, 100.0] |")
    partial = next(line for line in lines if line.startswith("| partial |"))
    # QIC: two samples, one right → resampled accuracies 0, 0.5, 1 → the interval spans [0, 100];
    # QTR not run; QQR both right
    assert partial.endswith("| 50.0 [0.0, 100.0] | – | 100.0 [100.0, 100.0] | – |")
    assert partial.startswith("| partial | our run | dev | – | – |")
    assert "No CBLUE average for partial" in section
    html = cblue_report.html.read_text(encoding="utf-8")
    assert 'id="cblue-leaderboard"' in html and 'href="#section-cblue"' in html and "indicative" in html
    board = pd.read_csv(cblue_report.csv)
    reference = board[board["source"] == REFERENCE_SOURCE]
    assert reference["model"].tolist() == ["Human (CBLUE paper)", "RoBERTa-wwm-ext-large (best baseline, CBLUE paper)"]
    # the CSV keeps its 0-1 scale: reference rows in the same columns as our runs' values
    assert reference.iloc[0]["cmeee:f1"] == pytest.approx(0.67) and reference.iloc[0]["cblue:average"] == pytest.approx(0.771)
    assert reference.iloc[1]["kuake_qqr:accuracy"] == pytest.approx(BEST_BASELINE["kuake_qqr"] / 100)
    ours = board[board["source"] == "run"]
    assert ours["model"].tolist() == ["full", "partial"] and ours.iloc[0]["cblue:average"] == 1.0


def test_reports_without_cblue_have_no_such_section(two_runs, tmp_path):
    result = build_report([two_runs[1]], tmp_path, resamples=RESAMPLES)
    assert "CBLUE" not in result.markdown.read_text(encoding="utf-8")
    assert set(pd.read_csv(result.csv)["source"]) == {"run"}


def test_average_without_a_recorded_aggregate_is_the_mean_of_the_eight_with_combined_replicates():
    from pathlib import Path

    import numpy as np

    from evalpipe.report.bootstrap import MetricInterval, Replicates, TaskBootstrap
    from evalpipe.report.runs import ReportRun
    from evalpipe.tasks.cblue.suite import HEADLINE

    # task i scores i/10 (0.0 … 0.7); replicate b of every task is i/10 + (b - 1)/100 for b = 0, 1, 2
    metrics = {t: {HEADLINE[t]: i / 10} for i, t in enumerate(TASK_ORDER)}
    boots = {}
    for i, t in enumerate(TASK_ORDER):
        reps = np.array([i / 10 - 0.01, i / 10, i / 10 + 0.01])
        boots[t] = TaskBootstrap(t, 3, {HEADLINE[t]: MetricInterval(HEADLINE[t], i / 10, reps[0], reps[2], "mean", 3)},
                                 Replicates({HEADLINE[t]: reps}, {HEADLINE[t]: "mean"}))
    run = ReportRun(path=Path("/runs/x"), label="x", model="x", compat=None,
                    config={"tasks": {t: {"split": "test"} for t in TASK_ORDER}}, tasks=TASK_ORDER,
                    metrics=metrics, summary={}, samples=pd.DataFrame())
    row = board_rows(BOARD, [run], {"x": boots})[-1]
    # mean of 0, 10, …, 70 = 35.0; the replicate means are 34, 35, 36 → 2.5 % / 97.5 % quantiles 34.05 / 35.95
    assert row.values["average"] == pytest.approx(35.0) and row.split == "test"
    assert row.intervals["average"] == pytest.approx((34.05, 35.95))
    assert row.intervals["chip_ctc"] == pytest.approx((29.0, 31.0))
    assert split_label(BOARD, [run]).endswith("our runs: test split — indicative")


def test_the_runs_record_the_board_and_the_suite_the_report_renders(cblue_runs):
    import json

    from evalpipe.rundir.boards import ReferenceBoard

    full, partial = (json.loads((p / "config.json").read_text(encoding="utf-8")) for p in cblue_runs)
    assert [ReferenceBoard.from_json(b) for b in full["boards"]] == [BOARD]
    assert full["suites"]["cblue"] == {"tasks": list(TASK_ORDER), "description": full["suites"]["cblue"]["description"],
                                       "has_aggregate": True}
    assert full["tasks"]["cmeee"]["kind"] == "span_ner" and full["tasks"]["cmeie"]["kind"] == "relation_extraction"
    assert partial["boards"] == full["boards"]  # any CBLUE task brings the board
