"""The shared P/R/F1 arithmetic, by hand."""

import pytest

from evalpipe.metrics.prf import PRF, micro_prf, set_counts, set_prf


def test_set_counts_treat_both_sides_as_sets():
    assert set_counts(["a", "b", "b"], ["b", "c", "c", "d"]) == (1, 2, 1)
    assert set_counts([], []) == (0, 0, 0)


def test_set_prf_by_hand_and_silence_earns_nothing():
    prf = set_prf({"a", "b", "c"}, {"a", "b", "x"})  # 2 right of 3 predicted, 2 of 3 gold found
    assert (prf.precision, prf.recall, prf.f1) == pytest.approx((2 / 3, 2 / 3, 2 / 3))
    assert set_prf({"a"}, set()) == PRF(0, 0, 1, 0.0, 0.0, 0.0)
    assert set_prf(set(), set()) == PRF(0, 0, 0, 0.0, 0.0, 0.0)


def test_micro_sums_counts_before_dividing():
    # sample 1: tp 1 fp 0 fn 0; sample 2: tp 0 fp 1 fn 3 → P = 1/2, R = 1/4, F1 = 1/3
    total = micro_prf([{"a"}, {"b", "c", "d"}], [{"a"}, {"z"}])
    assert (total.tp, total.fp, total.fn) == (1, 1, 3)
    assert (total.precision, total.recall, total.f1) == pytest.approx((0.5, 0.25, 1 / 3))
    with pytest.raises(ValueError, match="2 gold samples but 1"):
        micro_prf([{"a"}, {"b"}], [{"a"}])
