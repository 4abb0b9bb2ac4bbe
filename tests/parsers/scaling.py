"""Complexity checks without absolute times: the machine is shared, so a test compares a run on
an input with a run on one ``factor`` times larger, on the same machine, moments apart.

CPU time of this process (not wall time) is compared, so other processes' load counts less; and
a check that looks super-linear is measured again (up to ``ATTEMPTS`` times) before it fails —
noise rarely repeats, a quadratic cost always does.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

#: below this a timing is mostly noise, so smaller ones are rounded up to it
FLOOR_S = 0.01
ATTEMPTS = 3


def _timed(fn: Callable[[], Any]) -> float:
    # the collector is paused, not run: a full collection costs ~0.3 s once the whole suite's
    # objects are alive, and would dwarf what is measured
    gc.disable()
    try:
        start = time.process_time()
        fn()
        return time.process_time() - start
    finally:
        gc.enable()


def growth(run: Callable[[Any], Any], small: Any, large: Any, repeat: int = 3) -> float:
    """Best CPU time of ``run(large)`` over best CPU time of ``run(small)`` (timed alternately)."""
    t_small = t_large = float("inf")
    for _ in range(repeat):
        t_small = min(t_small, _timed(lambda: run(small)))
        t_large = min(t_large, _timed(lambda: run(large)))
    return t_large / max(t_small, FLOOR_S)


def assert_linear(run: Callable[[Any], Any], small: Any, large: Any, factor: int = 4) -> None:
    """``run(large)`` (``large`` being ``factor`` times ``small``) costs under ``2 * factor``
    times ``run(small)``: linear growth passes with room for noise, quadratic (``factor²``) fails."""
    ratios = []
    for _ in range(ATTEMPTS):
        ratios.append(growth(run, small, large))
        if ratios[-1] < 2 * factor:
            return
    raise AssertionError(f"{factor}x the input took {', '.join(f'{r:.1f}x' for r in ratios)} the time")
