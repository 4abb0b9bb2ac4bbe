"""Complexity checks without absolute times: the machine is shared, so a test compares a run on
an input with a run on one ``factor`` times larger, on the same machine, moments apart."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

#: below this a timing is mostly noise, so smaller ones are rounded up to it
FLOOR_S = 0.01


def _timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    finally:
        gc.enable()


def assert_linear(run: Callable[[Any], Any], small: Any, large: Any, factor: int = 4, repeat: int = 3) -> None:
    """``run(large)`` (``large`` being ``factor`` times ``small``) costs under ``2 * factor``
    times ``run(small)``: linear growth passes with room for noise, quadratic (``factor²``) fails.
    The two are timed alternately and the best of ``repeat`` runs of each is compared."""
    t_small = t_large = float("inf")
    for _ in range(repeat):
        t_small = min(t_small, _timed(lambda: run(small)))
        t_large = min(t_large, _timed(lambda: run(large)))
    t_small = max(t_small, FLOOR_S)
    assert t_large < 2 * factor * t_small, f"{factor}x the input took {t_large / t_small:.1f}x the time"
