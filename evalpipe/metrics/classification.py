"""Label metrics: accuracy and per-class / macro F1.

(Micro-F1 of single-label classification equals accuracy — every wrong or missing prediction is
one false positive and one false negative — so it has no function of its own.)

Conventions shared by every classification task:

* A prediction of ``None`` is a parse failure (the answer named no valid label, or an
  ambiguous one). It is always wrong, and it never becomes a class of its own.
* Macro-F1 averages over the **gold label set** (the labels that occur in gold, or an explicit
  ``labels`` list), so a label the model invented cannot add a class and move the average.
  Its predictions still count as false positives of nothing and false negatives of the gold class.
* Per-class P/R/F1 are :class:`evalpipe.metrics.prf.PRF` (any 0/0 is 0.0); a class with no gold and no prediction inside an explicit ``labels`` list
  scores F1 0.0 and is still averaged (pass only the labels you mean).
* Empty input (no samples) raises ``ValueError``: a score over nothing is a bug upstream.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence

from evalpipe.metrics.prf import PRF


def _check(golds: Sequence[object], preds: Sequence[object]) -> None:
    if len(golds) != len(preds):
        raise ValueError(f"{len(golds)} gold labels but {len(preds)} predictions")
    if not golds:
        raise ValueError("no samples to score")


def accuracy(golds: Sequence[Hashable], preds: Sequence[Hashable | None]) -> float:
    """Fraction of samples whose prediction equals the gold label (None is always wrong)."""
    _check(golds, preds)
    return sum(1 for g, p in zip(golds, preds) if p is not None and p == g) / len(golds)


def per_class(
    golds: Sequence[Hashable], preds: Sequence[Hashable | None], labels: Sequence[Hashable] | None = None
) -> dict[Hashable, PRF]:
    """One-vs-rest counts and P/R/F1 for each label in ``labels`` (default: the gold labels, sorted by str)."""
    _check(golds, preds)
    classes = list(labels) if labels is not None else sorted(set(golds), key=str)
    if not classes:
        raise ValueError("no labels to score")
    gold_n, pred_n = Counter(golds), Counter(p for p in preds if p is not None)
    right = Counter(g for g, p in zip(golds, preds) if p is not None and p == g)
    return {c: PRF.from_counts(right[c], pred_n[c] - right[c], gold_n[c] - right[c]) for c in classes}


#: prefix of the one-vs-rest count parts :func:`class_parts` writes (``cls.tp:<label>`` …)
CLASS_PREFIX = "cls."


def class_parts(gold: Hashable, pred: Hashable | None, prefix: str = CLASS_PREFIX) -> dict[str, int]:
    """One sample's one-vs-rest counts, the parts of macro-F1
    (:class:`evalpipe.metrics.aggregation.MacroF1`): a right answer is a ``tp`` of its label; a wrong
    one an ``fn`` of the gold label and an ``fp`` of the predicted one; a parse failure (None) only
    an ``fn`` — it never becomes a class."""
    if pred is not None and pred == gold:
        return {f"{prefix}tp:{gold}": 1}
    out = {f"{prefix}fn:{gold}": 1}
    if pred is not None:
        out[f"{prefix}fp:{pred}"] = 1
    return out


def macro_f1(
    golds: Sequence[Hashable], preds: Sequence[Hashable | None], labels: Sequence[Hashable] | None = None
) -> float:
    """Unweighted mean of per-class F1 over the gold label set (or ``labels``)."""
    scores = per_class(golds, preds, labels)
    return sum(s.f1 for s in scores.values()) / len(scores)
