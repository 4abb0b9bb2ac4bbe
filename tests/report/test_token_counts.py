"""Token accuracy bootstrapped from per-sample token counts the report derives (no re-scoring)."""

from dataclasses import replace

import numpy as np
import pytest

from evalpipe.records import Example, Prediction, Span
from evalpipe.report.bootstrap import replicate, resample_indices, restrict
from evalpipe.report.runs import load_report_runs
from evalpipe.report.token_counts import CORRECT, TOKENS, accuracy_from_sums, predicted_tags, token_parts
from evalpipe.tasks.ncbi.disease import NerGold


def example(tags):
    return Example(id="x", inputs={}, gold=NerGold(tags=tuple(tags), spans=()), meta={})


def test_parts_from_spans_and_from_tags():
    gold = ["B-D", "I-D", "O", "O"]
    # predicted span (0,1) → B-D O O O: tokens 0, 2, 3 right → 3 of 4
    spans = Prediction((Span(0, 1, "D"),), False, {})
    # predicted tags I-D I-D O B-D: token 0 wrong (I- vs B-), 1 and 2 right, 3 wrong → 2 of 4
    tags = Prediction(("I-D", "I-D", "O", "B-D"), False, {})
    none = Prediction((), True, {})  # no entity: O O O O → tokens 2 and 3 → 2 of 4
    parts = token_parts([example(gold)] * 3, [spans, tags, none])
    assert parts == ({TOKENS: 4, CORRECT: 3}, {TOKENS: 4, CORRECT: 2}, {TOKENS: 4, CORRECT: 2})
    # pooled: (3 + 2 + 2) / 12, not the mean of the ratios
    assert accuracy_from_sums({TOKENS: 12, CORRECT: 7})["accuracy"] == pytest.approx(7 / 12)
    assert np.isnan(accuracy_from_sums({TOKENS: 0, CORRECT: 0})["accuracy"])


def test_tasks_of_another_shape_get_no_parts():
    gold = ["B-D", "O"]
    assert token_parts([example(gold)], [Prediction(("O",), False, {})]) is None  # tags of another length
    assert token_parts([example(gold)], [Prediction("text", False, {})]) is None
    assert token_parts([example(gold)], [Prediction((Span(1, 3, "D"),), False, {})]) is None  # outside
    plain = Example(id="x", inputs={}, gold=(Span(0, 1, "D"),), meta={})  # CMeEE-like: no tags
    assert token_parts([plain], [Prediction((), False, {})]) is None
    assert predicted_tags((Span(0, 2, "D"),), 3) == ("B-D", "I-D", "O")


@pytest.fixture(scope="module")
def sloppy_ncbi(two_runs):
    return load_report_runs([two_runs[1]])[0].scored["ncbi_disease"]


def test_ncbi_metrics_are_all_vectorised_and_match_rescoring(sloppy_ncbi):
    calls = []

    def counting(examples, predictions):
        calls.append(len(examples))
        return sloppy_ncbi.score(examples, predictions)

    task = replace(sloppy_ncbi, score=counting)
    idx = resample_indices(task.n, 150, seed=0, stream=task.name)
    reps = replicate(task, idx)
    assert reps.methods == {**{m: "counts" for m in ("precision", "recall", "f1", "tp", "fp", "fn",
                                                      "partial_precision", "partial_recall", "partial_f1")},
                            "accuracy": "sums"}
    assert calls == [task.n] * 3  # all samples once, then two verification resamples: never per resample
    # the same draws re-scored by the NCBI scorer itself give the same numbers
    rescored = replicate(replace(sloppy_ncbi, per_sample=tuple({} for _ in range(task.n)), from_sums=None), idx)
    assert set(rescored.methods.values()) == {"rescore"}
    for metric, values in reps.values.items():
        np.testing.assert_allclose(values, rescored.values[metric], rtol=1e-12, err_msg=metric)


def test_a_wrong_guess_is_caught_and_rescored(sloppy_ncbi):
    # pretend the task's "accuracy" were something else: the formula no longer reproduces it
    corpus = {**sloppy_ncbi.corpus, "accuracy": sloppy_ncbi.corpus["accuracy"] / 2}
    task = replace(sloppy_ncbi, corpus=corpus, score=None)
    reps = replicate(task, resample_indices(task.n, 20, seed=0))
    assert reps.methods["accuracy"] == "none" and reps.methods["f1"] == "counts"


def test_restrict_keeps_parts_aligned(sloppy_ncbi):
    sub = restrict(replace(sloppy_ncbi, score=None), [3, 1, 2])
    assert sub.parts == tuple(sloppy_ncbi.parts[i] for i in (3, 1, 2))
    correct = sum(p[CORRECT] for p in sub.parts) / sum(p[TOKENS] for p in sub.parts)
    assert sub.corpus["accuracy"] == pytest.approx(correct)
