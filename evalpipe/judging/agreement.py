"""Agreement between judges: Krippendorff's alpha, ordinal — judges as coders, samples as units.

**Definition** (Krippendorff 2011, "Computing Krippendorff's Alpha-Reliability"). For each unit
(sample) ``u`` with ``m_u ≥ 2`` ratings, every ordered pair of its ratings ``(c, k)`` from two
different judges adds ``1 / (m_u − 1)`` to the coincidence matrix ``o[c, k]`` (a unit rated by one
judge adds nothing). With ``n_c = Σ_k o[c, k]`` and ``n = Σ_c n_c``, the ordinal distance is

    δ(c, k) = (Σ_{g between c and k, inclusive} n_g − (n_c + n_k) / 2)²

and ``α = 1 − (n − 1) · Σ o[c, k] δ(c, k) / Σ n_c n_k δ(c, k)``. α = 1 is perfect agreement, 0 is
agreement at chance level, below 0 systematic disagreement. It is undefined when no sample has two
ratings, or when every rating has the same value (nothing to agree on beyond chance); then it is
reported as *not computed* with that reason, never as a number.

**The reported value** comes from the ``krippendorff`` package (:func:`krippendorff_alpha`).

**Its interval.** α is a function of the coincidence matrix, and the matrix is a *sum over units*
of each unit's own contribution. So α is a declared aggregation like every other metric
(:class:`KrippendorffAlpha`, kind ``krippendorff_alpha``): each sample's parts are its contributions
``o[c, k]`` (keys ``<prefix><c>:<k>`` for ``c ≤ k``; the matrix is symmetric), the report's bootstrap
sums them over resampled samples and recomputes α — the usual bootstrap over units (a sample drawn
twice counts twice), and the paired comparison of two runs works for α too. ``check_reproduces``
verifies on every run that the declaration gives the package's value.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:  # numpy is imported where alpha is computed, not by every command that imports outcome
    import numpy as np

from evalpipe.metrics.aggregation import Aggregation, Sums

__all__ = ["KrippendorffAlpha", "krippendorff_alpha", "ordinal_alpha", "unit_coincidences"]


def unit_coincidences(ratings: Sequence[int]) -> dict[tuple[int, int], float]:
    """One unit's contribution to the coincidence matrix, as ``{(c, k): o_ck}`` for ``c ≤ k`` (the
    matrix is symmetric: ``o_kc = o_ck``); empty for fewer than two ratings."""
    m = len(ratings)
    if m < 2:
        return {}
    counts = Counter(int(r) for r in ratings)
    out: dict[tuple[int, int], float] = {}
    for c in sorted(counts):
        for k in sorted(counts):
            if c > k:
                continue
            pairs = counts[c] * (counts[c] - 1) if c == k else counts[c] * counts[k]
            if pairs:
                out[(c, k)] = pairs / (m - 1)
    return out


def ordinal_alpha(coincidences: np.ndarray) -> np.ndarray:
    """Ordinal alpha of each matrix in a stack ``(B, V, V)`` of coincidence matrices over the value
    domain in order; NaN where undefined (see the module docstring)."""
    import numpy as np

    o = np.asarray(coincidences, dtype=float)
    if o.ndim == 2:
        o = o[None]
    n_v = o.sum(axis=2)
    n = n_v.sum(axis=1)
    values = n_v.shape[1]
    i, j = np.meshgrid(np.arange(values), np.arange(values), indexing="ij")
    low, high = np.minimum(i, j), np.maximum(i, j)
    cumulative = np.cumsum(n_v, axis=1)
    between = cumulative[:, high] - cumulative[:, low] + n_v[:, low]
    delta = (between - (n_v[:, low] + n_v[:, high]) / 2.0) ** 2
    observed = (o * delta).sum(axis=(1, 2))
    expected = (n_v[:, :, None] * n_v[:, None, :] * delta).sum(axis=(1, 2))
    out = np.full(o.shape[0], math.nan)
    defined = (expected > 0) & (n > 1)
    out[defined] = 1.0 - (n[defined] - 1.0) * observed[defined] / expected[defined]
    return out


@dataclass(frozen=True)
class KrippendorffAlpha(Aggregation):
    """Ordinal Krippendorff's alpha from the coincidence matrix summed over samples (module docstring).

    Parts per sample: ``<prefix><c>:<k>`` for ``c ≤ k`` in ``values``, the sample's coincidences."""

    prefix: str
    values: tuple[int, ...]
    kind: ClassVar[str] = "krippendorff_alpha"

    def cell(self, c: int, k: int) -> str:
        low, high = min(c, k), max(c, k)
        return f"{self.prefix}{low}:{high}"

    def keys(self) -> tuple[str, ...]:
        return tuple(self.cell(c, k) for i, c in enumerate(self.values) for k in self.values[i:])

    def compute(self, sums: Sums, n: np.ndarray) -> np.ndarray:
        import numpy as np

        arrays = {key: np.atleast_1d(np.asarray(sums[key], dtype=float)) for key in self.keys()}
        size = max((a.size for a in arrays.values()), default=1)
        matrix = np.zeros((size, len(self.values), len(self.values)))
        for i, c in enumerate(self.values):
            for j, k in enumerate(self.values):
                matrix[:, i, j] = arrays[self.cell(c, k)]
        return ordinal_alpha(matrix)

    def describe(self) -> str:
        return "Krippendorff's alpha (ordinal) from the judges' coincidence matrix summed over samples"

    def with_prefix(self, prefix: str) -> KrippendorffAlpha:
        return KrippendorffAlpha(prefix + self.prefix, self.values)


def krippendorff_alpha(ratings: Mapping[str, Mapping[str, int]], coders: Sequence[str],
                       values: Sequence[int]) -> tuple[float | None, str | None]:
    """Ordinal alpha of ``ratings`` (unit → coder → rating; a missing coder is a missing value) with the
    ``krippendorff`` package, over the value domain ``values``: ``(alpha, None)`` or ``(None, why)``."""
    import numpy as np

    import krippendorff

    if len(coders) < 2:
        return None, "needs at least two judges"
    units = list(ratings)
    pairable = sum(1 for u in units if sum(c in ratings[u] for c in coders) >= 2)
    if pairable == 0:
        return None, "no sample was rated by two judges"
    data = np.full((len(coders), len(units)), np.nan)
    for j, unit in enumerate(units):
        for i, coder in enumerate(coders):
            if coder in ratings[unit]:
                data[i, j] = ratings[unit][coder]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            value = float(krippendorff.alpha(reliability_data=data, value_domain=list(values),
                                             level_of_measurement="ordinal"))
        except ValueError as exc:
            return None, f"undefined ({exc})"
    if math.isnan(value):
        return None, "undefined: every rating has the same value (no variation to agree on)"
    return value, None
