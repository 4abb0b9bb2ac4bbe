"""Bootstrap intervals and the paired test, on hand-made tasks whose answers are known.

The strongest check of the contract: for every kind of aggregation, the value the bootstrap computes
from summed parts on a resample equals what the task's own scorer gives when it is run on that
resample's samples (drawn duplicates included).
"""

import numpy as np
import pytest

from evalpipe.metrics.aggregation import Mean, MicroPRF, Total
from evalpipe.metrics.chinese_text import text_score_sheet
from evalpipe.metrics.spans import span_score_sheet
from evalpipe.records import Span
from evalpipe.report import bootstrap
from evalpipe.report.bootstrap import (
    ResampleTask,
    bootstrap_task,
    paired_bootstrap,
    percentile_interval,
    replicate,
    resample_counts,
    resample_blocks,
    resample_indices,
    restrict,
    two_sided_p,
)
from evalpipe.report.runs import resample_task
from evalpipe.results import TaskSummary
from evalpipe.scoring import score_task
from evalpipe.tasks.registry import get_task


def from_sheet(name, sheet, corpus=None):
    """A ResampleTask from a scorer's sheet, through the same JSON the run directory holds."""
    parts = sheet.sample_parts()
    summary = TaskSummary(aggregations={m: a.to_json() for m, a in sheet.aggregations.items()})
    records = [{"id": str(i), "parts": dict(p)} for i, p in enumerate(parts)]
    return resample_task(name, records, corpus or sheet.corpus, summary, [])


def mean_task(values, name="t"):
    values = [float(v) for v in values]
    records = [{"id": str(i), "parts": {"acc": v}} for i, v in enumerate(values)]
    summary = TaskSummary(aggregations={"acc": Mean("acc").to_json()})
    return resample_task(name, records, {"acc": sum(values) / len(values)}, summary, [])


def spans(golds, preds):
    return from_sheet("spans", span_score_sheet(golds, preds))


# sample 0: one entity found (tp 1); sample 1: three entities, none predicted (fn 3)
TINY_GOLD = [(Span(0, 1, "D"),), (Span(0, 1, "D"), Span(2, 3, "D"), Span(4, 5, "D"))]
TINY_PRED = [(Span(0, 1, "D"),), ()]


def test_micro_f1_is_recomputed_per_resample_not_averaged():
    task = spans(TINY_GOLD, TINY_PRED)
    # corpus: tp 1, fp 0, fn 3 → P 1, R 1/4, F1 = 2·1·0.25 / 1.25 = 0.4 (the mean of per-sample F1 would be 0.5)
    assert task.corpus["f1"] == pytest.approx(0.4)
    reps = replicate(task, np.array([[0, 1], [0, 0], [1, 1]]))
    # [0, 1] → 0.4; [0, 0] → tp 2 fp 0 fn 0 → 1.0; [1, 1] → tp 0 → 0.0
    assert reps.values["f1"].tolist() == pytest.approx([0.4, 1.0, 0.0])
    assert reps.values["tp"].tolist() == [1, 2, 0] and reps.methods["f1"] == "micro_prf"


def _random_spans(rng, n):
    golds, preds = [], []
    for _ in range(n):
        gold = tuple(Span(i, i + 1 + (i % 3 == 0), "D" if i % 4 else "C") for i in range(0, 12, 2) if rng.random() < 0.5)
        pred = tuple(s for s in gold if rng.random() < 0.7) + ((Span(9, 11, "D"),) if rng.random() < 0.3 else ())
        golds.append(gold)
        preds.append(pred)
    return golds, preds


def test_every_span_metric_equals_the_scorer_on_each_resample():
    golds, preds = _random_spans(np.random.default_rng(3), 40)
    task = spans(golds, preds)
    idx = resample_indices(40, 60, seed=1)
    reps = replicate(task, idx)
    for b, row in enumerate(idx):
        truth = span_score_sheet([golds[i] for i in row], [preds[i] for i in row]).corpus
        for metric in ("precision", "recall", "f1", "partial_f1", "partial_precision", "tp", "fn"):
            assert reps.values[metric][b] == pytest.approx(truth[metric], abs=1e-12), (metric, b)


def test_classification_macro_f1_and_accuracy_equal_the_scorer_on_each_resample():
    spec = get_task("chip_sts")  # macro-F1 over the gold label set
    scoring = spec.scoring(None)
    from evalpipe.records import Example, Prediction
    rng = np.random.default_rng(5)
    labels = ["是的", "不是"]
    examples = [Example(str(i), {}, labels[int(rng.random() < 0.3)]) for i in range(50)]
    predictions = [Prediction(labels[int(rng.random() < 0.5)] if rng.random() < 0.9 else None) for _ in examples]
    from evalpipe.metrics.options import MetricOptions
    sheet = scoring.score(examples, predictions, MetricOptions())
    task = from_sheet("sts", sheet)
    idx = resample_indices(50, 60, seed=2)
    reps = replicate(task, idx)
    for b, row in enumerate(idx):
        truth = scoring.score([examples[i] for i in row], [predictions[i] for i in row], MetricOptions()).corpus
        assert reps.values["macro_f1"][b] == pytest.approx(truth["macro_f1"], abs=1e-12)
        assert reps.values["accuracy"][b] == pytest.approx(truth["accuracy"], abs=1e-12)


def test_corpus_bleu_from_sentence_statistics_equals_sacrebleu_on_each_resample():
    hyps = ["我爱北京天安门", "今天天气很好啊", "", "高血压需要长期服药", "多喝水多休息"]
    refs = ["我爱北京", "今天天气不错", "没有回答", "高血压患者应长期规律服药", "注意休息"]
    task = from_sheet("zh", text_score_sheet(hyps, refs))
    idx = resample_indices(5, 40, seed=0)
    reps = replicate(task, idx)
    for b, row in enumerate(idx):
        truth = text_score_sheet([hyps[i] for i in row], [refs[i] for i in row]).corpus
        assert reps.values["bleu4"][b] == pytest.approx(truth["bleu4"], abs=1e-12)
        assert reps.values["rouge_l"][b] == pytest.approx(truth["rouge_l"], abs=1e-12)


def test_token_accuracy_is_a_ratio_of_token_counts_not_a_mean_of_sentence_ratios():
    from evalpipe.records import Example
    from evalpipe.tasks.ncbi.disease import NerGold

    spec = get_task("ncbi_disease")
    examples = [
        Example("a", {"text": "x y", "tokens": ("x", "y")}, NerGold(("B-Disease", "O"), (Span(0, 1, "Disease"),))),
        Example("b", {"text": "p q r s", "tokens": ("p", "q", "r", "s")}, NerGold(("O", "O", "O", "O"), ())),
    ]
    from evalpipe.records import Completion

    # both answered, tagging nothing → a: 1/2 tokens right, b: 4/4
    answers = [Completion("<response>x y</response>"), Completion("<response>p q r s</response>")]
    outcome = score_task(spec, examples, ["{}", "{}"], answers, None)
    # corpus accuracy = (1 + 4) / (2 + 4) = 5/6, not the mean of 1/2 and 1
    assert outcome.metrics["accuracy"] == pytest.approx(5 / 6)
    records = outcome.records
    task = resample_task("ncbi_disease", records, outcome.metrics, outcome.summary, [])
    reps = replicate(task, np.array([[0, 0], [1, 1], [0, 1]]))
    assert reps.values["accuracy"].tolist() == pytest.approx([0.5, 1.0, 5 / 6])
    # errors is a count fixed by the run (resamples hold only answered samples): no interval
    assert "errors" not in reps.values and "fixed by the run" in reps.reasons["errors"]
    assert reps.methods["parse_failure_rate"] == "ratio"


def test_interval_contains_point_and_narrows_with_more_samples():
    rng = np.random.default_rng(0)
    widths = []
    for n in (50, 800):
        ci = bootstrap_task(mean_task(rng.random(n) < 0.7), resamples=1000, seed=0).intervals["acc"]
        assert ci.low <= ci.point <= ci.high and ci.method == "mean" and ci.resamples == 1000
        widths.append(ci.high - ci.low)
    # the width shrinks like 1/sqrt(n): 16x the samples → about 1/4 the width
    assert widths[1] < widths[0] / 2.5


def test_same_seed_same_interval_other_seed_other_draws():
    task = mean_task(np.arange(30) % 3 == 0)
    a = bootstrap_task(task, resamples=300, seed=5).intervals["acc"]
    b = bootstrap_task(task, resamples=300, seed=5).intervals["acc"]
    assert (a.low, a.high) == (b.low, b.high)
    assert not np.array_equal(resample_indices(30, 5, 5, "t"), resample_indices(30, 5, 6, "t"))


@pytest.mark.parametrize("n", [1, 7, 941, 20_000])
def test_draws_made_a_block_at_a_time_are_the_draws_made_at_once(n, monkeypatch):
    """Blocks bound the memory of large tasks; they must not change a single draw (so an interval is
    the same whatever the block size, and two runs compared on a task get the same draws)."""
    rng = np.random.default_rng(np.random.SeedSequence([3, bootstrap.zlib.crc32(b"t")]))
    at_once = rng.integers(0, n, size=(300, n))
    monkeypatch.setattr(bootstrap, "CHUNK_CELLS", 7 * n)  # blocks of 7 rows: 300 is no multiple of 7
    blocks = list(resample_blocks(n, 300, 3, "t"))
    assert len(blocks) == 43 and {len(b) for b in blocks} == {7, 6}
    assert np.array_equal(np.concatenate(blocks), at_once)
    assert np.array_equal(resample_indices(n, 300, 3, "t"), at_once)


def test_resample_counts_count_each_draw():
    counts = resample_counts(np.array([[0, 0, 2], [1, 2, 1]]), 3)
    assert counts.tolist() == [[2, 0, 1], [0, 2, 1]]


def test_a_metric_without_aggregation_has_no_interval_and_says_why():
    records = [{"id": "a", "parts": {"x": 1}}, {"id": "b", "parts": {"x": 0}}]
    summary = TaskSummary(aggregations={"x": Total("x").to_json()},
                          no_interval={"n": "the number of evaluated samples, fixed by the run"})
    task = resample_task("t", records, {"x": 1, "n": 2, "other": 0.3}, summary, [])
    boot = bootstrap_task(task, resamples=100)
    assert boot.intervals["x"].available
    assert not boot.intervals["n"].available and "fixed by the run" in boot.intervals["n"].reason
    assert not boot.intervals["other"].available and "declares no aggregation" in boot.intervals["other"].reason


def test_an_old_run_without_parts_gets_no_intervals_and_the_reason():
    summary = TaskSummary(aggregations={"acc": Mean("acc").to_json()})
    task = resample_task("t", [{"id": "a", "scores": {"acc": 1.0}}], {"acc": 1.0}, summary, [])
    interval = bootstrap_task(task, resamples=50).intervals["acc"]
    assert not interval.available and "evalpipe score" in interval.reason


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
    (diff,) = paired_bootstrap(b, a, resamples=1000, seed=0)
    assert diff.diff == pytest.approx(0.15)  # 30 / 200
    assert diff.p_value < 0.05 and diff.low > 0
    assert diff.p_value == pytest.approx(2 / 1001)  # every resample favours B
    (same,) = paired_bootstrap(a, mean_task(base, "q"), resamples=1000, seed=0)
    assert same.diff == 0 and same.low == same.high == 0 and same.p_value == 1.0


def test_paired_test_is_not_fooled_by_noise():
    rng = np.random.default_rng(2)
    a = mean_task(rng.random(300) < 0.5, "q")
    b = mean_task(rng.random(300) < 0.5, "q")  # independent draws of the same accuracy
    (diff,) = paired_bootstrap(a, b, resamples=1000, seed=0)
    assert diff.low <= 0 <= diff.high and diff.p_value > 0.05


def test_paired_needs_aligned_samples_and_restrict_recomputes_the_metrics():
    task = spans(TINY_GOLD * 2, TINY_PRED * 2)
    with pytest.raises(ValueError, match="same samples"):
        paired_bootstrap(task, restrict(task, [1, 0, 2, 3]))
    # samples 0 and 2 are both "one entity found": tp 2 → F1 1; partial counts too
    sub = restrict(task, [0, 2])
    assert sub.ids == ("0", "2") and sub.corpus["f1"] == 1.0 and sub.corpus["partial_f1"] == 1.0
    # samples 1 and 2: tp 1 fn 3 → P 1, R 1/4, F1 0.4
    assert restrict(task, [1, 2]).corpus["f1"] == pytest.approx(0.4)
    assert restrict(task, [0, 1, 2, 3]) is task


def test_a_resample_task_is_built_from_json_alone():
    task = spans(TINY_GOLD, TINY_PRED)
    assert isinstance(task, ResampleTask) and set(task.keys) >= {"tp", "fp", "fn", "partial_tp"}


def test_whole_number_parts_are_resampled_in_smaller_blocks_to_the_same_numbers(monkeypatch):
    """Sums of whole numbers are exact in any order, so a task whose parts are all whole numbers
    is resampled a smaller block at a time (less memory) with not one value changed; a task with a
    fractional part keeps the usual blocks (a matrix product's order of additions may change with
    the block's shape)."""
    rng = np.random.default_rng(1)
    records = [{"id": str(i), "parts": {"tp": int(rng.integers(0, 4)), "fp": int(rng.integers(0, 3)),
                                        "fn": int(rng.integers(0, 3))}} for i in range(5000)]
    summary = TaskSummary(aggregations={"f1": MicroPRF("f1").to_json(), "tp": Total("tp").to_json()})
    task = resample_task("t", records, {"f1": 0.5, "tp": 1.0}, summary, [])
    assert bootstrap.exact_cells([task]) == bootstrap.EXACT_CHUNK_CELLS
    small = bootstrap_task(task, resamples=300, seed=2)
    monkeypatch.setattr(bootstrap, "EXACT_CHUNK_CELLS", bootstrap.CHUNK_CELLS)
    usual = bootstrap_task(task, resamples=300, seed=2)
    for metric in ("f1", "tp"):
        assert np.array_equal(small.replicates.values[metric], usual.replicates.values[metric])
    fractional = resample_task("t", [{"id": "a", "parts": {"tp": 0.5, "fp": 1, "fn": 0}}], {"f1": 0.5}, summary, [])
    assert bootstrap.exact_cells([task, fractional]) == bootstrap.CHUNK_CELLS
