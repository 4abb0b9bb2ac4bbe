"""Calibration of option probabilities: expected calibration error, Brier score, selective prediction.

A log-likelihood scoring (``--mcqa-scoring loglikelihood``) gives each option of a question its
summed log-probability ``ℓ_j``. The **option probabilities** are their softmax over the question's
options, ``p_j = exp(ℓ_j) / Σ_k exp(ℓ_k)`` (the model's distribution restricted to the offered
options); the prediction is the most probable option (the first of equal maxima, as the parser
picks it) and its **confidence** ``c = max_j p_j``.

Definitions, over the ``N`` samples that have option probabilities (a sample whose answer failed —
no log-probabilities, a request that failed for good — has no probabilities and is left out of
both metrics; it still counts as wrong in ``accuracy``):

* ``ece`` — expected calibration error with 10 equal-width confidence bins on [0, 1]: sample ``i``
  falls in bin ``b = min(⌊10 c_i⌋, 9)`` (bins ``[0, 0.1), [0.1, 0.2), …, [0.9, 1.0]``: left edge
  included, the last bin closed), and ``ECE = Σ_b (n_b / N) · |acc_b − conf_b|`` with ``acc_b`` the
  share of correct predictions and ``conf_b`` the mean confidence of the bin's ``n_b`` samples (an
  empty bin adds nothing). 0 is perfectly calibrated. Guo et al. 2017, "On Calibration of Modern
  Neural Networks" (their eq. 3);
* ``brier`` — the multi-class Brier score, ``(1/N) Σ_i Σ_j (p_ij − 1[j = gold_i])²`` (Brier 1950),
  between 0 (certain and right) and 2 (certain and wrong); lower is better.

**Why they have intervals.** ``n_b (acc_b − conf_b) = Σ_{i∈b} (correct_i − c_i)``, so
``ECE = Σ_b |Σ_{i∈b} correct_i − Σ_{i∈b} c_i| / Σ_b n_b``: a function of three additive parts per
bin (count, correct count, confidence sum; 10 bins × 3 parts), declared as the aggregation
:class:`ExpectedCalibrationError`, and the Brier score is a ratio of summed per-sample scores to
the number of scored samples (:class:`MeanOverScored`). The report's bootstrap resamples them
like any metric (a resample without a scored sample has no value, never 0).

**Selective prediction** (:func:`accuracy_coverage`): answering only the ``k`` most confident
questions, accuracy at coverage ``k/N``. Equal confidences are one group: within it each sample
counts as the group's mean correctness (the expected value over the order of the tie), so the curve
does not depend on sample order. Its area is the **area under the accuracy–coverage curve**
``AUACC = (1/N) Σ_{k=1..N} acc(k)`` (the right Riemann sum at coverages ``k/N``); the area under
the risk–coverage curve (AURC, Geifman & El-Yaniv 2017) is ``1 − AUACC``. A model whose confidence
is worth nothing has ``AUACC ≈ accuracy``; one that ranks every right answer first has the most.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from evalpipe.metrics.aggregation import Aggregation, Sums, _array, _divide

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BINS", "CalibrationBin", "ExpectedCalibrationError", "MeanOverScored", "PREFIX", "accuracy_coverage",
           "calibration_parts", "confidence_bin", "option_probabilities", "reliability"]

#: the number of equal-width confidence bins of ``ece``
BINS = 10
#: the prefix of the calibration parts
PREFIX = "cal."


def option_probabilities(logprobs: Sequence[float]) -> list[float]:
    """Softmax of the options' summed log-probabilities (shifted by the maximum: no overflow)."""
    top = max(logprobs)
    weights = [math.exp(v - top) for v in logprobs]
    total = math.fsum(weights)
    return [w / total for w in weights]


def confidence_bin(confidence: float, bins: int = BINS) -> int:
    """The bin of a confidence: ``min(⌊bins · c⌋, bins − 1)`` (left edges included, last bin closed)."""
    return min(int(math.floor(confidence * bins)), bins - 1)


def calibration_parts(probabilities: Sequence[float], gold: int, prefix: str = PREFIX,
                      bins: int = BINS) -> dict[str, float]:
    """One scored sample's parts: its bin's count, correctness and confidence, its Brier score, and 1
    scored sample. The prediction is the first most probable option."""
    confidence = max(probabilities)
    predicted = list(probabilities).index(confidence)
    correct = float(predicted == gold)
    b = confidence_bin(confidence, bins)
    brier = math.fsum((p - (1.0 if j == gold else 0.0)) ** 2 for j, p in enumerate(probabilities))
    return {f"{prefix}scored": 1.0, f"{prefix}brier": brier, f"{prefix}n:{b}": 1.0,
            f"{prefix}correct:{b}": correct, f"{prefix}conf:{b}": confidence}


@dataclass(frozen=True)
class ExpectedCalibrationError(Aggregation):
    """ECE from per-bin summed counts, correct counts and confidences (module docstring); NaN without
    a scored sample. Parts: ``<prefix>n:<b>``, ``<prefix>correct:<b>``, ``<prefix>conf:<b>``."""

    prefix: str = PREFIX
    bins: int = BINS
    kind: ClassVar[str] = "ece"

    def keys(self) -> tuple[str, ...]:
        return tuple(f"{self.prefix}{what}:{b}" for b in range(self.bins) for what in ("n", "correct", "conf"))

    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        gap, count = None, None
        for b in range(self.bins):  # summed bin by bin, in bin order (one arithmetic for every caller)
            size = _array(sums[f"{self.prefix}n:{b}"])
            diff = abs(_array(sums[f"{self.prefix}correct:{b}"]) - _array(sums[f"{self.prefix}conf:{b}"]))
            gap, count = (diff, size) if gap is None else (gap + diff, count + size)
        assert gap is not None and count is not None
        return _divide(gap, count, math.nan)

    def describe(self) -> str:
        return (f"expected calibration error over {self.bins} equal-width confidence bins, from per-bin counts, "
                "correct counts and confidence sums summed over samples")

    def with_prefix(self, prefix: str) -> ExpectedCalibrationError:
        return ExpectedCalibrationError(prefix + self.prefix, self.bins)


@dataclass(frozen=True)
class MeanOverScored(Aggregation):
    """``Σ <prefix><key> / Σ <prefix>scored``: a mean over the samples that have option probabilities;
    NaN (not 0) when none has."""

    key: str = "brier"
    prefix: str = PREFIX
    kind: ClassVar[str] = "mean_over_scored"

    def keys(self) -> tuple[str, ...]:
        return (f"{self.prefix}{self.key}", f"{self.prefix}scored")

    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        return _divide(sums[f"{self.prefix}{self.key}"], sums[f"{self.prefix}scored"], math.nan)

    def describe(self) -> str:
        return f"mean of per-sample {self.key} over the samples with option probabilities"

    def with_prefix(self, prefix: str) -> MeanOverScored:
        return MeanOverScored(self.key, prefix + self.prefix)


@dataclass(frozen=True)
class CalibrationBin:
    """One bin of a reliability diagram."""

    low: float
    high: float
    n: int
    accuracy: float | None
    confidence: float | None


def reliability(parts: Sequence[Mapping[str, float]], prefix: str = PREFIX, bins: int = BINS) -> list[CalibrationBin]:
    """The reliability diagram's bins from the samples' calibration parts (empty bins have no values)."""
    out = []
    for b in range(bins):
        n = sum(p.get(f"{prefix}n:{b}", 0.0) for p in parts)
        correct = math.fsum(p.get(f"{prefix}correct:{b}", 0.0) for p in parts)
        confidence = math.fsum(p.get(f"{prefix}conf:{b}", 0.0) for p in parts)
        out.append(CalibrationBin(b / bins, (b + 1) / bins, int(round(n)), correct / n if n else None,
                                  confidence / n if n else None))
    return out


def accuracy_coverage(confidences: Sequence[float], correct: Sequence[float]) -> tuple[list[float], list[float], float]:
    """``(coverages, accuracies, AUACC)``: accuracy of the ``k`` most confident samples at coverage
    ``k/N`` for ``k = 1..N``, ties as one group (module docstring); ``([], [], nan)`` for no sample."""
    n = len(confidences)
    if n == 0:
        return [], [], math.nan
    order = sorted(range(n), key=lambda i: -confidences[i])
    coverages, accuracies = [], []
    done, right = 0, 0.0
    start = 0
    while start < n:
        end = start
        while end < n and confidences[order[end]] == confidences[order[start]]:
            end += 1
        group = [float(correct[order[i]]) for i in range(start, end)]
        mean = math.fsum(group) / len(group)
        for _ in group:
            done += 1
            right += mean
            coverages.append(done / n)
            accuracies.append(right / done)
        start = end
    return coverages, accuracies, math.fsum(accuracies) / n
