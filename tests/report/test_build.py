"""End to end: report and compare on two NCBI runs (a perfect and a sloppy responder)."""

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from evalpipe.frames import load_samples
from evalpipe.report import build_report, compare_runs, render_compare_terminal
from evalpipe.report.build import score_length_plots
from evalpipe.report.ner_errors import analyse
from evalpipe.report.operations import task_operations
from evalpipe.report.runs import ReportRun, load_report_runs
from tests.report.support import LIMIT, gold_answers, make_run
from tests.support.scripted_backend import query_text

RESAMPLES = 200
#: the path of a hand-made ReportRun (never read)
NOWHERE = Path("/nonexistent/run")


@pytest.fixture(scope="module")
def report(two_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    return build_report(list(two_runs), out, resamples=RESAMPLES, seed=0)


def test_html_is_self_contained_and_has_every_table_and_plot(report):
    html = report.html.read_text(encoding="utf-8")
    table_ids = re.findall(r'<table id="([^"]+)"', html)
    assert table_ids == ["runs", "leaderboard", "ties-ncbi_disease", "metrics-ncbi_disease", "ner-ncbi_disease-0",
                         "ner-ncbi_disease-1", "operations", "compare-differences", "glossary", "bootstrap-timing"]
    sections = re.findall(r'<section id="([^"]+)"', html)
    assert sections == ["section-summary", "section-runs", "section-leaderboard", "section-ties",
                        "section-task-ncbi_disease",
                        "section-operations", "section-compare", "samples", "section-glossary", "section-method"]
    # the contents list every section by its anchor
    nav = re.search(r"<nav>(.*?)</nav>", html).group(1)
    assert re.findall(r'href="#([^"]+)"', nav) == sections
    # one metric bar chart per task + the parse-failure chart; NCBI has no ROUGE, so no length plot
    assert html.count("<svg") == 2
    assert re.findall(r'<figure id="([^"]+)"', html) == ["plot-metrics-ncbi_disease", "plot-parse-failures"]
    # the only scripts are the sample browser's data block and program, inside its section
    browser = re.search(r'<section id="samples".*?</section>', html, re.S).group(0)
    assert html.count("<script") == browser.count("<script") == 2
    assert "<link" not in html and "<img" not in html and " src=" not in html
    assert all(ref.startswith("#") for ref in re.findall(r'(?:src|href)="([^"]*)"', html))
    ids = re.findall(r'\sid="([^"]+)"', html)
    assert len(ids) == len(set(ids))  # figures' element ids are prefixed, sections and tables distinct
    assert 'id="compare-disagreements"' in html and 'id="ner-ncbi_disease-1-examples"' in html


def test_leaderboard_csv_and_markdown(report, two_runs):
    board = pd.read_csv(report.csv)
    # model, run, source + (value, low, high) × 5 NCBI metrics + coverage (the sloppy run has failed requests)
    # + f1:tied_with_best (evalpipe.report.ties)
    assert board.shape == (2, 3 + 3 * 5 + 1 + 1)
    assert board["ncbi_disease:f1:tied_with_best"].tolist() == [True, False]  # sloppy is far below perfect
    assert board["source"].tolist() == ["run", "run"]
    assert board["model"].tolist() == ["perfect", "sloppy"]
    sloppy = board.iloc[1]
    metrics = json.loads((two_runs[1] / "metrics.json").read_text())["ncbi_disease"]
    assert metrics["errors"] > 0 and sloppy["ncbi_disease:coverage"] == pytest.approx(metrics["answered"] / metrics["n"])
    assert board.iloc[0]["ncbi_disease:coverage"] == 1.0
    assert sloppy["ncbi_disease:f1"] == pytest.approx(metrics["f1"])
    assert sloppy["ncbi_disease:f1:ci_low"] < metrics["f1"] < sloppy["ncbi_disease:f1:ci_high"]
    # a perfect model's interval has no width
    assert board.iloc[0]["ncbi_disease:f1:ci_low"] == board.iloc[0]["ncbi_disease:f1:ci_high"] == 1.0
    md = report.markdown.read_text(encoding="utf-8")
    assert "| perfect | **1.000** [1.000, 1.000]" in md
    assert md.count("\n| model |") >= 2 and "## Comparison" in md


def test_operations_counts(two_runs):
    sloppy = load_report_runs([two_runs[1]])[0]
    ops = task_operations(sloppy, "ncbi_disease")
    metrics = sloppy.metrics["ncbi_disease"]
    assert (ops.n, ops.errors) == (LIMIT, metrics["errors"])
    assert ops.parse_failure_rate == pytest.approx(metrics["parse_failure_rate"])
    # ScriptedBackend reports 100 prompt and 20 completion tokens per answered request
    assert ops.prompt_tokens == 100 * (LIMIT - ops.errors) and ops.mean_completion_tokens == 20
    assert ops.input_truncated == 0.0 and ops.hit_max_tokens == 0.0  # scripted answers all stop
    assert ops.latency_p50 == pytest.approx(0.01)


def test_operations_truncation_shares_over_samples_that_record_them():
    samples = pd.DataFrame({
        "task": ["t"] * 4, "id": list("abcd"), "error": [None, None, None, "HTTP 500"],
        "parse_failed": [False, True, False, None], "truncated_tokens": [0.0, 120.0, float("nan"), 0.0],
        "finish_reason": ["length", "stop", None, None], "prompt_tokens": [10.0, 10.0, 10.0, float("nan")],
        "completion_tokens": [5.0, 5.0, 5.0, float("nan")], "latency_s": [1.0, 2.0, 3.0, None],
    })
    run = ReportRun(path=NOWHERE, label="m", model="m", compat=None, config={}, tasks=("t",),
                    metrics={}, summary=None, samples=samples)
    ops = task_operations(run, "t")
    # truncation: 1 of the 3 samples that record it; max_tokens: 1 of the 2 answered with a reason
    assert ops.input_truncated == pytest.approx(1 / 3) and ops.hit_max_tokens == 0.5
    assert (ops.errors, ops.parse_failures, ops.parse_failure_rate) == (1, 1, pytest.approx(1 / 3))
    assert ops.latency_p50 == 2.0 and ops.prompt_tokens == 30


def test_ner_outcomes_add_up_to_the_strict_counts(two_runs):
    run = load_report_runs([two_runs[1]])[0]
    analysis = analyse("ncbi_disease", run.full_records(r for r in run.records if r["task"] == "ncbi_disease"))
    m = run.metrics["ncbi_disease"]
    gold = sum(analysis.total("gold", c) for c in ("correct", "type", "boundary", "boundary+type", "missed"))
    pred = sum(analysis.total("pred", c) for c in ("correct", "type", "boundary", "boundary+type", "spurious"))
    assert analysis.total("gold", "correct") == analysis.total("pred", "correct") == m["tp"]
    assert (gold, pred) == (m["tp"] + m["fn"], m["tp"] + m["fp"])
    assert analysis.total("pred", "boundary") > 0 and analysis.total("gold", "missed") > 0


def test_compare_finds_the_better_model_and_shows_disagreements(two_runs, tmp_path):
    result = compare_runs(two_runs[0], two_runs[1], resamples=RESAMPLES, seed=0, top=5, out=tmp_path)
    diffs = {d.metric: d for _, d in result.differences}
    assert diffs["f1"].diff > 0 and diffs["f1"].p_value < 0.05 and diffs["f1"].low > 0
    assert diffs["f1"].p_value == pytest.approx(2 / (RESAMPLES + 1))
    (task,) = result.tasks
    # compared on the samples both answered: the sloppy run's failed requests are in A only
    errors = json.loads((two_runs[1] / "metrics.json").read_text())["ncbi_disease"]["errors"]
    assert errors and (task.shared, task.only_a, task.only_b) == (LIMIT - errors, errors, 0)
    assert 0 < len(task.disagreements) <= 5
    first = task.disagreements[0]
    assert (first.score_key, first.score_a, first.score_b) == ("f1", 1.0, 0.0)
    assert first.gold and first.prompt_excerpt
    assert 'id="compare-differences"' in (tmp_path / "compare.html").read_text(encoding="utf-8")
    assert (tmp_path / "compare.md").is_file()
    console = Console(record=True, width=200)
    render_compare_terminal(result, console)
    text = console.export_text()
    assert "A - B" in text and "ncbi_disease" in text and f"{LIMIT - errors} shared samples (answered in both)" in text


def test_compare_identical_runs_gives_zero_difference_and_p_one(two_runs):
    result = compare_runs(two_runs[1], two_runs[1], resamples=RESAMPLES)
    for _, d in result.differences:
        assert d.diff == 0 and d.p_value == 1.0
    assert result.tasks[0].disagreements == ()


def test_compare_uses_shared_samples_only(two_runs, tmp_path):
    gold = gold_answers()
    first_half = make_run(tmp_path, "perfect-half", lambda prompt: gold[query_text(prompt)], limit=LIMIT // 2)
    result = compare_runs(first_half, two_runs[1], resamples=RESAMPLES)
    (task,) = result.tasks
    sloppy = load_samples(two_runs[1])
    answered = sloppy["error"].isna()
    shared = int(answered.iloc[: LIMIT // 2].sum())  # the first half, less B's failed requests
    assert shared < LIMIT // 2 and (task.shared, task.only_a, task.only_b) == (
        shared, LIMIT // 2 - shared, int(answered.sum()) - shared)
    # B's F1 is recomputed on the shared half: micro F1 from its first 30 samples' counts (those answered)
    half = sloppy.iloc[: LIMIT // 2][answered.iloc[: LIMIT // 2]]
    tp, fp, fn = (half[f"score.{k}"].sum() for k in ("tp", "fp", "fn"))
    f1 = {d.metric: d for d in task.differences}["f1"]
    assert f1.b == pytest.approx(2 * tp / (2 * tp + fp + fn)) and f1.a == 1.0


def test_the_report_needs_only_the_run_directory(two_runs, tmp_path, monkeypatch):
    """Data deleted (and the task registry out of reach): the report is byte-for-byte the same,
    every metric with its interval."""
    before = build_report([two_runs[1]], tmp_path / "before", resamples=RESAMPLES)
    copy = tmp_path / "elsewhere" / two_runs[1].name
    shutil.copytree(two_runs[1], copy)
    config = json.loads((copy / "config.json").read_text())
    for files in config["tasks"].values():
        files["data_files"] = {str(tmp_path / "deleted.tsv"): "0" * 64}  # as if the data were gone
    (copy / "config.json").write_text(json.dumps(config))
    import evalpipe.tasks.registry as registry

    monkeypatch.setattr(registry, "get_task", lambda name: (_ for _ in ()).throw(AssertionError("task loaded")))
    after = build_report([copy], tmp_path / "after", resamples=RESAMPLES)
    board_before, board_after = pd.read_csv(before.csv), pd.read_csv(after.csv)
    value_columns = [c for c in board_before.columns if c not in ("run",)]
    pd.testing.assert_frame_equal(board_before[value_columns], board_after[value_columns])
    intervals = [c for c in board_after.columns if c.endswith(":ci_low")]
    assert intervals and board_after[intervals].notna().all().all()  # every metric has its interval
    assert "ncbi_disease:accuracy:ci_low" in intervals


def test_text_tasks_get_score_vs_length_plots():
    samples = pd.DataFrame({
        "task": ["summ"] * 3, "answer_chars": [10.0, 200.0, 40.0],
        "score.rouge1": [0.2, 0.6, 0.4], "score.rougeL": [0.1, 0.5, 0.3],
        "score.bertscore_precision": [0.7, 0.8, 0.9], "score.bertscore_f1": [0.8, 0.9, 0.85], "score.other": [1.0, 1.0, 1.0],
    })
    run = ReportRun(path=NOWHERE, label="m", model="m", compat=None, config={}, tasks=("summ",),
                    metrics={}, summary=None, samples=samples)
    plots = score_length_plots("summ", [run])
    assert [p.id for p in plots] == ["plot-length-summ-rougeL", "plot-length-summ-bertscore_f1"]
    assert all(p.svg.startswith("<svg") for p in plots)
    no_rouge = ReportRun(path=NOWHERE, label="m", model="m", compat=None, config={}, tasks=("summ",),
                         metrics={}, summary={}, samples=samples.drop(columns=["score.rougeL", "score.rouge1"]))
    assert score_length_plots("summ", [no_rouge]) == []



def test_terminal_keeps_bracketed_metric_names():
    from evalpipe.report.bootstrap import PairedDifference
    from evalpipe.report.compare import CompareResult, Disagreement, TaskComparison

    diff = PairedDifference("bertscore[enc@L6]_f1", 0.5, 0.4, 0.1, 0.05, 0.15, 0.01, 100, "mean")
    sample = Disagreement("summ", "s[1]", "bertscore[enc@L6]_f1", 0.9, 0.1, "[bold]prompt", "[red]a", None, "gold")
    result = CompareResult("a[x]", "b", "/a", "/b", 100, 0, (TaskComparison("summ", 1, 0, 0, (diff,), (sample,)),))
    console = Console(record=True, width=200)
    render_compare_terminal(result, console)
    text = console.export_text()
    for shown in ("bertscore[enc@L6]_f1", "a[x]", "[bold]prompt", "[red]a", "(no answer)", "summ / s[1]"):
        assert shown in text


def test_finish_reason_recorded_by_the_runner_feeds_hit_max_tokens(tmp_path):
    import asyncio
    from dataclasses import replace

    from evalpipe.config import RunConfig
    from evalpipe.pipeline.execute import execute
    from tests.support.scripted_backend import ScriptedBackend

    gold = gold_answers()

    class CutOff(ScriptedBackend):
        """Every third answer stops at max_tokens (finish_reason "length"), as a real endpoint says."""

        async def complete(self, prompt):
            completion = await super().complete(prompt)
            return replace(completion, finish_reason="length") if len(self.calls) % 3 == 0 else completion

    config = RunConfig(tasks=("ncbi_disease",), model="cut", base_url="http://127.0.0.1:1/v1", limit=12)
    outcome = asyncio.run(execute(config, lambda _: CutOff(lambda p: gold[query_text(p)], model="cut"), tmp_path))
    (run,) = load_report_runs([outcome.run_dir.path])
    assert run.samples["finish_reason"].tolist().count("length") == 4
    ops = task_operations(run, "ncbi_disease")
    assert ops.hit_max_tokens == pytest.approx(4 / 12) and ops.input_truncated == 0.0


def test_compare_command_prints_plain_text_without_markup_tags(two_runs):
    from typer.testing import CliRunner

    from evalpipe.cli import app

    a, b = two_runs
    result = CliRunner().invoke(app, ["compare", str(a), str(b), "--resamples", "100", "--top", "2"])
    assert result.exit_code == 0, result.output
    assert "A - B" in result.output and "f1" in result.output
    assert "[bold]" not in result.output and "[/]" not in result.output and "\\[" not in result.output
