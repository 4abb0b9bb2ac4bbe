"""Micro P/R/F1 over *sets of tuples*: relation triples, (text, term) pairs, (mention, type) pairs.

Used where the unit of credit is an extracted item without a position: CMeIE triples
``(subject, predicate, object)``, CHIP-CDN standard terms of one diagnosis text, PromptCBLUE's
position-free entities and events.

Definition (:mod:`evalpipe.metrics.prf`, as for spans, with tuples instead of spans):

* **Sets.** Within one sample the gold and predicted items are sets: an item listed twice counts
  once. Items are compared with ``==``; callers normalise strings first (the CBLUE tasks compare
  :func:`evalpipe.text.chinese.match_key` forms) so that equality means "same answer".
* **Micro averaging.** ``tp = |G ∩ P|``, ``fp = |P \\ G|``, ``fn = |G \\ P|`` per sample, summed
  over the corpus; ``precision = tp / (tp + fp)``, ``recall = tp / (tp + fn)``,
  ``F1 = 2PR / (P + R)``; every 0/0 is 0.0.
* **Empty answers.** A failed or empty prediction is the empty set: its gold items are false
  negatives. A sample whose gold and prediction are both empty adds nothing to the counts.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from evalpipe.metrics.aggregation import MicroPRF, Total
from evalpipe.metrics.prf import PRF, check_parallel, micro_prf, set_counts, set_prf
from evalpipe.records import ScoreSheet

__all__ = ["tuple_counts", "tuple_micro_prf", "tuple_score_sheet"]


def tuple_counts(gold: Iterable[Hashable], pred: Iterable[Hashable]) -> tuple[int, int, int]:
    """``(tp, fp, fn)`` of one sample; both sides are sets."""
    return set_counts(gold, pred)


def tuple_micro_prf(golds: Sequence[Iterable[Hashable]], preds: Sequence[Iterable[Hashable]]) -> PRF:
    """Corpus micro P/R/F1: per-sample counts summed, then P/R/F1 once (0/0 → 0.0)."""
    return micro_prf(golds, preds, set_counts)


def tuple_score_sheet(golds: Sequence[Iterable[Hashable]], preds: Sequence[Iterable[Hashable]]) -> ScoreSheet:
    """``corpus``: precision, recall, f1, tp, fp, fn (micro); ``per_sample``: tp, fp, fn, f1."""
    check_parallel(golds, preds)
    samples = [set_prf(gold, pred) for gold, pred in zip(golds, preds)]  # each sample counted once
    total = PRF.from_counts(sum(s.tp for s in samples), sum(s.fp for s in samples), sum(s.fn for s in samples))
    per_sample = [{"tp": s.tp, "fp": s.fp, "fn": s.fn, "f1": s.f1} for s in samples]
    corpus = {"precision": total.precision, "recall": total.recall, "f1": total.f1,
              "tp": total.tp, "fp": total.fp, "fn": total.fn}
    return ScoreSheet(corpus=corpus, per_sample=per_sample, aggregations=TUPLE_AGGREGATIONS)


#: how each corpus metric of :func:`tuple_score_sheet` is made from the summed per-sample counts
TUPLE_AGGREGATIONS = {**{stat: MicroPRF(stat) for stat in ("precision", "recall", "f1")},
                      **{count: Total(count) for count in ("tp", "fp", "fn")}}
