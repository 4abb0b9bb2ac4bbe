"""How much a score moves across prompt conditions, and how consistent answers are across them.

Pure functions over numbers and hashable values; :mod:`evalpipe.variants.robustness` applies them to a
run's conditions and the report (:mod:`evalpipe.report.variants`) to several runs.

* :func:`spread_stats` — a metric's values under several conditions (levels): their mean, their
  **population** standard deviation (divided by the number of levels, not by one less: the levels
  are all the conditions asked for, not a sample of them), min, max and spread = max − min, and
  which level holds the min and the max.
* :func:`agreement` — one sample's predictions under several conditions: the share of conditions
  whose prediction equals the most frequent one (1.0 = all agree; with c conditions the lowest
  possible value is 1/c).
* :func:`correct_share` / :func:`flipped` — one sample's 0/1 correctness under several conditions:
  the share correct, and whether it is correct under some but not all of them.
* :func:`competition_ranks` and :func:`kendall_tau_b` — ranking models under each condition and
  comparing two rankings.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Spread", "agreement", "competition_ranks", "correct_share", "flipped", "kendall_tau_b", "spread_stats"]


@dataclass(frozen=True)
class Spread:
    """A metric's values across the levels of one axis (variants, shot orders or shot counts)."""

    mean: float
    #: population standard deviation: sqrt(Σ (v − mean)² / levels)
    std: float
    min: float
    max: float
    #: max − min
    spread: float
    #: the level holding the min / max (the first one in the given order on a tie)
    min_at: str
    max_at: str
    levels: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def spread_stats(values: Mapping[str, float]) -> Spread:
    """Mean, population std, min, max and max − min of ``values`` (level → value).

    Raises ``ValueError`` for no values or a value that is not a finite number: a spread over
    nothing, or over a NaN, would be a number that means nothing.
    """
    if not values:
        raise ValueError("no values to take the spread of")
    bad = [level for level, v in values.items() if not isinstance(v, (int, float)) or not math.isfinite(v)]
    if bad:
        raise ValueError(f"not a finite number at level(s) {', '.join(map(str, bad))}")
    numbers = [float(v) for v in values.values()]
    mean = math.fsum(numbers) / len(numbers)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in numbers) / len(numbers))
    low, high = min(numbers), max(numbers)
    levels = list(values)
    return Spread(mean=mean, std=std, min=low, max=high, spread=high - low,
                  min_at=str(levels[numbers.index(low)]), max_at=str(levels[numbers.index(high)]),
                  levels=len(numbers))


def agreement(predictions: Sequence[Hashable]) -> float | None:
    """Share of predictions equal to the most frequent prediction; None for no predictions."""
    if not predictions:
        return None
    return Counter(predictions).most_common(1)[0][1] / len(predictions)


def correct_share(correct: Sequence[float]) -> float | None:
    """Share of conditions under which the sample is correct (values 0 or 1); None for none."""
    if not correct:
        return None
    return sum(1 for c in correct if c == 1) / len(correct)


def flipped(correct: Sequence[float]) -> bool | None:
    """Whether the sample is correct under some conditions and wrong under others; None for none."""
    if not correct:
        return None
    return 0 < sum(1 for c in correct if c == 1) < len(correct)


def competition_ranks(values: Mapping[str, float], higher_is_better: bool = True) -> dict[str, int]:
    """Rank 1 = best; tied values share the best of their ranks ("1224" ranking)."""
    ordered = sorted(values.values(), reverse=higher_is_better)
    return {name: 1 + ordered.index(v) for name, v in values.items()}


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-b between two paired sequences (ties corrected):

    ``(C − D) / sqrt((C + D + T_x) (C + D + T_y))`` over all pairs i < j, where a pair is
    concordant (C) when x and y order it the same way, discordant (D) when oppositely, and T_x
    (T_y) counts pairs tied in x only (y only); pairs tied in both count nowhere. None when it is
    undefined (fewer than two items, or one sequence constant).
    """
    if len(x) != len(y):
        raise ValueError(f"{len(x)} values against {len(y)}")
    concordant = discordant = tied_x = tied_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tied_x += 1
            elif dy == 0:
                tied_y += 1
            elif (dx > 0) == (dy > 0):
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + tied_x) * (concordant + discordant + tied_y))
    return (concordant - discordant) / denominator if denominator else None
