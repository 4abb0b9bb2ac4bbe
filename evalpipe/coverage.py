"""Which samples a task's metrics are measured on, and how much of the task that covers.

**The policy** (one, for every metric of every task; docs/coverage.md):

* a sample whose request **failed for good** — no answer ever came, or it was never sent — is
  **left out of every metric**: the scorer never sees it, so it adds no gold item to a micro F1,
  no token to a token accuracy, no row to a mean, and no text to a corpus metric (BERTScore's
  idf, a compatibility scoring's corpus arithmetic);
* an answer that came but **cannot be parsed still counts**, as the scoring's failed prediction
  (wrong): the model answered, and answering in the wrong format is the model's fault;
* **coverage** — answered samples over evaluated samples — is reported beside the numbers
  (``metrics.json`` ``answered`` and ``coverage``, ``summary.json``, the printed table, the
  leaderboard, the report's summary), so a number over 38 of 40 samples says so;
* a metric over **zero** answered samples is **not computed**: ``null`` in ``metrics.json`` with
  the reason in ``summary.json`` ``not_computed`` — never ``0.0`` with an interval.

Bootstrap intervals and paired comparisons resample the answered samples only (their records'
``error`` is null), so an interval is always about the same samples as its point estimate.

Why leave failures out rather than count them as wrong: a failed request says something about
the endpoint, not about the model; counting it as wrong mixes the two and makes a flaky server
look like a weak model. The price — a metric over fewer samples — is made visible by coverage.

This module is the one place that decides whether a sample is answered (:func:`is_answered`);
scoring, re-scoring and the report read that decision from it (or from the records it made).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from evalpipe.records import Completion

__all__ = ["ANSWERED_METRICS", "COVERAGE_FIXED", "Coverage", "is_answered", "spread"]

T = TypeVar("T")

#: the two metrics every task gets from its coverage (counts fixed by the run, no interval)
ANSWERED_METRICS = ("answered", "coverage")
#: why they have no interval
COVERAGE_FIXED = {
    "answered": "the number of answered samples, fixed by the run (the metrics are measured on them)",
    "coverage": "answered samples over evaluated samples, fixed by the run (not an estimate)",
}
#: the error kind of a sample whose request was never sent (the run was stopped before it)
NOT_SENT = "not sent"


def is_answered(completion: Completion | None) -> bool:
    """True when an answer came (parsable or not): the sample counts for the task's metrics."""
    return completion is not None and completion.ok


@dataclass(frozen=True)
class Coverage:
    """How many of a task's samples were answered, and why the others were not."""

    samples: int
    answered: int
    #: error kind → how many samples got no answer for it (``not sent`` for never sent)
    unanswered: Mapping[str, int] = field(default_factory=dict)

    @property
    def share(self) -> float | None:
        """Answered over evaluated samples; None for a task without samples."""
        return self.answered / self.samples if self.samples else None

    @property
    def complete(self) -> bool:
        return self.answered == self.samples

    def why_unanswered(self) -> str:
        """``38 of 40 requests failed (connection refused), 2 not sent`` — the most common kinds first."""
        missing = self.samples - self.answered
        failed = {k: v for k, v in self.unanswered.items() if k != NOT_SENT}
        kinds = sorted(failed.items(), key=lambda kv: (-kv[1], kv[0]))
        parts = []
        if failed:
            shown = "; ".join(k if len(kinds) == 1 else f"{v}× {k}" for k, v in kinds[:3])
            more = f"; {len(kinds) - 3} other kinds" if len(kinds) > 3 else ""
            parts.append(f"{sum(failed.values())} of {self.samples} requests failed ({shown}{more})")
        if self.unanswered.get(NOT_SENT):
            parts.append(f"{self.unanswered[NOT_SENT]} of {self.samples} not sent")
        return ", ".join(parts) or f"{missing} of {self.samples} samples got no answer"

    def not_computed_reason(self) -> str:
        """Why a metric over zero answered samples is null: ``no answered samples: 40 of 40 requests failed (…)``."""
        return f"no answered samples: {self.why_unanswered()}"

    def sentence(self) -> str:
        """One line for a reader: ``19 of 20 samples answered (95.0 %): 1 of 20 requests failed (…)``."""
        share = f" ({self.share:.1%})" if self.share is not None else ""
        return f"{self.answered} of {self.samples} samples answered{share}: {self.why_unanswered()}"

    def metrics(self) -> dict[str, float | None]:
        """``answered`` and ``coverage`` as metrics.json carries them for every task."""
        return {"answered": self.answered, "coverage": self.share}

    def to_json(self) -> dict[str, Any]:
        """``summary.json``'s per-task ``coverage``: the counts, the share and the policy's name."""
        return {"samples": self.samples, "answered": self.answered, "coverage": self.share,
                "unanswered": dict(self.unanswered), "policy": "unanswered samples left out of every metric"}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Coverage | None:
        """The coverage ``to_json`` wrote; None for an older summary without one."""
        if not data or "samples" not in data or "answered" not in data:
            return None
        return cls(int(data["samples"]), int(data["answered"]), dict(data.get("unanswered") or {}))


def spread(rows: Sequence[T], answered: Sequence[bool], empty: T) -> list[T]:
    """Rows made for the answered samples only, put back in place among all samples (``empty`` for
    each sample without an answer, and for answered ones past the end of ``rows``: a scorer may
    give no per-sample rows at all)."""
    it = iter(rows)
    out = [next(it, empty) if ok else empty for ok in answered]
    if next(it, _END) is not _END:
        raise ValueError("more rows than answered samples")
    return out


_END = object()
