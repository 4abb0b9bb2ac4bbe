"""Metric names as tasks declare them: a literal key, or a pattern with ``*`` for keys that carry
their settings (``bertscore[*]_f1``). Neutral ground: tasks declare, the report displays, and
neither needs the other to read a name."""

from __future__ import annotations

import functools
import re

__all__ = ["metric_matches"]


@functools.lru_cache(maxsize=256)
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def metric_matches(pattern: str, metric: str) -> bool:
    """Whether a metric key matches a declared name, where ``*`` stands for any text
    (``bertscore[*]_f1`` matches ``bertscore[all-MiniLM-L6-v2@L6]_f1``); without ``*``, equality."""
    if "*" not in pattern:
        return pattern == metric
    return _glob(pattern).fullmatch(metric) is not None
