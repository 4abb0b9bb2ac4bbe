"""ICD-10 coding metrics: exact-code and 3-character-category P/R/F1, and the valid-code ratio.

Codes are compared in normal form (upper case, no dot: :func:`evalpipe.parsers.icd10.normalise_code`);
within one document the predicted and the gold codes are **sets** (a code listed twice counts once).

* **exact**: a predicted code is right if the same full code is gold.
* **category**: codes are cut to their first three characters (the ICD-10 category, ``I509`` →
  ``I50``) and compared as sets of categories.
* **Per-document averaging** (``exact_precision``, ``exact_recall``, ``exact_f1``, ``category_*``),
  as CLUE reports them: P, R and F1 are computed per document and averaged over documents.
  precision = |pred ∩ gold| / |pred| (0.0 with no prediction), recall = |pred ∩ gold| / |gold|,
  F1 = 2PR / (P + R) (0.0 when P + R = 0). A document without gold codes cannot be scored and
  is rejected (``ValueError``) — the loaders already refuse such documents.
* **Micro averaging** (``exact_micro_*``, ``category_micro_*``): true positives, false positives
  and false negatives are summed over documents first, then P/R/F1 computed once (0/0 = 0.0).
* **valid_ratio** (per-document mean): the share of a document's predicted codes that are real
  ICD-10-CM codes — a category or subcategory of the code set in ``simple-icd-10-cm`` (not a
  chapter or block); a document with **no** predicted code scores 0.0 (as in CLUE: silence does
  not earn validity). **valid_micro_ratio**: valid predicted codes / predicted codes over the
  corpus (0.0 if nothing was predicted anywhere).
* Empty answer or failed request: no prediction → P = R = F1 = 0 for that document, valid 0.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import cache
from typing import Any

from evalpipe.metrics.aggregation import Mean, MicroPRF, Ratio
from evalpipe.metrics.prf import PRF, micro_prf, set_prf
from evalpipe.records import ScoreSheet

PER_DOCUMENT_KEYS = (
    "exact_precision", "exact_recall", "exact_f1",
    "category_precision", "category_recall", "category_f1",
    "valid_ratio",
)


@cache
def _code_set() -> Any:
    with warnings.catch_warnings():  # the package reads its data with deprecated importlib calls
        warnings.simplefilter("ignore", DeprecationWarning)
        import simple_icd_10_cm

    return simple_icd_10_cm


@cache
def is_valid_icd10cm(code: str) -> bool:
    """A real ICD-10-CM category or subcategory (dotted or not; case matters: normalise first)."""
    cm = _code_set()
    return bool(cm.is_valid_item(code)) and bool(cm.is_category_or_subcategory(code))


def icd_score_sheet(golds: Sequence[Sequence[str]], preds: Sequence[Sequence[str]]) -> ScoreSheet:
    """Per-document and micro metrics (see the module docstring); codes must be normalised."""
    if len(golds) != len(preds):
        raise ValueError(f"{len(golds)} gold documents but {len(preds)} predictions")
    if not golds:
        raise ValueError("no documents to score")
    exact_pairs: list[tuple[set[str], set[str]]] = []
    category_pairs: list[tuple[set[str], set[str]]] = []
    predicted = valid = 0
    per_sample = []
    parts = []
    for index, (gold_codes, pred_codes) in enumerate(zip(golds, preds)):
        gold, pred = set(gold_codes), set(pred_codes)
        if not gold:
            raise ValueError(f"document {index} has no gold code")
        gold3, pred3 = {c[:3] for c in gold}, {c[:3] for c in pred}
        exact_pairs.append((gold, pred))
        category_pairs.append((gold3, pred3))
        n_valid = sum(1 for c in pred if is_valid_icd10cm(c))
        predicted, valid = predicted + len(pred), valid + n_valid
        exact, category = set_prf(gold, pred), set_prf(gold3, pred3)
        per_sample.append({
            "exact_precision": exact.precision, "exact_recall": exact.recall, "exact_f1": exact.f1,
            "category_precision": category.precision, "category_recall": category.recall,
            "category_f1": category.f1,
            "valid_ratio": n_valid / len(pred) if pred else 0.0,
            "predicted_codes": len(pred), "valid_codes": n_valid,
        })
        parts.append({**per_sample[-1], **{f"exact_{k}": v for k, v in zip(("tp", "fp", "fn"), exact_counts(exact))},
                      **{f"category_{k}": v for k, v in zip(("tp", "fp", "fn"), exact_counts(category))}})
    corpus = {key: sum(s[key] for s in per_sample) / len(per_sample) for key in PER_DOCUMENT_KEYS}
    for name, pairs in (("exact", exact_pairs), ("category", category_pairs)):
        total = micro_prf([g for g, _ in pairs], [p for _, p in pairs])
        corpus.update({f"{name}_micro_precision": total.precision, f"{name}_micro_recall": total.recall,
                       f"{name}_micro_f1": total.f1})
    corpus["valid_micro_ratio"] = valid / predicted if predicted else 0.0
    return ScoreSheet(corpus=corpus, per_sample=per_sample, parts=parts, aggregations=ICD_AGGREGATIONS)


def exact_counts(prf: PRF) -> tuple[int, int, int]:
    return prf.tp, prf.fp, prf.fn


#: how each corpus metric of :func:`icd_score_sheet` is made from per-document parts
ICD_AGGREGATIONS = {
    **{key: Mean(key) for key in PER_DOCUMENT_KEYS},
    **{f"{name}_micro_{stat}": MicroPRF(stat, prefix=f"{name}_")
       for name in ("exact", "category") for stat in ("precision", "recall", "f1")},
    "valid_micro_ratio": Ratio("valid_codes", "predicted_codes"),
}
