"""CLUE's level score: the mean over a level's datasets of each dataset's mean score.

Rule (derived from the paper's own rows, which it reproduces to the printed two decimals):

1. each dataset contributes the **mean of its non-ROUGE metrics** — accuracy for MedNLI;
   BERTScore F1 and UMLS-concept F1 for problem summaries and MeDiSumQA (BERTScore *precision and
   recall are not included*); BERTScore F1 for MeQSum; LongHealth task 1 accuracy and task 2&3
   accuracy; MeDiSumCode exact F1, 3-character F1 and valid-code ratio;
2. the level score is the **unweighted mean over the level's datasets** (not over metrics).

Check, Mixtral-8x7B-Instruct, in percent:
Level 1 = mean(76.48, mean(68.56, 19.51), 72.80) = mean(76.48, 44.035, 72.80) = 193.315 / 3
= 64.438 → 64.44. Level 2 = mean(mean(43.82, 31.23), mean(69.57, 24.47), mean(10.49, 28.99, 82.87))
= mean(37.525, 47.02, 40.7833) = 125.3283 / 3 = 41.776 → 41.78. (A flat mean over all metrics
would give 59.34 for level 1; including BERTScore P/R would not give 64.44 either.)

The function is unit-agnostic: fractions in, fraction out; percentages in, percentage out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def dataset_score(values: Sequence[float]) -> float:
    """One dataset's contribution: the plain mean of its (non-ROUGE) metric values."""
    if not values:
        raise ValueError("a dataset needs at least one metric value")
    return sum(values) / len(values)


def level_score(datasets: Mapping[str, Sequence[float]]) -> float:
    """Mean over datasets of :func:`dataset_score`; ``datasets`` maps dataset name → its metric values."""
    if not datasets:
        raise ValueError("a level needs at least one dataset")
    return sum(dataset_score(v) for v in datasets.values()) / len(datasets)


def pooled_accuracy(parts: Sequence[tuple[float, float]]) -> float:
    """Accuracy over the union of several sample sets, from (accuracy, n) pairs (LongHealth task 2&3)."""
    total = sum(n for _, n in parts)
    if total <= 0:
        raise ValueError("no samples to pool")
    return sum(acc * n for acc, n in parts) / total
