"""The per-sample parts every task gets from the runner, beside its scorer's, and the run's fixed counts.

A record's ``parts`` are the additive statistics its task's declared aggregations sum
(:mod:`evalpipe.metrics.aggregation`): the scorer's, plus three the runner defines the same way for
every task, namespaced (``run.…``) so they never shadow a scorer's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from evalpipe.coverage import COVERAGE_FIXED
from evalpipe.metrics.aggregation import Aggregation, Ratio

ANSWERED, PARSE_FAILED, ERROR = "run.answered", "run.parse_failed", "run.error"
#: ``parse_failure_rate`` — answered samples whose answer could not be parsed, over answered samples
RUNNER_AGGREGATIONS: Mapping[str, Aggregation] = {
    "parse_failure_rate": Ratio(PARSE_FAILED, ANSWERED, empty=0.0),
}
#: metrics with no interval by definition, and why: counts fixed by the run. ``errors`` is one too:
#: intervals resample the answered samples only (evalpipe.coverage), among which it is 0
FIXED_METRICS = {"n": "the number of evaluated samples, fixed by the run (not an estimate)",
                 "errors": "the number of samples without an answer, fixed by the run (not an estimate)",
                 **COVERAGE_FIXED}


class SampleParts(Mapping[str, float | None]):
    """One sample's parts: the scorer's row and the runner's three, read through without a copy."""

    __slots__ = ("_row", "_answered", "_failed")

    def __init__(self, row: Mapping[str, float | None], answered: bool, failed: bool) -> None:
        self._row, self._answered, self._failed = row, answered, failed

    def __getitem__(self, key: str) -> float | None:
        if key == ANSWERED:
            return int(self._answered)
        if key == PARSE_FAILED:
            return int(self._failed)
        if key == ERROR:
            return int(not self._answered)
        return self._row[key]

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __iter__(self) -> Iterator[str]:
        yield from (k for k in self._row if k not in (ANSWERED, PARSE_FAILED, ERROR))
        yield from (ANSWERED, PARSE_FAILED, ERROR)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def sparse(parts: Mapping[str, Any], keys: frozenset[str]) -> dict[str, float]:
    """The parts an aggregation reads, without zeros (absent = 0): small lines in samples.jsonl."""
    out = {}
    for key, value in parts.items():
        if key in keys and isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0:
            out[key] = value
    return out
