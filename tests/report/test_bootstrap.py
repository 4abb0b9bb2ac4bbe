"""Bootstrap intervals and the paired test, on hand-made tasks whose answers are known."""

import numpy as np
import pytest

from evalpipe.metrics.spans import span_score_sheet
from evalpipe.records import ScoreSheet, Span
from evalpipe.tasks.clue.common import MetricFamilies
from evalpipe.report.bootstrap import (
    MIN_RESAMPLES,
    ScoredTask,
    bootstrap_task,
    is_mean_metric,
    paired_bootstrap,
    percentile_interval,
    replicate,
    resample_indices,
    restrict,
    two_sided_p,
)


def mean_task(values, name="t"):
    """A task whose only metric is the mean of a per-sample score (no scorer needed)."""
    values = [float(v) for v in values]
    return ScoredTask(
        name=name, ids=tuple(str(i) for i in range(len(values))), examples=(), predictions=(),
        corpus={"acc": sum(values) / len(values)}, per_sample=tuple({"acc": v} for v in values),
        mean_metrics=frozenset({"acc"}),
    )


def span_task(golds, preds, *, with_counts=True, partial_counts=True, calls=None):
    """A span task scored by the real span metrics; optionally without (partial) per-sample counts.

    Without partial counts ``partial_*`` can only be re-scored: the metric every test of
    re-scoring uses.
    """

    def score(examples, predictions):
        if calls is not None:
            calls.append(len(examples))
        sheet = span_score_sheet(list(examples), list(predictions))
        per_sample = [
            {k: v for k, v in s.items()
             if (with_counts or k == "f1") and (partial_counts or not k.startswith("partial_"))}
            for s in sheet.per_sample
        ]
        return ScoreSheet(sheet.corpus, per_sample)

    sheet = score(golds, preds)
    if calls is not None:
        calls.clear()
    return ScoredTask(
        name="spans", ids=tuple(str(i) for i in range(len(golds))), examples=tuple(golds),
        predictions=tuple(preds), corpus=dict(sheet.corpus), per_sample=tuple(sheet.per_sample), score=score,
    )


# sample 0: one entity found (tp 1); sample 1: three entities, none predicted (fn 3)
TINY_GOLD = [(Span(0, 1, "D"),), (Span(0, 1, "D"), Span(2, 3, "D"), Span(4, 5, "D"))]
TINY_PRED = [(Span(0, 1, "D"),), ()]


@pytest.mark.parametrize("with_counts", [True, False])
def test_micro_f1_is_recomputed_per_resample_not_averaged(with_counts):
    task = span_task(TINY_GOLD, TINY_PRED, with_counts=with_counts)
    # corpus: tp 1, fp 0, fn 3 → P 1, R 1/4, F1 = 2·1·0.25 / 1.25 = 0.4; per-sample F1 mean = (1 + 0) / 2 = 0.5
    assert task.corpus["f1"] == pytest.approx(0.4)
    assert np.mean([s["f1"] for s in task.per_sample]) == 0.5
    idx = np.array([[0, 1], [0, 0], [1, 1]] + [[0, 1]] * MIN_RESAMPLES)
    reps = replicate(task, idx)
    # [0, 1] → 0.4 (not 0.5); [0, 0] → tp 2 fp 0 fn 0 → 1.0; [1, 1] → tp 0 → 0.0
    assert reps.values["f1"][:3].tolist() == pytest.approx([0.4, 1.0, 0.0])
    assert reps.methods["f1"] == ("counts" if with_counts else "rescore")


def test_counts_and_rescore_agree_on_every_resample():
    rng = np.random.default_rng(3)
    golds, preds = [], []
    for _ in range(40):
        gold = tuple(Span(i, i + 1, "D") for i in range(0, 10, 2) if rng.random() < 0.5)
        pred = tuple(s for s in gold if rng.random() < 0.7) + ((Span(9, 10, "D"),) if rng.random() < 0.3 else ())
        golds.append(gold)
        preds.append(pred)
    idx = resample_indices(40, 150, seed=1)
    counted = replicate(span_task(golds, preds), idx)
    rescored = replicate(span_task(golds, preds, with_counts=False), idx)
    assert counted.methods["f1"] == "counts" and rescored.methods["f1"] == "rescore"
    np.testing.assert_allclose(counted.values["f1"], rescored.values["f1"], rtol=1e-12)
    np.testing.assert_allclose(counted.values["precision"], rescored.values["precision"], rtol=1e-12)
    # partial-overlap F1 from the per-sample partial_tp/fp/fn, the same as re-scoring it
    assert counted.methods["partial_f1"] == "counts" and rescored.methods["partial_f1"] == "rescore"
    np.testing.assert_allclose(counted.values["partial_f1"], rescored.values["partial_f1"], rtol=1e-12)


def test_interval_contains_point_and_narrows_with_more_samples():
    rng = np.random.default_rng(0)
    small = mean_task(rng.random(50) < 0.7)
    large = mean_task(rng.random(800) < 0.7)
    widths = []
    for task in (small, large):
        ci = bootstrap_task(task, resamples=1000, seed=0).intervals["acc"]
        assert ci.low <= ci.point <= ci.high
        assert ci.method == "mean" and ci.resamples == 1000
        widths.append(ci.high - ci.low)
    # the width shrinks like 1/sqrt(n): 16x the samples → about 1/4 the width
    assert widths[1] < widths[0] / 2.5


def test_same_seed_same_interval_other_seed_other_draws():
    task = mean_task(np.arange(30) % 3 == 0)
    a = bootstrap_task(task, resamples=300, seed=5).intervals["acc"]
    b = bootstrap_task(task, resamples=300, seed=5).intervals["acc"]
    assert (a.low, a.high) == (b.low, b.high)
    assert not np.array_equal(resample_indices(30, 5, 5, "t"), resample_indices(30, 5, 6, "t"))


def test_mean_metrics_never_call_the_scorer():
    def scorer(examples, predictions):
        raise AssertionError("a mean metric must be resampled from per-sample values")

    task = ScoredTask(name="t", ids=("a", "b", "c"), examples=(1, 2, 3), predictions=(1, 2, 3),
                      corpus={"bertscore": 0.5}, per_sample=({"bertscore": 0.2}, {"bertscore": 0.5}, {"bertscore": 0.8}),
                      mean_metrics=frozenset({"bertscore"}), score=scorer)
    ci = bootstrap_task(task, resamples=200).intervals["bertscore"]
    assert ci.method == "mean" and 0.2 - 1e-12 <= ci.low <= ci.high <= 0.8 + 1e-12


def test_declared_mean_that_is_not_a_mean_is_rescored():
    calls = []

    def scorer(examples, predictions):
        calls.append(1)
        return ScoreSheet({"m": max(examples)}, [{"m": float(e)} for e in examples])

    task = ScoredTask(name="t", ids=("a", "b"), examples=(0.0, 1.0), predictions=(None, None),
                      corpus={"m": 1.0}, per_sample=({"m": 0.0}, {"m": 1.0}),
                      mean_metrics=frozenset({"m"}), score=scorer)
    reps = replicate(task, resample_indices(2, 150, 0))
    assert reps.methods["m"] == "rescore" and len(calls) == 1 + 150  # all samples once (a check), then each resample
    assert any("do not average to it" in n for n in reps.notes)
    assert set(reps.values["m"].tolist()) <= {0.0, 1.0}


def test_budget_too_small_gives_no_interval_and_says_so():
    task = span_task(TINY_GOLD * 5, TINY_PRED * 5, partial_counts=False)
    boot = bootstrap_task(task, resamples=500, budget_s=0.0)
    assert boot.intervals["partial_f1"].method == "none" and boot.intervals["partial_f1"].low is None
    assert boot.intervals["f1"].method == "counts"  # vectorised metrics need no budget
    assert any("budget" in n for n in boot.replicates.notes)


def test_without_scorer_only_mean_and_count_metrics_get_intervals():
    full = span_task(TINY_GOLD * 4, TINY_PRED * 4, partial_counts=False)
    blind = ScoredTask(name=full.name, ids=full.ids, examples=(), predictions=(), corpus=full.corpus,
                       per_sample=full.per_sample)
    boot = bootstrap_task(blind, resamples=200)
    assert boot.intervals["f1"].method == "counts" and boot.intervals["f1"].low is not None
    assert boot.intervals["partial_f1"].method == "none"  # needs the scorer


def test_two_sided_p_formula():
    # all three differences > 0: #{d<=0} = 0 → p = 2·(0+1)/(3+1) = 0.5
    assert two_sided_p(np.array([1.0, 2.0, 3.0])) == 0.5
    # #{d<=0} = 1, #{d>=0} = 3 → p = 2·(1+1)/(4+1) = 0.8
    assert two_sided_p(np.array([-1.0, 1.0, 2.0, 3.0])) == pytest.approx(0.8)
    # all zero: both counts = B → 2·(B+1)/(B+1) = 2 → capped at 1
    assert two_sided_p(np.zeros(10)) == 1.0
    assert percentile_interval(np.array([np.nan])) is None


def test_paired_test_finds_a_planted_difference_and_not_a_null_one():
    rng = np.random.default_rng(1)
    base = rng.random(200) < 0.6
    better = base.copy()
    better[np.flatnonzero(~base)[:30]] = True  # B is right on 30 more samples, never worse
    a, b = mean_task(base, "q"), mean_task(better, "q")
    (diff,), _ = paired_bootstrap(b, a, resamples=1000, seed=0)
    # point: 30 / 200 = 0.15
    assert diff.diff == pytest.approx(0.15)
    assert diff.p_value < 0.05 and diff.low > 0
    assert diff.p_value == pytest.approx(2 / 1001)  # every resample favours B
    (same,), _ = paired_bootstrap(a, mean_task(base, "q"), resamples=1000, seed=0)
    assert same.diff == 0 and same.low == same.high == 0 and same.p_value == 1.0


def test_paired_test_is_not_fooled_by_noise():
    rng = np.random.default_rng(2)
    a = mean_task(rng.random(300) < 0.5, "q")
    b = mean_task(rng.random(300) < 0.5, "q")  # independent draws of the same accuracy
    (diff,), _ = paired_bootstrap(a, b, resamples=1000, seed=0)
    assert diff.low <= 0 <= diff.high and diff.p_value > 0.05


def test_paired_needs_aligned_samples_and_restrict_recomputes_corpus():
    task = span_task(TINY_GOLD, TINY_PRED)
    with pytest.raises(ValueError, match="same samples"):
        paired_bootstrap(task, restrict(task, [1, 0]))
    first = restrict(task, [0])
    assert first.ids == ("0",) and first.corpus["f1"] == 1.0  # sample 0 alone: tp 1 → F1 1
    assert restrict(task, [0, 1]) is task


def test_counts_formula_is_not_used_when_it_does_not_give_the_corpus_value():
    # a scorer whose "f1" is the mean of per-sample F1 (0.5 here) although tp/fp/fn are per-sample:
    # the counts formula gives 0.4 on the full sample, so the metric is re-scored, never guessed
    def macro_scorer(examples, predictions):
        sheet = span_score_sheet(list(examples), list(predictions))
        f1 = sum(s["f1"] for s in sheet.per_sample) / len(sheet.per_sample)
        return ScoreSheet({"f1": f1, "tp": sheet.corpus["tp"]}, sheet.per_sample)

    sheet = macro_scorer(TINY_GOLD, TINY_PRED)
    task = ScoredTask(name="m", ids=("0", "1"), examples=tuple(TINY_GOLD), predictions=tuple(TINY_PRED),
                      corpus=dict(sheet.corpus), per_sample=tuple(sheet.per_sample), score=macro_scorer)
    reps = replicate(task, np.array([[0, 1]] * MIN_RESAMPLES))
    assert reps.methods == {"f1": "rescore", "tp": "counts"}
    assert set(reps.values["f1"].tolist()) == {0.5}


def test_declared_from_sums_is_vectorised_and_checked():
    # token accuracy = Σ correct / Σ tokens; sample sizes differ, so the mean of ratios is wrong
    correct, tokens = [1, 9, 0], [2, 10, 4]
    calls = []

    def scorer(examples, predictions):
        calls.append(1)
        return ScoreSheet({"accuracy": sum(correct[i] for i in examples) / sum(tokens[i] for i in examples)},
                          [{"correct": correct[i], "tokens": tokens[i]} for i in examples])

    sheet = scorer([0, 1, 2], None)
    calls.clear()
    task = ScoredTask(name="acc", ids=("a", "b", "c"), examples=(0, 1, 2), predictions=(None, None, None),
                      corpus=dict(sheet.corpus), per_sample=tuple(sheet.per_sample), score=scorer,
                      from_sums=lambda s: {"accuracy": s["correct"] / s["tokens"]})
    idx = np.array([[0, 0, 2], [1, 1, 1], [0, 1, 2]] * 50)
    reps = replicate(task, idx)
    assert reps.methods["accuracy"] == "sums"
    # [0, 0, 2]: (1 + 1 + 0) / (2 + 2 + 4) = 0.25; [1, 1, 1]: 27 / 30 = 0.9; all: 10 / 16 = 0.625
    assert reps.values["accuracy"][:3].tolist() == pytest.approx([0.25, 0.9, 0.625])
    assert len(calls) == 1 + 2  # the full-sample check and two verification resamples only
    wrong = ScoredTask(**{**task.__dict__, "from_sums": lambda s: {"accuracy": s["correct"] / s["tokens"] / 2}})
    assert replicate(wrong, idx).methods["accuracy"] == "rescore"


@pytest.mark.parametrize("container", [frozenset, MetricFamilies])
def test_mean_metric_patterns_match_in_any_set_type(container):
    families = container({"rouge1", "bertscore[*]_f1"})
    assert is_mean_metric(families, "bertscore[enc@L6]_f1") and is_mean_metric(families, "rouge1")
    assert not is_mean_metric(families, "bertscore[enc@L6]_precision") and not is_mean_metric(families, "rouge2")
    task = ScoredTask(name="t", ids=("a", "b"), examples=(), predictions=(), corpus={"bertscore[x]_f1": 0.5},
                      per_sample=({"bertscore[x]_f1": 0.25}, {"bertscore[x]_f1": 0.75}), mean_metrics=families)
    assert bootstrap_task(task, resamples=50).intervals["bertscore[x]_f1"].method == "mean"


def test_restrict_without_scorer_recomputes_counts_on_the_subset():
    full = span_task(TINY_GOLD * 2, TINY_PRED * 2)
    blind = ScoredTask(name=full.name, ids=full.ids, examples=(), predictions=(), corpus=full.corpus,
                       per_sample=full.per_sample)
    # samples 0 and 2 are both "one entity found": tp 2 → F1 1; partial counts too
    sub = restrict(blind, [0, 2])
    assert sub.ids == ("0", "2") and sub.corpus["f1"] == 1.0 and sub.corpus["partial_f1"] == 1.0
    # samples 1 and 2: tp 1 fn 3 → P 1, R 1/4, F1 0.4
    assert restrict(blind, [1, 2]).corpus["f1"] == pytest.approx(0.4)
