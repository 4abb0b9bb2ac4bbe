"""The spread and consistency statistics against hand-computed values (and scipy's Kendall tau-b)."""

from __future__ import annotations

import math

import pytest
from scipy.stats import kendalltau

from evalpipe.metrics.spread import agreement, competition_ranks, correct_share, flipped, kendall_tau_b, spread_stats


def test_spread_stats_by_hand():
    # values 0.5, 0.7, 0.9: mean 0.7; population variance (0.04 + 0 + 0.04) / 3
    s = spread_stats({"a": 0.5, "b": 0.9, "c": 0.7})
    assert s.mean == pytest.approx(0.7)
    assert s.std == pytest.approx(math.sqrt(0.08 / 3))
    assert (s.min, s.max, s.min_at, s.max_at, s.levels) == (0.5, 0.9, "a", "b", 3)
    assert s.spread == pytest.approx(0.4)
    one = spread_stats({"only": 0.3})
    assert (one.std, one.spread, one.min_at, one.max_at) == (0.0, 0.0, "only", "only")
    tie = spread_stats({"x": 1.0, "y": 1.0})
    assert (tie.min_at, tie.max_at) == ("x", "x")  # the first level on a tie


def test_spread_stats_refuses_nothing_and_nan():
    with pytest.raises(ValueError, match="no values"):
        spread_stats({})
    with pytest.raises(ValueError, match="level\\(s\\) b"):
        spread_stats({"a": 0.1, "b": float("nan")})


def test_agreement_correct_share_and_flips():
    assert agreement(["x", "x", "y", "x", "z"]) == 3 / 5
    assert agreement(["x"]) == 1.0 and agreement([]) is None
    assert agreement(["a", "b"]) == 0.5  # a tie: the most frequent value is held by one of two
    assert correct_share([1, 0, 1, 1]) == 0.75 and correct_share([]) is None
    assert flipped([1, 0]) is True and flipped([1, 1]) is False and flipped([0.0, 0.0]) is False
    assert flipped([]) is None


def test_competition_ranks():
    assert competition_ranks({"a": 0.9, "b": 0.5, "c": 0.9, "d": 0.1}) == {"a": 1, "c": 1, "b": 3, "d": 4}
    assert competition_ranks({"a": 0.2, "b": 0.1}, higher_is_better=False) == {"b": 1, "a": 2}


@pytest.mark.parametrize(("x", "y", "tau"), [
    ([1, 2, 3], [1, 2, 3], 1.0),
    ([1, 2, 3], [3, 2, 1], -1.0),
    # pairs (1,2) concordant, (1,3) concordant, (2,3) discordant: (2 - 1) / 3
    ([1, 2, 3], [1, 3, 2], 1 / 3),
    # x has a tie: C = 2, D = 0, T_x = 1, T_y = 0: 2 / sqrt(2 * 3)
    ([1, 1, 2], [1, 2, 3], 2 / math.sqrt(6)),
])
def test_kendall_tau_b_by_hand_and_as_scipy(x, y, tau):
    assert kendall_tau_b(x, y) == pytest.approx(tau)
    assert kendall_tau_b(x, y) == pytest.approx(kendalltau(x, y).statistic)


def test_kendall_tau_b_undefined_and_mismatched():
    assert kendall_tau_b([1, 1, 1], [1, 2, 3]) is None
    assert kendall_tau_b([1], [1]) is None
    with pytest.raises(ValueError):
        kendall_tau_b([1, 2], [1])
