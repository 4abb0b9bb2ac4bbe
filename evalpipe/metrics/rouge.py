"""ROUGE-1, ROUGE-2 and ROUGE-L F-measure per sample (Google's ``rouge-score`` package).

Definitions (what CLUE's reference reports through Hugging Face ``evaluate``'s ``"rouge"``
metric, which calls ``rouge_score.RougeScorer(...).score(reference, prediction)`` per pair with
``use_aggregator=False`` and ``use_stemmer=False``, and is averaged with ``numpy.mean``):

* **Tokenisation**: rouge-score's default — lower-case, every character outside ``[a-z0-9]``
  becomes a space (punctuation and non-ASCII letters disappear), split on whitespace; Porter
  stemming only with ``MetricOptions.rouge_stemmer`` (off by default, as in the reference).
* **ROUGE-N**: clipped n-gram overlap; precision = overlap / candidate n-grams, recall =
  overlap / reference n-grams, F = harmonic mean.
* **ROUGE-L** is ``rougeL``: the longest common subsequence over the *whole text as one
  sequence* (newlines ignored) — not ``rougeLsum``, the summary-level variant that splits on
  newlines. The reference reports ``rougeL``.
* **Averaging**: each key is the plain mean of the per-sample F-measures (macro over samples).
* **Empty**: a prediction (or reference) with no token scores 0.0 on every key.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rouge-score pulls in nltk (~1 s): imported when a score is first computed
    from rouge_score import rouge_scorer

ROUGE_KEYS = ("rouge1", "rouge2", "rougeL")


@cache
def _scorer(stemmer: bool) -> rouge_scorer.RougeScorer:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(ROUGE_KEYS), use_stemmer=stemmer)


def rouge_f(prediction: str, reference: str, stemmer: bool = False) -> dict[str, float]:
    """F-measure of each ROUGE key for one pair."""
    scores = _scorer(stemmer).score(reference, prediction)
    return {key: float(scores[key].fmeasure) for key in ROUGE_KEYS}


def rouge_per_sample(
    predictions: Sequence[str], references: Sequence[str], stemmer: bool = False
) -> list[dict[str, float]]:
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    return [rouge_f(p, r, stemmer) for p, r in zip(predictions, references)]
