"""The one scoring path (evalpipe.scoring.fold): a corpus in memory is one chunk of the fold, pushed
chunks give the pulled chunks' outcome, and a scoring wrongly declared samplewise falls back to the
corpus valuation (its numbers right, its interval dropped with the reason) — or fails the suite.

The scorer here is made by hand: ``score`` reports ``median`` of per-sample ``x`` and declares it as
``Mean(x)`` — a wrong declaration on any chunk whose median is not its mean.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections.abc import Iterator, Sequence

import pytest

from evalpipe.metrics.aggregation import Mean
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Completion, Example, Prediction, ScoreSheet
from evalpipe.scoring import ChunkedRecords, ScoringChunk, SampleRecords, TaskFold, score_chunks, score_task
from evalpipe.tasks.base import Scoring
from evalpipe.tasks.registry import get_task


def _score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    xs = [float(p.value) for p in predictions]
    return ScoreSheet(corpus={"median": statistics.median(xs)}, per_sample=[{"x": x} for x in xs],
                      aggregations={"median": Mean("x")})


def _spec(samplewise: bool):  # a real task's spec with the hand-made scoring as its default
    scoring = Scoring(parse=lambda text, ex: Prediction(float(text)), score=_score,
                      empty=lambda ex: Prediction(0.0, failed=True), samplewise=samplewise,
                      corpus_reason="" if samplewise else "a median")
    return dataclasses.replace(get_task("medqa"), scorings={"default": scoring})


VALUES = (1.0, 2.0, 9.0, 4.0, 4.0, 4.0)  # chunks of 3: (1, 2, 9) mean 4 ≠ median 2


def _chunks(size: int) -> Iterator[ScoringChunk]:
    examples = [Example(f"e{i}", {}, None) for i in range(len(VALUES))]
    answers = [Completion(str(v)) for v in VALUES]
    for a in range(0, len(VALUES), size):
        yield ScoringChunk(examples[a:a + size], [f"k{i}" for i in range(a, min(a + size, len(VALUES)))],
                           answers[a:a + size])


def test_a_wrong_samplewise_declaration_fails_the_strict_suite():
    with pytest.raises(AssertionError, match="declared samplewise"):
        score_chunks(_spec(True), lambda: _chunks(3), None)


def test_a_wrong_samplewise_declaration_falls_back_to_the_whole_corpus(monkeypatch, caplog):
    """Median of (1, 2, 9, 4, 4, 4) = 4 (the corpus value), though the first chunk's sums would say
    mean 4 of (1, 2, 9) ≠ its median 2: the fallback scores all six once, and its Mean(x) = 24/6 = 4
    happens to equal the median — so the interval stays, as the whole-corpus check decides."""
    monkeypatch.delenv("EVALPIPE_STRICT_AGGREGATIONS", raising=False)
    with caplog.at_level(logging.WARNING, logger="evalpipe.scoring.fold"):
        pulled = score_chunks(_spec(True), lambda: _chunks(3), None)
    assert "scored as a whole" in caplog.text
    assert pulled.metrics["median"] == 4.0 and pulled.metrics["n"] == 6
    assert isinstance(pulled.records, SampleRecords) and [r["scores"]["x"] for r in pulled.records] == list(VALUES)
    assert pulled.summary.aggregations["median"] == {"kind": "mean", "key": "x"}
    pushed = TaskFold(_spec(True), None)  # no source: the chunks folded so far are held
    for chunk in _chunks(3):
        pushed.add(chunk)
    assert pushed.finish().metrics == pulled.metrics


def test_a_corpus_metric_whose_declaration_fails_on_the_whole_has_no_interval(monkeypatch):
    """(1, 2, 9): median 2, Mean(x) 4 → the metric is the scorer's 2, without interval, saying why."""
    monkeypatch.delenv("EVALPIPE_STRICT_AGGREGATIONS", raising=False)
    out = score_chunks(_spec(False), lambda: _chunks(1), None)  # six one-sample chunks: held, scored once
    assert out.metrics["median"] == 4.0
    three = TaskFold(_spec(False), None)
    for chunk in list(_chunks(3))[:1]:
        three.add(chunk)
    first = three.finish()
    assert first.metrics["median"] == 2.0 and "median" not in first.summary.aggregations
    assert first.summary.no_interval["median"].startswith("its declared aggregation does not reproduce it")


def test_pushed_chunks_give_what_score_task_gives_on_the_whole():
    """NCBI Disease (samplewise), the three hand-checked sentences of tests/test_chunked_scoring.py, pushed
    one at a time without a source: the same metrics, summary and records as one chunk of all three."""
    from tests.test_coverage import _ner_three

    examples, answers = _ner_three()
    keys = ("k0", "k1", "k2")
    spec = get_task("ncbi_disease")
    whole = score_task(spec, examples, keys, answers, None)
    fold = TaskFold(spec, None)
    for i in range(3):
        fold.add(ScoringChunk(examples[i:i + 1], keys[i:i + 1], answers[i:i + 1]))
    pushed = fold.finish()
    assert pushed.metrics == whole.metrics and pushed.summary == whole.summary
    assert list(pushed.records) == list(whole.records)
    with pytest.raises(RuntimeError):
        fold.finish()
    with pytest.raises(RuntimeError):
        fold.add(ScoringChunk(examples[:1], keys[:1], answers[:1]))
    pulled = score_chunks(spec, lambda: (ScoringChunk(examples[i:i + 2], keys[i:i + 2], answers[i:i + 2])
                                         for i in (0, 2)), None)
    assert isinstance(pulled.records, ChunkedRecords) and list(pulled.records) == list(whole.records)
    assert pulled.metrics == whole.metrics


def test_every_scoring_says_how_its_metrics_are_valued():
    """A scoring that is not samplewise must say why it needs the whole corpus; summary.json records it."""
    with pytest.raises(TypeError, match="corpus_reason"):
        Scoring(parse=lambda text, ex: Prediction(text), score=_score, empty=lambda ex: Prediction(""))
    for name, spec in __import__("evalpipe.tasks.registry", fromlist=["all_tasks"]).all_tasks().items():
        for mode, scoring in spec.scorings.items():
            assert scoring.samplewise or len(scoring.corpus_reason) > 20, (name, mode)
    assert score_chunks(_spec(False), lambda: _chunks(2), None).summary.valuation == {
        "path": "whole corpus", "why": "a median"}
    summed = score_task(get_task("ncbi_disease"), *_three(), None).summary.valuation
    assert summed["path"] == "summed parts"


def test_a_failed_samplewise_declaration_is_recorded_as_the_valuation(monkeypatch):
    monkeypatch.delenv("EVALPIPE_STRICT_AGGREGATIONS", raising=False)
    valuation = score_chunks(_spec(True), lambda: _chunks(3), None).summary.valuation
    assert valuation["path"] == "whole corpus" and valuation["why"].startswith("declared samplewise, but on a chunk of 3")


def _three():
    from tests.test_coverage import _ner_three

    examples, answers = _ner_three()
    return examples, ("k0", "k1", "k2"), answers
