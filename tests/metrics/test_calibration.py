"""Calibration metrics (ECE, Brier, accuracy–coverage): hand-computed cases, the declared aggregations
on resamples, and an end-to-end log-likelihood run against the loopback fake server whose option
log-probabilities are known (-0.1 for the letter it prefers, -3.0 for the others)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from evalpipe.metrics.aggregation import aggregation_from_json, evaluate
from evalpipe.metrics.calibration import (
    ExpectedCalibrationError, MeanOverScored, accuracy_coverage, calibration_parts, confidence_bin,
    option_probabilities, reliability,
)
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Example
from evalpipe.tasks.kinds.multiple_choice import parse_logprobs, score_loglikelihood
from tests.support.fake_openai import FakeOpenAIProcess
from tests.tasks import mcqa_synthetic as syn
from tests.test_cli import evalpipe, only_run


def test_softmax_of_log_probabilities():
    p = option_probabilities([math.log(0.2), math.log(0.3), math.log(0.5)])
    assert p == pytest.approx([0.2, 0.3, 0.5])
    assert option_probabilities([-1000.0, -1000.0]) == pytest.approx([0.5, 0.5])  # no underflow to 0/0


def test_bins_include_their_left_edge_and_the_last_is_closed():
    assert [confidence_bin(c) for c in (0.0, 0.05, 0.25, 0.55, 0.95, 1.0)] == [0, 0, 2, 5, 9, 9]


def _sheet_parts(cases):
    """cases: (probabilities, gold index) → the samples' calibration parts."""
    return [calibration_parts(p, g) for p, g in cases]


def test_ece_and_brier_by_hand():
    cases = [([0.85, 0.15], 0),   # bin 8, right
             ([0.82, 0.18], 1),   # bin 8, wrong
             ([0.35, 0.65], 1),   # bin 6, right
             ([0.25, 0.25, 0.5], 0)]  # bin 5, wrong (predicts the third)
    parts = _sheet_parts(cases)
    # bin 8: 2 samples, acc 1/2, mean conf 0.835 → |0.5 − 0.835| · 2/4; bin 6: |1 − 0.65| · 1/4; bin 5: |0 − 0.5| · 1/4
    ece = (2 * 0.335 + 0.35 + 0.5) / 4
    brier = ((0.15 ** 2 + 0.15 ** 2) + (0.82 ** 2 + 0.82 ** 2) + (0.35 ** 2 + 0.35 ** 2)
             + (0.75 ** 2 + 0.25 ** 2 + 0.5 ** 2)) / 4
    assert evaluate(ExpectedCalibrationError(), parts) == pytest.approx(ece, abs=1e-12)
    assert evaluate(MeanOverScored("brier"), parts) == pytest.approx(brier, abs=1e-12)
    bins = reliability(parts)
    assert [b.n for b in bins] == [0, 0, 0, 0, 0, 1, 1, 0, 2, 0]
    assert bins[8].accuracy == 0.5 and bins[8].confidence == pytest.approx(0.835) and bins[0].accuracy is None


def test_no_scored_sample_is_no_value_not_zero():
    assert math.isnan(evaluate(ExpectedCalibrationError(), [{}, {}]))
    assert math.isnan(evaluate(MeanOverScored("brier"), [{}]))


def test_declarations_round_trip_and_resample_as_arrays():
    for aggregation in (ExpectedCalibrationError(), MeanOverScored("brier")):
        assert aggregation_from_json(json.loads(json.dumps(aggregation.to_json()))) == aggregation
    parts = _sheet_parts([([0.9, 0.1], 0), ([0.6, 0.4], 1)])
    ece = ExpectedCalibrationError()
    # resample 1 = sample 0 twice (|2 − 1.8| / 2 = 0.1), resample 2 = sample 1 twice (|0 − 1.2| / 2 = 0.6)
    sums = {k: np.array([2 * parts[0].get(k, 0.0), 2 * parts[1].get(k, 0.0)]) for k in ece.keys()}
    assert ece.compute(sums, np.array([2.0, 2.0])) == pytest.approx([0.1, 0.6])


def test_accuracy_coverage_and_its_area():
    coverage, accuracy, area = accuracy_coverage([0.9, 0.8, 0.7, 0.6], [1, 1, 0, 1])
    assert coverage == [0.25, 0.5, 0.75, 1.0]
    assert accuracy == pytest.approx([1.0, 1.0, 2 / 3, 0.75])
    assert area == pytest.approx((1 + 1 + 2 / 3 + 0.75) / 4)
    # a tie is one group whatever the order of its samples: each counts as the group's mean correctness
    _, tied_a, area_a = accuracy_coverage([0.5, 0.5, 0.9], [1, 0, 1])
    _, tied_b, area_b = accuracy_coverage([0.5, 0.5, 0.9], [0, 1, 1])
    assert tied_a == tied_b == pytest.approx([1.0, 0.75, 2 / 3]) and area_a == area_b
    assert math.isnan(accuracy_coverage([], [])[2])


def _example(gold: str) -> Example:
    return Example("q", {"options": [{"letter": k, "text": k} for k in "ABC"]}, gold)


def test_loglikelihood_scorer_reports_ece_and_brier_over_the_samples_with_probabilities():
    answers = [{" A": math.log(0.7), " B": math.log(0.2), " C": math.log(0.1)},   # right, conf 0.7
               {" A": math.log(0.3), " B": math.log(0.6), " C": math.log(0.1)}]   # wrong (gold A), conf 0.6
    examples = [_example("A"), _example("A"), _example("B")]
    predictions = [parse_logprobs(json.dumps({"logprobs": a}), ex) for a, ex in zip(answers, examples)]
    predictions.append(parse_logprobs("not json", examples[2]))  # a failure: wrong, and no probabilities
    sheet = score_loglikelihood(examples, predictions, MetricOptions())
    assert sheet.corpus["accuracy"] == pytest.approx(1 / 3)
    assert sheet.corpus["ece"] == pytest.approx((0.3 + 0.6) / 2)
    brier = ((0.3 ** 2 + 0.2 ** 2 + 0.1 ** 2) + (0.7 ** 2 + 0.6 ** 2 + 0.1 ** 2)) / 2
    assert sheet.corpus["brier"] == pytest.approx(brier)
    assert sheet.per_sample[0]["confidence"] == pytest.approx(0.7) and "confidence" not in sheet.per_sample[2]


PREFERRED = {"scurvy": "C", "insulin": "B", "opioid": "D", "peaked": "D", "forearm": "Z"}  # opioid wrong; forearm none


def test_ece_and_brier_of_a_loglikelihood_run_equal_an_independent_computation(tmp_path):
    """The fake server gives -0.1 to the letter it prefers and -3.0 to every other: computed here by
    hand from that rule, not from evalpipe's functions."""
    path = syn.write_medqa(tmp_path / "data")
    script = tmp_path / "answers.json"
    script.write_text(json.dumps(PREFERRED))
    with FakeOpenAIProcess(latency=0.0, script=script) as server:
        done = evalpipe("run", "--task", "medqa", "--data", f"medqa={path}", "--mcqa-scoring", "loglikelihood",
                        "--model", "fake-model", "--results-dir", str(tmp_path / "results"), "--base-url", server.url)
    assert done.returncode == 0, done.stderr
    run = only_run(tmp_path / "results")
    metrics = json.loads((run / "metrics.json").read_text())["medqa"]

    high, low = math.exp(-0.1), math.exp(-3.0)
    confident = high / (high + 3 * low)            # one preferred option of four
    other = low / (high + 3 * low)
    golds = [q[2] for q in syn.QUESTIONS[:5]]
    rows = []  # (confidence, correct, brier)
    for (_key, letter), gold in zip(PREFERRED.items(), golds):
        if letter in "ABCD":
            rows.append((confident, float(letter == gold),
                         (1 - confident) ** 2 + 3 * other ** 2 if letter == gold else
                         confident ** 2 + (1 - other) ** 2 + 2 * other ** 2))
        else:  # no option preferred: all four equal, the first (A) is chosen; forearm's gold is B
            rows.append((0.25, float(gold == "A"), 0.75 ** 2 + 3 * 0.25 ** 2 if gold == "A" else
                         2 * 0.25 ** 2 + 0.75 ** 2 + 0.25 ** 2))
    by_bin: dict[int, list[tuple[float, float]]] = {}
    for c, y, _ in rows:
        by_bin.setdefault(min(int(c * 10), 9), []).append((c, y))
    ece = sum(abs(sum(y for _, y in group) - sum(c for c, _ in group)) for group in by_bin.values()) / len(rows)
    assert metrics["accuracy"] == pytest.approx(3 / 5)
    assert metrics["ece"] == pytest.approx(ece, abs=1e-9)
    assert metrics["brier"] == pytest.approx(sum(b for *_, b in rows) / len(rows), abs=1e-9)

    summary = json.loads((run / "summary.json").read_text())["tasks"]["medqa"]
    assert summary["aggregations"]["ece"]["kind"] == "ece" and "ece" not in summary["no_interval"]
    report = evalpipe("report", str(run), "--out", str(tmp_path / "report"), "--resamples", "200")
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "report" / "report.html").read_text()
    assert "Reliability diagram" in html and "accuracy–coverage" in html.lower()
    md = (tmp_path / "report" / "report.md").read_text()
    assert "AUACC" in md
