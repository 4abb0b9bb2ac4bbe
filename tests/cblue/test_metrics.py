"""Tuple micro-F1 and retrieval metrics against hand computations."""

from __future__ import annotations

import pytest

from evalpipe.metrics.retrieval import mrr_at_k, per_query, recall_at_k
from evalpipe.metrics.tuples import tuple_counts, tuple_micro_prf, tuple_score_sheet


def test_tuple_micro_f1_hand_computed():
    golds = [{("糖尿病", "药物治疗", "二甲双胍"), ("糖尿病", "临床表现", "多饮")}, {("痛风", "实验室检查", "血尿酸")}]
    preds = [{("糖尿病", "药物治疗", "二甲双胍"), ("糖尿病", "临床表现", "多尿")}, set()]
    # sample 1: tp 1, fp 1, fn 1; sample 2: fn 1 → tp 1, fp 1, fn 2
    # P = 1/2, R = 1/3, F1 = 2·(1/2)(1/3)/(1/2 + 1/3) = (1/3)/(5/6) = 0.4
    prf = tuple_micro_prf(golds, preds)
    assert (prf.tp, prf.fp, prf.fn) == (1, 1, 2)
    assert prf.precision == 0.5 and prf.recall == pytest.approx(1 / 3) and prf.f1 == pytest.approx(0.4)
    sheet = tuple_score_sheet(golds, preds)
    assert sheet.corpus["f1"] == pytest.approx(0.4)
    assert sheet.per_sample[0] == {"tp": 1, "fp": 1, "fn": 1, "f1": 0.5}
    assert sheet.per_sample[1] == {"tp": 0, "fp": 0, "fn": 1, "f1": 0.0}


def test_tuple_counts_treat_items_as_sets():
    assert tuple_counts([("a",), ("a",)], [("a",), ("a",), ("b",)]) == (1, 1, 0)
    assert tuple_micro_prf([[]], [[]]).f1 == 0.0  # nothing to get right: 0, not 1
    with pytest.raises(ValueError):
        tuple_micro_prf([[]], [])


def test_recall_and_mrr_on_a_hand_made_ranking():
    ranks = [1, 3, None, 6, 10]
    # Recall@5: ranks 1 and 3 → 2/5
    assert recall_at_k(ranks, 5) == pytest.approx(0.4)
    # MRR@10: (1 + 1/3 + 0 + 1/6 + 1/10) / 5 = 1.6 / 5 = 0.32
    assert mrr_at_k(ranks, 10) == pytest.approx(0.32)
    # MRR@5 drops ranks 6 and 10: (1 + 1/3) / 5
    assert mrr_at_k(ranks, 5) == pytest.approx((4 / 3) / 5)
    assert per_query(6, (5,), 10) == {"recall@5": 0.0, "mrr@10": pytest.approx(1 / 6)}
    assert per_query(None, (5, 20), 10) == {"recall@5": 0.0, "recall@20": 0.0, "mrr@10": 0.0}


def test_retrieval_metrics_reject_bad_input():
    with pytest.raises(ValueError):
        recall_at_k([], 5)
    with pytest.raises(ValueError):
        mrr_at_k([0], 10)
