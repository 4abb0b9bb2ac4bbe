"""The probe's numbers: ROUGE-L per completion, the paired bootstrap, the verdict, Min-K % Prob.

Definitions:

* **ROUGE-L** of a completion is the project's ROUGE-L F-measure (:mod:`evalpipe.metrics.rouge`:
  rouge-score's tokenisation — lower-case, ``[a-z0-9]`` runs — no stemming, LCS over the whole text)
  of the normalised completion against the true second half; an empty completion scores 0.
  ``guided_rougeL`` and ``general_rougeL`` are plain means over the probed samples (macro).
* **difference** = mean over samples of (guided − general) ROUGE-L; its interval is a percentile
  bootstrap over samples, *paired* (each resample draws samples, and with a sample both of its
  completions), ``resamples`` draws from ``numpy.random.default_rng(seed)``, 95 % by default.
* **exact**: guided completions equal to the true second half after whitespace normalisation (case
  kept); **near_exact**: guided completions with ROUGE-L ≥ :data:`NEAR_EXACT` (exact ones included).
* **verdict**: ``likely_contaminated`` when the difference's interval lies above 0 (its lower end
  > 0), or ≥ 1 exact, or ≥ 2 near-exact guided completions; otherwise ``no_evidence`` (which is not
  evidence of absence: ``docs/contamination.md``).
* **Min-K % Prob** of a text: the mean of the lowest ⌊n·k/100⌋ (at least 1) of its n token
  log-probabilities (each token given the ones before it; the first token, which has no context,
  is not among them). A text the model saw in training has fewer very unlikely tokens: a higher
  (less negative) score.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from evalpipe.metrics.rouge import rouge_f

#: guided ROUGE-L at or above which a completion counts as near-exact
NEAR_EXACT = 0.75
#: near-exact guided completions that make the verdict by themselves
NEAR_EXACT_NEEDED = 2
LIKELY = "likely_contaminated"
NO_EVIDENCE = "no_evidence"


def rouge_l(completion: str, reference: str) -> float:
    """ROUGE-L F-measure of ``completion`` against ``reference`` (0.0 when either has no token)."""
    return rouge_f(completion, reference)["rougeL"]


@dataclass(frozen=True)
class Interval:
    value: float | None
    low: float | None
    high: float | None
    resamples: int
    seed: int
    level: float

    def to_json(self) -> dict[str, float | int | str | None]:
        return {"value": self.value, "ci_low": self.low, "ci_high": self.high, "resamples": self.resamples,
                "seed": self.seed, "level": self.level, "method": "paired percentile bootstrap over samples"}


def paired_difference(guided: Sequence[float], general: Sequence[float], resamples: int = 1000, seed: int = 0,
                      level: float = 0.95) -> Interval:
    """Mean of ``guided[i] - general[i]`` and its paired percentile bootstrap interval (see the module
    docstring); with no sample every value is None, with one sample the interval is the point."""
    import numpy as np

    if len(guided) != len(general):
        raise ValueError(f"{len(guided)} guided but {len(general)} general scores")
    if not guided:
        return Interval(None, None, None, resamples, seed, level)
    diffs = np.asarray(guided, dtype=float) - np.asarray(general, dtype=float)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    block = max(1, 1_000_000 // len(diffs))  # draws a block of resamples at a time
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        means[start:stop] = diffs[rng.integers(0, len(diffs), size=(stop - start, len(diffs)))].mean(axis=1)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return Interval(float(diffs.mean()), float(low), float(high), resamples, seed, level)


def verdict(difference: Interval, exact: int, near_exact: int) -> str:
    """``likely_contaminated`` or ``no_evidence`` (the rule of the module docstring)."""
    above = difference.low is not None and difference.low > 0
    return LIKELY if above or exact >= 1 or near_exact >= NEAR_EXACT_NEEDED else NO_EVIDENCE


def min_k_prob(logprobs: Sequence[float], k: float = 20.0) -> float | None:
    """Mean of the ⌊n·k/100⌋ (at least 1) lowest token log-probabilities; None for no token."""
    if not logprobs:
        return None
    if not 0 < k <= 100:
        raise ValueError(f"k must be in (0, 100], got {k}")
    count = max(1, math.floor(len(logprobs) * k / 100))
    lowest = sorted(logprobs)[:count]
    return sum(lowest) / count


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
