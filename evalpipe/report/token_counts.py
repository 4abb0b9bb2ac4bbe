"""Per-sample token counts of a tagging task, so token accuracy is bootstrapped from sums.

Token accuracy (:func:`evalpipe.metrics.spans.token_accuracy`) pools tokens over sentences:
``accuracy = Σ correct tokens / Σ tokens``. It is neither the mean of a per-sample value nor a
function of tp/fp/fn, so without help a bootstrap must call the task's scorer on every resample
(about 10 ms for NCBI's 940 sentences — 10 s per run and 1000 resamples, most of a report's time).

What the scorer counts can be read off the run's own examples and parsed predictions, without
knowing the task by name: a task qualifies when every gold has ``tags`` (a sequence of tag
strings, one per token) and every prediction value is either a sequence of
:class:`~evalpipe.records.Span` (token spans, written as IOB2 with
:func:`~evalpipe.metrics.spans.spans_to_bio` exactly as the NCBI scorer does) or a sequence of
tag strings of the gold's length (a compatibility mode that predicts tags). Then per sample
``tokens = len(gold.tags)`` and ``correct = #{i: predicted[i] == gold.tags[i]}`` (whole tag
strings; ``O`` counts), and :func:`accuracy_from_sums` turns resampled sums into the metric.

This is a hypothesis about the task, not knowledge of it: the bootstrap (method ``sums``) uses
it for a metric only where it reproduces the run's corpus value on all samples and the scorer's
value on the first resamples; otherwise that metric is re-scored as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe.metrics.spans import spans_to_bio
from evalpipe.records import Span

__all__ = ["CORRECT", "TOKENS", "accuracy_from_sums", "predicted_tags", "token_parts"]

#: per-sample part keys (namespaced so they never shadow a scorer's per-sample key)
TOKENS = "tags.tokens"
CORRECT = "tags.correct"
#: corpus metric names this may stand for (the bootstrap checks each against the run's value)
ACCURACY_NAMES = ("accuracy", "token_accuracy")


def _tag_strings(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, (list, tuple)) and all(isinstance(t, str) for t in value):
        return tuple(value)
    return None


def predicted_tags(value: Any, n_tokens: int) -> tuple[str, ...] | None:
    """A prediction value as ``n_tokens`` tags: Spans written as IOB2, tags as they are; else None."""
    if not isinstance(value, (list, tuple)):
        return None
    if all(isinstance(v, Span) for v in value):
        try:
            return tuple(spans_to_bio(value, n_tokens))
        except ValueError:  # a span outside the sentence: the scorer would fail too
            return None
    tags = _tag_strings(value)
    return tags if tags is not None and len(tags) == n_tokens else None


def token_parts(examples: Sequence[Any], predictions: Sequence[Any]) -> tuple[dict[str, float], ...] | None:
    """``{TOKENS: n, CORRECT: k}`` per sample, or None when the task is not shaped for it."""
    if not examples or len(examples) != len(predictions):
        return None
    parts = []
    for example, prediction in zip(examples, predictions):
        gold = _tag_strings(getattr(getattr(example, "gold", None), "tags", None))
        if gold is None:
            return None
        pred = predicted_tags(getattr(prediction, "value", None), len(gold))
        if pred is None:
            return None
        parts.append({TOKENS: float(len(gold)), CORRECT: float(sum(g == p for g, p in zip(gold, pred)))})
    return tuple(parts)


def accuracy_from_sums(sums: Mapping[str, float]) -> dict[str, float]:
    """Σ correct / Σ tokens under each name in :data:`ACCURACY_NAMES`; NaN for a tokenless resample."""
    tokens = sums[TOKENS]
    value = sums[CORRECT] / tokens if tokens else float("nan")
    return {name: value for name in ACCURACY_NAMES}
