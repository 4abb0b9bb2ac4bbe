"""Label metrics on hand-computed cases."""

import pytest

from evalpipe.metrics.classification import accuracy, macro_f1, per_class


def test_accuracy_counts_none_as_wrong():
    assert accuracy(["a", "b", "c", "a"], ["a", None, "c", "b"]) == 0.5


def test_macro_f1_hand_computed():
    golds = ["a", "a", "b", "b", "c"]
    preds = ["a", "b", "b", "b", None]
    # a: tp1 fp0 fn1 → P1 R.5 F 2/3 ; b: tp2 fp1 fn0 → P 2/3 R1 F .8 ; c: tp0 → 0
    assert macro_f1(golds, preds) == pytest.approx((2 / 3 + 0.8 + 0) / 3)


def test_invented_label_creates_no_class():
    golds = ["a", "b"]
    preds = ["a", "zzz"]
    scores = per_class(golds, preds)
    assert set(scores) == {"a", "b"}
    # a: F1 1 ; b: tp0 fn1 → 0 ; 'zzz' is not averaged in
    assert macro_f1(golds, preds) == 0.5


def test_explicit_labels_and_errors():
    assert macro_f1(["a"], ["a"], labels=["a", "b"]) == 0.5
    with pytest.raises(ValueError, match="no samples"):
        accuracy([], [])
    with pytest.raises(ValueError, match="2 gold labels but 1"):
        macro_f1(["a", "b"], ["a"])
