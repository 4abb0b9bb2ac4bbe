"""A CLUE MeQSum report: BERTScore intervals come from the stored per-sample values, never re-scored.

MeQSum's ``mean_metrics`` is a :class:`~evalpipe.tasks.clue.common.MetricFamilies` whose members
are patterns (``bertscore[*]_f1``): the report must keep that object, not a plain set of names.
"""

import asyncio

import numpy as np
import pandas as pd
import pytest

import evalpipe.metrics.bertscore as bertscore_module
import evalpipe.tasks.kinds.generation as generation_kind
from evalpipe.config import RunConfig
from evalpipe.frames import load_samples
from evalpipe.report import build_report
from evalpipe.report.bootstrap import resample_indices, restrict
from evalpipe.report.runs import load_report_runs
from evalpipe.pipeline.execute import execute
from tests.support.scripted_backend import ScriptedBackend, last_user_text

LIMIT = 8
RESAMPLES = 200
BERT_F1 = "bertscore[all-MiniLM-L6-v2@L6]_f1"


def first_words(count):
    """An answer that is the first ``count`` words of the patient's question: some overlap, not all."""
    def respond(prompt):
        words = last_user_text(prompt).split()
        return " ".join(words[-60:][:count]) + "?"
    return respond


@pytest.fixture(scope="module")
def meqsum_runs(tmp_path_factory):
    """Two scored MeQSum runs (the runner computes BERTScore once per run; the encoder loads once)."""
    root = tmp_path_factory.mktemp("meqsum_runs")
    paths = []
    for model, count in (("short", 6), ("long", 20)):
        config = RunConfig(tasks=("clue_meqsum",), model=model, base_url="http://127.0.0.1:1/v1", limit=LIMIT)
        outcome = asyncio.run(execute(config, lambda _, c=count, m=model: ScriptedBackend(first_words(c), model=m),
                                      root))
        paths.append(outcome.run_dir.path)
    return paths


@pytest.fixture()
def no_bertscore(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the report must not compute BERTScore again")

    monkeypatch.setattr(generation_kind, "bertscore_per_sample", refuse)
    monkeypatch.setattr(bertscore_module, "bertscore_per_sample", refuse)


def test_pattern_mean_metrics_are_resampled_from_per_sample_values(meqsum_runs, no_bertscore, tmp_path):
    (run,) = load_report_runs([meqsum_runs[0]])
    assert run.resample["clue_meqsum"].aggregations[BERT_F1].kind == "mean"  # declared, with its settings tag
    result = build_report(meqsum_runs, tmp_path, resamples=RESAMPLES, seed=0)
    board = pd.read_csv(result.csv)
    # the interval is the percentile interval of means of the resampled per-sample BERTScore values
    values = load_samples(meqsum_runs[0])[f"score.{BERT_F1}"].to_numpy(dtype=float)
    means = values[resample_indices(LIMIT, RESAMPLES, 0, "clue_meqsum")].mean(axis=1)
    low, high = np.quantile(means, [0.025, 0.975])
    short = board[board["model"] == "short"].iloc[0]
    assert (short[f"clue_meqsum:{BERT_F1}:ci_low"], short[f"clue_meqsum:{BERT_F1}:ci_high"]) == pytest.approx((low, high))
    assert low < short[f"clue_meqsum:{BERT_F1}"] < high
    markdown = result.markdown.read_text(encoding="utf-8")
    # every metric of the task, BERTScore included, was resampled as a per-sample mean
    assert f"{BERT_F1}: mean ({RESAMPLES})" in markdown
    timing = markdown.split("**Bootstrap: method per metric and time**")[1].splitlines()
    rows = [line for line in timing if line.startswith(("| short | clue_meqsum", "| long | clue_meqsum"))]
    assert len(rows) == 2 and all("| mean: rouge1, rouge2, rougeL, bertscore" in line for line in rows)
    assert "none: n" in markdown  # only the sample count has no interval
    # the paired comparison reuses the same per-sample values
    assert "## Comparison" in markdown and BERT_F1 in markdown


def test_comparing_on_a_subset_averages_the_stored_values(meqsum_runs, no_bertscore):
    (run,) = load_report_runs([meqsum_runs[1]])
    task = run.resample["clue_meqsum"]
    sub = restrict(task, [5, 0, 2])  # what a comparison with a run that has only these samples does
    assert sub.ids == tuple(task.ids[i] for i in (5, 0, 2))
    # (v5 + v0 + v2) / 3 of the stored per-sample BERTScore F1, no encoder call
    scores = [r["scores"][BERT_F1] for r in run.records]
    expected = sum(scores[i] for i in (5, 0, 2)) / 3
    assert sub.corpus[BERT_F1] == pytest.approx(expected)
    # every metric but the counts fixed by the run (n, errors, answered, coverage: evalpipe.coverage)
    assert set(sub.corpus) == set(task.metrics) - {"n", "errors", "answered", "coverage"}


def test_a_run_of_two_tasks_has_an_extract_segment_each_and_the_same_report(tmp_path, monkeypatch):
    """NCBI (folded chunk by chunk, its lines spilled) and MeQSum (BERTScore: a corpus scoring, its
    records made when written) in one run: each task's lines are one segment of the extract, taken
    where they were made, and the report read from it is the same bytes as the one read from the
    samples (evalpipe.report.extract)."""
    import json

    from evalpipe.report import extract
    from tests.report.test_browser_beside import _files
    from tests.report.test_read_beside import _page, _same_runs

    config = RunConfig(tasks=("ncbi_disease", "clue_meqsum"), model="m", base_url="http://127.0.0.1:1/v1", limit=LIMIT)
    run = asyncio.run(execute(config, lambda _: ScriptedBackend(first_words(6), model="m"), tmp_path)).run_dir.path
    index = json.loads((run / "samples.extract" / "index.json").read_text(encoding="utf-8"))
    assert [s["tasks"] for s in index["segments"]] == [["ncbi_disease"], ["clue_meqsum"]]
    assert [s["written"] for s in index["segments"]] == [{"ncbi_disease": "N"}, {"clue_meqsum": "P"}]
    monkeypatch.setenv(extract.ENV, "0")
    alone = load_report_runs([run])
    build_report([run], tmp_path / "alone", resamples=RESAMPLES, seed=0)
    monkeypatch.setenv(extract.ENV, "1")
    from_extract = load_report_runs([run])
    _same_runs(from_extract, alone)
    assert _page(from_extract) == _page(alone)
    build_report([run], tmp_path / "extract", resamples=RESAMPLES, seed=0)
    assert _files(tmp_path / "extract") == _files(tmp_path / "alone")
