"""What a reader of report.html/report.md gets beyond the tables: links from numbers to samples, the
summary at the top, the metric glossary, honest intervals (no interval is drawn or printed as one)
and a parse-failure chart that does not exaggerate."""

from __future__ import annotations

import json
import re
from html import unescape
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evalpipe.report import build_report
from evalpipe.report.bootstrap import MetricInterval, PairedDifference, Replicates, TaskBootstrap
from evalpipe.report.browser import samples_fragment
from evalpipe.report.compare import CompareResult, TaskComparison
from evalpipe.report.document import Cell, Document, Section, Table
from evalpipe.report.html import render_html
from evalpipe.report.leaderboard import build_leaderboard
from evalpipe.report.markdown import render_markdown
from evalpipe.report.ner_errors import sample_outcomes
from evalpipe.report.plots import metric_bars_figure, parse_failure_figure
from evalpipe.report.runs import ReportRun, TaskInfo, load_report_runs
from evalpipe.report.summary import summary_sentences
from tests.report.support import gold_answers, make_run
from tests.support.scripted_backend import query_text

RESAMPLES = 200
NOWHERE = Path("/nonexistent/run")


@pytest.fixture(scope="module")
def built(two_runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("reading")
    return build_report(list(two_runs), out, resamples=RESAMPLES, seed=0, top=4)


@pytest.fixture(scope="module")
def html(built) -> str:
    return built.html.read_text(encoding="utf-8")


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


# ---- links from the numbers to the samples -----------------------------------------------------------

def test_the_metrics_row_of_a_run_links_to_its_missed_entities_with_their_count(html, two_runs):
    table = re.search(r'<table id="metrics-ncbi_disease">.*?</table>', html, re.S).group(0)
    with_missed = sum(any(o.category == "missed" for o in sample_outcomes(r)[0]) for r in _records(two_runs[1]))
    assert with_missed > 0
    link = samples_fragment(task="ncbi_disease", run="r1", outcome="missed")
    assert f'<a href="{link}" class="more">missed: {with_missed}</a>' in unescape(table)
    assert f'<a href="{samples_fragment(task="ncbi_disease", run="r1")}">all 60</a>' in unescape(table)
    # the perfect run has no error to link to
    perfect_row = re.search(r"<tr><td>perfect</td>.*?</tr>", table).group(0)
    assert 'class="more"' not in perfect_row


def test_ner_category_counts_link_to_the_samples_holding_such_entities(html):
    table = unescape(re.search(r'<table id="ner-ncbi_disease-1">.*?</table>', html, re.S).group(0))
    gold_all = re.search(r"<tr><td>gold entities</td><td>all types</td>.*?</tr>", table).group(0)
    assert f'<a href="{samples_fragment(task="ncbi_disease", run="r1", outcome="missed")}">' in gold_all
    assert f'<a href="{samples_fragment(task="ncbi_disease", run="r1", outcome="boundary")}">' in gold_all
    # per-type rows and zero counts are not links (the browser cannot filter by type)
    typed = re.search(r"<tr><td>gold entities</td><td>Disease</td>.*?</tr>", table).group(0)
    assert "<a " not in typed
    assert '<td class="num">0</td>' in gold_all  # type: 0, no link


def test_examples_and_disagreements_link_to_their_sample(html):
    examples = unescape(re.search(r'<dl class="examples" id="ner-ncbi_disease-1-examples">.*?</dl>', html, re.S).group(0))
    first = re.search(r'<dt><a href="([^"]+)">(\w[\w+]*) — (test-\d+)</a></dt>', examples)
    assert first and first.group(1) == samples_fragment(task="ncbi_disease", sample=first.group(3), run="r1")
    disagreements = unescape(re.search(r'<dl class="examples" id="compare-disagreements">.*?</dl>', html, re.S).group(0))
    links = re.findall(r'<dt><a href="([^"]+)">ncbi_disease / (test-\d+) — ', disagreements)
    assert len(links) == 4  # --top 4
    assert all(href == samples_fragment(task="ncbi_disease", sample=sid, run="r0", compare="r1") for href, sid in links)


def test_every_in_page_link_points_at_an_anchor_or_the_sample_browser(html):
    anchors = set(re.findall(r'\sid="([^"]+)"', html))
    for href in set(re.findall(r'href="#([^"]*)"', html)):
        href = unescape(href)
        assert href in anchors or href == "samples" or href.startswith("samples?"), href


def test_markdown_points_to_the_browser_in_the_html(built):
    md = built.markdown.read_text(encoding="utf-8")
    assert "The sample browser (60 samples × 2 runs) is in report.html" in md
    assert "<script" not in md and "#samples?" in md  # the example view in words, no page code


def test_the_report_without_the_browser_has_no_sample_links(two_runs, tmp_path):
    from evalpipe.report.build import build_document
    from evalpipe.report.bootstrap import bootstrap_task

    runs = load_report_runs(list(two_runs))
    boots = {r.label: {t: bootstrap_task(s, resamples=50) for t, s in r.resample.items()} for r in runs}
    board = build_leaderboard(runs, boots, {}, {})
    page = render_html(build_document(runs, boots, board, resamples=50, seed=0, browser=False))
    assert "#samples" not in page and "<script" not in page


# ---- the summary ---------------------------------------------------------------------------------------

def test_summary_says_which_model_is_better_and_that_the_paired_test_says_so(html):
    summary = unescape(re.search(r'<section id="section-summary">.*?</section>', html, re.S).group(0))
    assert "ncbi_disease, f1: perfect 1.000 [1.000, 1.000], sloppy 0." in summary
    assert "perfect is better than sloppy — a significant difference of 0." in summary
    # the shared samples are those both answered: the sloppy run's failed requests are left out
    assert re.search(r"paired bootstrap on the (\d+) shared samples, p = ", summary).group(1) != "60"
    assert summary.index("Coverage below 100 % in sloppy: ncbi_disease ") < summary.index("ncbi_disease, f1:")
    assert "Other significant paired differences of headline metrics" in summary
    assert " tp " not in summary  # counts are not headline metrics


def _hand_run(label: str, value: float, low: float, high: float, task: str = "t") -> tuple[ReportRun, TaskBootstrap]:
    run = ReportRun(path=NOWHERE, label=label, model=label, compat=None, config={}, tasks=(task,),
                    metrics={task: {"f1": value, "parse_failure_rate": 0.0}}, summary=None, samples=pd.DataFrame())
    boot = TaskBootstrap(task, 100, {"f1": MetricInterval("f1", value, low, high, "micro_prf", 100)},
                         Replicates({}, {}))
    return run, boot


def _sentences(specs, compare=None, operations=()):
    runs, boots = [], {}
    for label, value, low, high in specs:
        run, boot = _hand_run(label, value, low, high)
        runs.append(run)
        boots[label] = {"t": boot}
    return summary_sentences(runs, boots, compare, {"t": TaskInfo("t", metrics=("f1",), primary_metric="f1")},
                             operations)


def test_summary_without_a_paired_test_judges_by_overlapping_intervals_and_says_so():
    apart = _sentences([("a", 0.8, 0.75, 0.85), ("b", 0.5, 0.45, 0.55), ("c", 0.4, 0.3, 0.5)])
    assert apart[0] == "t, f1: a 0.800 [0.750, 0.850], b 0.500 [0.450, 0.550], c 0.400 [0.300, 0.500]: a is clearly " \
        "ahead of b — their intervals do not overlap (judged by non-overlapping 95 % intervals, a conservative check, " \
        "not a paired test; a paired test needs exactly two runs sharing samples: evalpipe compare A B)."
    close = _sentences([("a", 0.6, 0.5, 0.7), ("b", 0.55, 0.45, 0.65)])
    assert "a is not shown to be better than b — their intervals overlap" in close[0]


def test_summary_uses_the_paired_test_when_there_is_one():
    def compare(p: float) -> CompareResult:
        diff = PairedDifference("f1", 0.6, 0.55, 0.05, 0.01 if p < 0.05 else -0.02, 0.09, p, 100, "micro_prf")
        return CompareResult("a", "b", "x", "y", 100, 0, (TaskComparison("t", 40, 0, 0, (diff,), ()),))
    significant = _sentences([("a", 0.6, 0.5, 0.7), ("b", 0.55, 0.45, 0.65)], compare(0.02))
    # overlapping intervals, yet the paired test finds the difference: the paired test decides
    assert "a is better than b — a significant difference of 0.050" in significant[0]
    assert "p = 0.020" in significant[0] and "40 shared samples" in significant[0]
    not_significant = _sentences([("a", 0.6, 0.5, 0.7), ("b", 0.55, 0.45, 0.65)], compare(0.4))
    assert "a is not shown to be better than b — the difference of 0.050 is not significant" in not_significant[0]


def test_summary_of_one_run_and_a_warning_for_a_high_parse_failure_rate():
    from evalpipe.report.operations import TaskOperations

    ops = [TaskOperations("a", "t", 10, 0, 9, 0.9, None, None, 0, 0, None, None, None, None, None)]
    one = _sentences([("a", 0.1, 0.0, 0.2)], operations=ops)
    assert one[0].startswith("One run, a: each task's primary metric")
    assert one[1] == "t, f1: a 0.100 [0.000, 0.200]."
    assert one[-1].startswith("Warning: 90% of a's answers on t could not be parsed")


# ---- the glossary ----------------------------------------------------------------------------------------

def test_glossary_gives_the_tasks_words_the_aggregation_and_the_interval(html, two_runs):
    config = json.loads((two_runs[0] / "config.json").read_text())
    definitions = config["tasks"]["ncbi_disease"]["metric_definitions"]  # recorded by the runner
    assert definitions["f1"].startswith("harmonic mean of strict precision and recall")
    table = unescape(re.search(r'<table id="glossary">.*?</table>', html, re.S).group(0))
    rows = {m: cells for m, cells in
            ((re.findall(r"<td>(.*?)</td>", row)[1], re.findall(r"<td>(.*?)</td>", row))
             for row in re.findall(r"<tr><td>.*?</tr>", table))}
    assert rows["f1"][2] == definitions["f1"]
    assert rows["f1"][3] == "micro f1 from tp/fp/fn summed over samples"
    assert rows["f1"][4] == f"95 % bootstrap (micro_prf, {RESAMPLES} resamples)"
    assert rows["accuracy"][3] == "ratio of summed correct_tokens to summed tokens"
    assert rows["parse_failure_rate"][2].startswith("share of answered samples whose answer could not be parsed")
    assert rows["n"][3] == "not an aggregate of samples" and rows["n"][4].startswith("none: the number of evaluated")


# ---- no interval is never shown as one -------------------------------------------------------------------

def test_a_cell_without_an_interval_says_so_with_the_reason_in_html_and_markdown():
    table = Table(id="t", title="T", columns=("model", "n", "f1"), rows=(
        (Cell("m", numeric=False), Cell("60", sub="no interval", title="fixed by the run"), Cell("0.5", sub="[0.4, 0.6]")),
    ))
    doc = Document("d", [Section("s", "S", [table])])
    assert '<span class="ci"><abbr title="fixed by the run">no interval</abbr></span>' in render_html(doc)
    md = render_markdown(doc)
    assert "| m | 60 no interval [1] | 0.5 [0.4, 0.6] |" in md and "[1] fixed by the run" in md


def test_leaderboard_entries_without_an_interval_carry_the_reason(html):
    # the bookkeeping metric n has no interval; in the task table it says why on hover
    table = re.search(r'<table id="metrics-ncbi_disease">.*?</table>', html, re.S).group(0)
    assert table.count("no interval") == 0  # every shown NCBI metric has an interval
    run = ReportRun(path=NOWHERE, label="m", model="m", compat=None, config={}, tasks=("t",),
                    metrics={"t": {"f1": 0.5, "pool": 100}}, summary=None, samples=pd.DataFrame())
    boot = TaskBootstrap("t", 10, {"f1": MetricInterval("f1", 0.5, 0.4, 0.6, "mean", 100),
                                   "pool": MetricInterval("pool", 100, None, None, "none", 0, "fixed pool size")},
                         Replicates({}, {}))
    board = build_leaderboard([run], {"m": {"t": boot}}, {}, {"t": TaskInfo("t", metrics=("f1", "pool"))})
    cells = dict(zip(board.to_table().columns, board.to_table().rows[0]))
    assert cells["pool"].sub == "no interval" and cells["pool"].title == "fixed pool size"
    assert cells["f1"].sub == "[0.400, 0.600]" and cells["f1"].title == ""


def test_metric_bars_draw_no_whisker_for_a_metric_without_an_interval():
    series = {"a": {"f1": (0.5, 0.4, 0.6), "pool": (0.7, None, None), "acc": (0.9, 0.85, 0.95)},
              "b": {"f1": (0.3, 0.2, 0.4), "pool": (0.6, None, None), "acc": (None, None, None)}}
    fig = metric_bars_figure("t", ["f1", "pool", "acc"], series)
    ax = fig.axes[0]
    whiskers = [segment for collection in ax.collections for segment in collection.get_segments()]
    # one whisker per value with an interval: a.f1, a.acc, b.f1 — none for either pool, none for b.acc
    assert sorted((round(s[0][1], 3), round(s[1][1], 3)) for s in whiskers) == [(0.2, 0.4), (0.4, 0.6), (0.85, 0.95)]
    assert [t.get_text() for t in ax.texts] == ["no CI", "no CI"]
    heights = sorted(round(p.get_height(), 3) for p in ax.patches)
    assert heights == [0.3, 0.5, 0.6, 0.7, 0.9]  # b.acc has no value: no bar


def test_parse_failure_chart_has_a_fixed_0_to_100_percent_axis():
    fig = parse_failure_figure({"a": {"t": 0.06}, "b": {"t": 0.02}}, {"a": {"t": 0.0}, "b": {"t": 0.01}})
    ax = fig.axes[0]
    assert ax.get_ylim() == (0.0, 100.0)
    assert max(p.get_height() for p in ax.patches) == pytest.approx(6.0)  # 6 % stays small


def test_a_real_report_with_a_metric_without_interval_draws_it_hatched(tmp_path):
    """End to end: a metric whose run declares no aggregation says "no interval" and why, everywhere."""
    gold = gold_answers()
    run = make_run(tmp_path, "m", lambda p: gold[query_text(p)], limit=5)
    summary = json.loads((run / "summary.json").read_text())
    summary["tasks"]["ncbi_disease"]["aggregations"].pop("accuracy")
    summary["tasks"]["ncbi_disease"]["no_interval"]["accuracy"] = "declared without an aggregation (test)"
    (run / "summary.json").write_text(json.dumps(summary))
    report = build_report([run], tmp_path / "report", resamples=50)
    html = report.html.read_text(encoding="utf-8")
    table = unescape(re.search(r'<table id="metrics-ncbi_disease">.*?</table>', html, re.S).group(0))
    assert '<abbr title="declared without an aggregation (test)">no interval</abbr>' in table
    assert "no CI" in re.search(r'<figure id="plot-metrics-ncbi_disease">.*?</figure>', html, re.S).group(0)
    board = unescape(re.search(r'<table id="leaderboard">.*?</table>', html, re.S).group(0))
    assert '<abbr title="declared without an aggregation (test)">no interval</abbr>' in board
    assert np.isnan(pd.read_csv(report.csv)["ncbi_disease:accuracy:ci_low"].iloc[0])
