"""Precision, recall and F1 from counts, and over sets — the one definition every metric module uses.

* ``precision = tp / (tp + fp)``, ``recall = tp / (tp + fn)``; a ratio with a zero denominator
  is ``0.0``. ``F1 = 2PR / (P + R)`` (the harmonic mean of the two floats, which keeps values
  bit-identical to seqeval), ``0.0`` when ``P + R == 0``: nothing right, including the case of an
  empty prediction against empty gold, scores 0 — silence earns nothing.
* **Sets.** :func:`set_counts` compares one sample's gold and predicted items as sets (an item
  listed twice counts once): ``tp = |G ∩ P|``, ``fp = |P \\ G|``, ``fn = |G \\ P|``.
* **Micro averaging.** :func:`micro_prf` sums per-sample ``(tp, fp, fn)`` over the corpus and
  computes P/R/F1 once from the sums.

Spans (:mod:`evalpipe.metrics.spans`), tuples (:mod:`evalpipe.metrics.tuples`), ICD-10 codes and
UMLS concepts all score through these functions.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["PRF", "check_parallel", "micro_prf", "prf_from_counts", "set_counts", "set_prf"]

#: the items one sample's gold and prediction are made of (spans, tuples, codes …)
Item = TypeVar("Item", bound=Hashable)


@dataclass(frozen=True)
class PRF:
    """Counts and the precision / recall / F1 derived from them (see the module docstring)."""

    tp: int
    fp: int
    fn: int
    precision: float
    recall: float
    f1: float

    @classmethod
    def from_counts(cls, tp: int, fp: int, fn: int) -> PRF:
        """Build a PRF from true-positive, false-positive and false-negative counts."""
        for name, value in (("tp", tp), ("fp", fp), ("fn", fn)):
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        precision = _ratio(tp, tp + fp)
        recall = _ratio(tp, tp + fn)
        f1 = 2.0 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
        return cls(tp=tp, fp=fp, fn=fn, precision=precision, recall=recall, f1=f1)


def prf_from_counts(tp: int, fp: int, fn: int) -> PRF:
    """Same as :meth:`PRF.from_counts`: P, R, F1 from counts, ``0.0`` on a zero denominator."""
    return PRF.from_counts(tp, fp, fn)


def _ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def check_parallel(golds: Sequence[object], preds: Sequence[object]) -> None:
    """Gold and predictions must describe the same samples, one for one."""
    if len(golds) != len(preds):
        raise ValueError(f"{len(golds)} gold samples but {len(preds)} predicted samples")


def set_counts(gold: Iterable[Hashable], pred: Iterable[Hashable]) -> tuple[int, int, int]:
    """``(tp, fp, fn)`` of one sample, both sides as sets; empty and empty give ``(0, 0, 0)``."""
    gold_set, pred_set = set(gold), set(pred)
    tp = len(gold_set & pred_set)
    return tp, len(pred_set) - tp, len(gold_set) - tp


def set_prf(gold: Iterable[Hashable], pred: Iterable[Hashable]) -> PRF:
    """One sample's P/R/F1 of its predicted set against its gold set."""
    return PRF.from_counts(*set_counts(gold, pred))


def micro_prf(
    golds: Sequence[Iterable[Item]],
    preds: Sequence[Iterable[Item]],
    counts: Callable[[Iterable[Item], Iterable[Item]], tuple[int, int, int]] = set_counts,
) -> PRF:
    """Micro averaging: ``counts(gold, pred)`` per sample summed over the corpus, then P/R/F1 once."""
    check_parallel(golds, preds)
    tp = fp = fn = 0
    for gold, pred in zip(golds, preds):
        s_tp, s_fp, s_fn = counts(gold, pred)
        tp, fp, fn = tp + s_tp, fp + s_fp, fn + s_fn
    return PRF.from_counts(tp, fp, fn)
