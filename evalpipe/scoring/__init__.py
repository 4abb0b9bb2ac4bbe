"""Parse and score one task's answers: metrics, per-sample records and summary, by one path.

The path is the fold of :mod:`evalpipe.scoring.fold` (a task's samples pushed a chunk at a time);
:func:`score_task` is a corpus held in memory scored as one chunk of it, :func:`score_chunks` a task
read chunk by chunk from a source that can be read again (the run's store: re-scoring, a run).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Completion, Example
from evalpipe.scoring.chunk import Chunks, ScoringChunk, answer_prefix
from evalpipe.scoring.fold import NotSamplewise, TaskFold, TaskOutcome
from evalpipe.scoring.parts import ANSWERED, ERROR, FIXED_METRICS, PARSE_FAILED, RUNNER_AGGREGATIONS
from evalpipe.scoring.records import ChunkedRecords, SampleRecords, TakerFactory, record_lines
from evalpipe.tasks.base import TaskSpec


def score_task(
    spec: TaskSpec,
    examples: Sequence[Example],
    keys: Sequence[str],
    answers: Sequence[Completion | None],
    compat: str | None,
    options: MetricOptions = MetricOptions(),
    truncated: Sequence[int] | None = None,
    answer_prefix: str = "",
) -> TaskOutcome:
    """A task whose samples are all at hand, scored as one chunk of the fold.

    ``keys`` are the samples' request keys (each record names its own); ``answers[i]`` None is a
    sample not sent. The records are built from the parsed samples when read.
    """
    fold = TaskFold(spec, compat, options, answer_prefix)
    fold.add(ScoringChunk(examples, keys, answers, list(truncated) if truncated else ()))
    return fold.finish()


def score_chunks(
    spec: TaskSpec,
    chunks: Chunks,
    compat: str | None,
    options: MetricOptions = MetricOptions(),
    answer_prefix: str = "",
    scratch: Path | None = None,
    taker: TakerFactory | None = None,
) -> TaskOutcome:
    """A task read a chunk at a time from ``chunks()``, which may be called again and must then
    yield the same chunks: a samplewise task's records read them once more (or, with a ``scratch``
    folder, are copied from the lines written there while each chunk was scored)."""
    fold = TaskFold(spec, compat, options, answer_prefix, source=chunks, scratch=scratch, taker=taker)
    try:
        for chunk in chunks():
            fold.add(chunk)
    except BaseException:
        fold.abort()
        raise
    return fold.finish()


__all__ = [
    "ANSWERED", "ERROR", "FIXED_METRICS", "PARSE_FAILED", "RUNNER_AGGREGATIONS", "ChunkedRecords", "Chunks",
    "NotSamplewise", "SampleRecords", "ScoringChunk", "TaskFold", "TaskOutcome", "answer_prefix", "record_lines",
    "score_chunks", "score_task",
]
