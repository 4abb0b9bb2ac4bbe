"""Honest numbers (issue 21): a sample without an answer is left out of every metric, coverage is said
everywhere, and no metric is computed over zero answered samples (evalpipe.coverage, docs/coverage.md).

Hand-computed cases for a partly answered task (micro F1 and token accuracy, a mean accuracy, ROUGE
with a corpus BERTScore), the zero-answered case through both scoring paths, and one run end to end
through the CLI against the loopback fake server failing every request: metrics.json, the printed
table, `score` of the run directory and report.html.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalpipe.coverage import Coverage, spread
from evalpipe.records import Completion, Example, Span, Usage
from evalpipe.scoring import ScoringChunk, score_task, score_chunks
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task
from evalpipe.terminal import summary_lines
from evalpipe.results import RunInfo, RunSummary
from tests.support.fake_openai import FakeOpenAIProcess
from tests.tasks import mcqa_synthetic
from tests.test_chunked_scoring import ner_example, tagged

REPO = Path(__file__).resolve().parents[1]
FAILED = Completion(None, error="HTTP 500", attempts=3)


def ok(text: str) -> Completion:
    return Completion(text, usage=Usage(10, 3), latency_s=0.5)


def test_coverage_says_how_many_were_answered_and_why_not():
    partial = Coverage(20, 19, {"HTTP 500": 1})
    assert partial.share == 0.95 and not partial.complete
    assert partial.sentence() == "19 of 20 samples answered (95.0%): 1 of 20 requests failed (HTTP 500)"
    none = Coverage(40, 0, {"connection error after 7 attempts: Connection refused": 38, "not sent": 2})
    assert none.not_computed_reason() == ("no answered samples: 38 of 40 requests failed (connection error after "
                                          "7 attempts: Connection refused), 2 of 40 not sent")
    mixed = Coverage(5, 2, {"HTTP 500": 2, "HTTP 400": 1})
    assert mixed.why_unanswered() == "3 of 5 requests failed (2× HTTP 500; 1× HTTP 400)"
    assert Coverage.from_json(partial.to_json()) == partial and Coverage.from_json({}) is None
    assert spread([{"a": 1}, {"a": 2}], [True, False, True], {}) == [{"a": 1}, {}, {"a": 2}]
    with pytest.raises(ValueError):
        spread([1, 2], [True], 0)


def _ner_three() -> tuple[tuple[Example, ...], tuple[Completion, ...]]:
    examples = (ner_example(0, 8, (Span(0, 2, "Disease"), Span(3, 4, "Disease"))),
                ner_example(1, 4, (Span(1, 3, "Disease"),)),
                ner_example(2, 5, (Span(0, 3, "Disease"),)))
    answers = (ok(tagged(examples[0], [(0, 2), (5, 6)])), ok(tagged(examples[1], [(1, 2)])), FAILED)
    return examples, answers


def test_ner_leaves_the_unanswered_sentence_out_of_f1_and_token_accuracy():
    """s0: tp 1 (D[0,2)), fp 1 (D[5,6)), fn 1 (D[3,4)); tokens 8, 6 right. s1: fp 1, fn 1; tokens 4, 3 right.
    s2 failed: its gold entity D[0,3) and its 5 tokens are left out (counted, it would add fn 1 and
    tokens 5 with 2 right). Micro P = R = F1 = 1/(1+2) = 1/3 (not R = 1/4); token accuracy 9/12 (not 11/17)."""
    examples, answers = _ner_three()
    out = score_task(get_task("ncbi_disease"), examples, ("k0", "k1", "k2"), answers, None)
    m = out.metrics
    assert (m["tp"], m["fp"], m["fn"]) == (1.0, 2.0, 2.0)
    assert m["precision"] == m["recall"] == m["f1"] == pytest.approx(1 / 3)
    assert m["accuracy"] == pytest.approx(9 / 12)
    assert (m["n"], m["errors"], m["answered"]) == (3, 1, 2) and m["coverage"] == pytest.approx(2 / 3)
    assert out.summary.coverage["answered"] == 2 and out.summary.coverage["unanswered"] == {"HTTP 500": 1}
    assert "errors" in out.summary.no_interval and "errors" not in out.summary.aggregations
    records = list(out.records)
    assert records[2]["parts"] == {} and records[2]["scores"] == {} and records[2]["error"] == "HTTP 500"


def _medqa(tmp_path: Path) -> list[Example]:
    spec = get_task("medqa")
    return list(spec.load(LoadOptions(data_dir=mcqa_synthetic.write_all(tmp_path))).examples)[:4]


def test_a_mean_metric_counts_an_unparseable_answer_but_not_a_failed_request(tmp_path):
    """4 questions: right, wrong, unparseable, failed → accuracy 1/3 over the 3 answered (not 1/4),
    parse-failure rate 1/3, coverage 3/4."""
    spec = get_task("medqa")
    examples = _medqa(tmp_path)
    gold = [e.gold for e in examples]
    wrong = next(letter for letter in "ABCD" if letter != str(gold[1]))
    answers = (ok(f"Answer: {gold[0]}"), ok(f"Answer: {wrong}"), ok("I would rather not say."), FAILED)
    out = score_task(spec, examples, tuple(f"k{i}" for i in range(4)), answers, None)
    m = out.metrics
    assert m["accuracy"] == pytest.approx(1 / 3)
    assert m["parse_failure_rate"] == pytest.approx(1 / 3)
    assert (m["n"], m["errors"], m["answered"], m["coverage"]) == (4, 1, 3, 0.75)


def test_rouge_and_bertscore_are_over_the_answered_summaries_only():
    """Three MeQSum questions: the reference summary itself (ROUGE-L 1), a word sharing nothing with its
    reference (ROUGE-L 0), a failed request → ROUGE-L (1 + 0) / 2 = 0.5, not 1/3; BERTScore is the one
    of the two answered summaries scored alone (the corpus metric sees no third text)."""
    spec = get_task("clue_meqsum")
    examples = list(spec.load(LoadOptions()).examples)[:3]
    answers = (ok(str(examples[0].gold)), ok("zzzz"), FAILED)
    out = score_task(spec, examples, ("k0", "k1", "k2"), answers, None)
    alone = score_task(spec, examples[:2], ("k0", "k1"), answers[:2], None)
    assert out.metrics["rougeL"] == pytest.approx(0.5) and out.metrics["rouge1"] == pytest.approx(0.5)
    bert = [k for k in out.metrics if k.startswith("bertscore[")]
    assert bert and all(out.metrics[k] == pytest.approx(alone.metrics[k], abs=1e-6) for k in bert)
    assert out.metrics["coverage"] == pytest.approx(2 / 3)


def test_no_metric_over_zero_answered_samples_in_either_scoring_path():
    examples, _ = _ner_three()
    answers = (FAILED, FAILED, None)
    keys = ("k0", "k1", "k2")
    whole = score_task(get_task("ncbi_disease"), examples, keys, answers, None)

    def chunks() -> Iterator[ScoringChunk]:
        yield ScoringChunk(examples[:2], keys[:2], answers[:2])
        yield ScoringChunk(examples[2:], keys[2:], answers[2:])

    chunked = score_chunks(get_task("ncbi_disease"), chunks, None)
    for out in (whole, chunked):
        m = out.metrics
        assert m["f1"] is None and m["accuracy"] is None and m["parse_failure_rate"] is None
        assert (m["n"], m["errors"], m["answered"], m["coverage"]) == (3, 3, 0, 0.0)
        reason = "no answered samples: 2 of 3 requests failed (HTTP 500), 1 of 3 not sent"
        assert out.summary.not_computed["f1"] == reason and out.summary.not_computed["accuracy"] == reason
        assert out.summary.aggregations == {}
        assert all(r["parts"] == {} for r in out.records)
    assert json.dumps(whole.metrics) == json.dumps(chunked.metrics)
    summary = RunSummary(run=RunInfo(), tasks={"ncbi_disease": whole.summary})
    lines = [text for _, text in summary_lines({"ncbi_disease": whole.metrics}, summary)]
    assert lines == [f"ncbi_disease: no metric computed — {reason}"]


def _evalpipe(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALPIPE_")}
    env.update(HF_HUB_OFFLINE="1", COLUMNS="200")
    return subprocess.run([sys.executable, "-m", "evalpipe.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=240)


def test_a_run_whose_every_request_failed_shows_no_number_as_a_measurement(tmp_path):
    with FakeOpenAIProcess(latency=0.0) as fake:
        fake.plan_faults(["400"], count=1000)  # not retried: every sample fails for good
        run = _evalpipe("run", "--task", "ncbi_disease", "--base-url", fake.url, "--model", "fake-model",
                        "--limit", "6", "--concurrency", "2", "--results-dir", str(tmp_path / "results"))
    assert run.returncode == 3, run.stderr
    (run_dir,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    metrics = json.loads((run_dir / "metrics.json").read_text())["ncbi_disease"]
    assert metrics["f1"] is None and metrics["accuracy"] is None and metrics["precision"] is None
    assert (metrics["n"], metrics["errors"], metrics["answered"], metrics["coverage"]) == (6, 6, 0, 0.0)
    summary = json.loads((run_dir / "summary.json").read_text())["tasks"]["ncbi_disease"]
    assert summary["not_computed"]["f1"].startswith("no answered samples: 6 of 6 requests failed (")
    printed = run.stdout + run.stderr
    assert "ncbi_disease: no metric computed — no answered samples: 6 of 6 requests failed" in printed
    assert "0.0000" not in printed.split("coverage")[0].split("metric")[-1]  # no F1 / accuracy printed as 0

    # as an older evalpipe wrote it: no coverage in summary.json nor metrics.json
    summary_file = json.loads((run_dir / "summary.json").read_text())
    del summary_file["tasks"]["ncbi_disease"]["coverage"]
    (run_dir / "summary.json").write_text(json.dumps(summary_file))
    old = {k: v for k, v in metrics.items() if k not in ("answered", "coverage")}
    (run_dir / "metrics.json").write_text(json.dumps({"ncbi_disease": old}))
    shown = _evalpipe("show", str(run_dir))
    assert "ncbi_disease: no metric computed — no answered samples: 6 of 6 requests failed" in shown.stdout + shown.stderr
    rescored = _evalpipe("score", str(run_dir))
    assert rescored.returncode == 0, rescored.stderr
    assert json.loads((run_dir / "metrics.json").read_text())["ncbi_disease"] == metrics

    report = _evalpipe("report", str(run_dir), "--out", str(tmp_path / "report"), "--resamples", "50")
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    summary_text = html[html.index('id="section-summary"'):][:3000]
    assert "Coverage below 100 %" in summary_text and "no answered samples" in summary_text
    assert "not computed" in html and "No metrics plot for ncbi_disease" in html
    assert 'id="plot-metrics-ncbi_disease"' not in html
    board = (tmp_path / "report" / "leaderboard.csv").read_text(encoding="utf-8")
    assert "ncbi_disease:coverage" in board
