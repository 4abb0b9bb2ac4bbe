"""Parse and score one task's answers: predictions, corpus metrics, per-sample records, summary.

Shared by a run (fresh and stored answers) and by re-scoring (stored answers only), so both give
the same numbers from the same answers.

Besides the task's own metrics, every task gets three the runner defines the same way for all:

* ``n`` — evaluated samples (no interval: it is fixed by the run, not estimated);
* ``errors`` — samples without an answer (request failed for good, or never sent), summed over
  samples (per-sample part ``run.error``);
* ``parse_failure_rate`` — answered samples whose answer could not be parsed, over answered
  samples (``Σ run.parse_failed / Σ run.answered``; 0 when nothing was answered).

Each sample record carries ``parts``: the additive statistics the task's declared aggregations
sum (:mod:`evalpipe.metrics.aggregation`), so intervals and comparisons need only the run directory.

A record names its request ``key`` rather than repeating its prompt: prompts are stored once in the
run's store (:meth:`evalpipe.cache.ResponseStore.prompts`; ``RunDir.read_samples(prompts=True)`` and
``frames.load_samples`` give them back).

**Records are built when read.** The corpus scorer sees every example and prediction at once (a
micro F1, BERTScore's idf, a reference's corpus arithmetic), so those are held; the records —
JSON copies of inputs, gold, prediction, scores … — would double that, so :class:`SampleRecords`
builds each one when it is read and ``samples.jsonl`` is written as they stream by.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from evalpipe.config import RunConfig
from evalpipe.metrics.aggregation import Aggregation, Ratio, Total, check_reproduces
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Completion, Example, Prediction, to_jsonable
from evalpipe.results import TaskSummary
from evalpipe.tasks.base import TaskSpec

#: per-sample parts every task gets from the runner (namespaced: they never shadow a scorer's)
ANSWERED, PARSE_FAILED, ERROR = "run.answered", "run.parse_failed", "run.error"
RUNNER_AGGREGATIONS: Mapping[str, Aggregation] = {
    "parse_failure_rate": Ratio(PARSE_FAILED, ANSWERED, empty=0.0),
    "errors": Total(ERROR),
}
#: metrics with no interval by definition, and why
FIXED_METRICS = {"n": "the number of evaluated samples, fixed by the run (not an estimate)"}


class SampleParts(Mapping[str, float]):
    """One sample's parts: the scorer's row and the runner's three, read through without a copy."""

    __slots__ = ("_row", "_answered", "_failed")

    def __init__(self, row: Mapping[str, float], answered: bool, failed: bool) -> None:
        self._row, self._answered, self._failed = row, answered, failed

    def __getitem__(self, key: str) -> float:
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


@dataclass(frozen=True, eq=False)
class SampleRecords(Sequence[dict[str, Any]]):
    """A task's per-sample records (as in ``samples.jsonl``), each built when it is read.

    Every read builds a new dict: a caller that changes records keeps them (``list(records)``).
    """

    task: str
    examples: Sequence[Example]
    keys: Sequence[str]
    answers: Sequence[Completion | None]
    predictions: Sequence[Prediction]
    answered: Sequence[bool]
    per_sample: Sequence[Mapping[str, Any]]
    parts: Sequence[Mapping[str, float]]
    #: the parts a record carries: those the aggregations read (zeros are left out too)
    parts_read: frozenset[str]
    truncated: Sequence[int]

    def __len__(self) -> int:
        return len(self.examples)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self.record(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self.record(index)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self.record(i) for i in range(len(self)))

    def record(self, i: int) -> dict[str, Any]:
        example, completion, prediction, ok = self.examples[i], self.answers[i], self.predictions[i], self.answered[i]
        return {
            "task": self.task,
            "id": example.id,
            "inputs": to_jsonable(example.inputs),
            "key": self.keys[i],
            "answer": completion.text if completion is not None else None,
            "prediction": to_jsonable(prediction.value),
            "parse_failed": prediction.failed if ok else None,
            "gold": to_jsonable(example.gold),
            "scores": dict(self.per_sample[i]) if i < len(self.per_sample) else {},
            "parts": _sparse(self.parts[i], self.parts_read),
            "diagnostics": to_jsonable(prediction.diagnostics),
            "error": None if ok else (completion.error if completion is not None else "not sent yet"),
            "usage": to_jsonable(completion.usage) if completion is not None else None,
            "latency_s": completion.latency_s if completion is not None else None,
            "finish_reason": completion.finish_reason if completion is not None else None,
            "attempts": completion.attempts if completion is not None else 0,
            # which server answered (or failed): the replica, as the backend shows it (no credentials)
            "endpoint": completion.endpoint_url if completion is not None else None,
            "truncated_tokens": self.truncated[i],
            "meta": to_jsonable(example.meta),
        }


@dataclass
class TaskOutcome:
    name: str
    metrics: dict[str, float]
    summary: TaskSummary
    #: one record per sample (:class:`SampleRecords`, built when read; a list where a caller changed them)
    records: Sequence[dict[str, Any]] = field(repr=False)
    #: a task scored under several prompt conditions: its entry of variants.json (evalpipe.robustness)
    robustness: dict[str, Any] | None = field(default=None, repr=False)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def _sparse(parts: Mapping[str, Any], keys: frozenset[str]) -> dict[str, float]:
    """The parts an aggregation reads, without zeros (absent = 0): small lines in samples.jsonl."""
    out = {}
    for key, value in parts.items():
        if key in keys and isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0:
            out[key] = value
    return out


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
    """Parse every answer, score the corpus, and describe each sample (its records are built when read).

    ``keys`` are the samples' request keys (each record names its own). A sample without an answer
    (request failed for good, or never sent) is scored with the
    scoring's "no answer" prediction, so its gold items count against the model.
    """
    scoring = spec.scoring(compat)
    predictions: list[Prediction] = []
    for example, completion in zip(examples, answers):
        if completion is None or not completion.ok:
            predictions.append(scoring.empty(example))
        else:
            predictions.append(scoring.parse(answer_prefix + (completion.text or ""), example))
    sheet = scoring.score(examples, predictions, options)

    n = len(examples)
    answered_flags = [c is not None and c.ok for c in answers]
    errors = n - sum(answered_flags)
    answered = n - errors
    failed_flags = [ok and p.failed for ok, p in zip(answered_flags, predictions)]
    parse_failures = sum(failed_flags)
    metrics = {k: float(v) for k, v in sheet.corpus.items()}
    metrics["parse_failure_rate"] = parse_failures / answered if answered else 0.0
    metrics["n"] = n
    metrics["errors"] = errors

    # per-sample parts: the scorer's, plus the runner's three (views, not copies: see SampleParts)
    task_parts = sheet.sample_parts()
    parts = [SampleParts(task_parts[i] if i < len(task_parts) else {}, ok, failed)
             for i, (ok, failed) in enumerate(zip(answered_flags, failed_flags))]
    declared: dict[str, Aggregation] = {**sheet.aggregations, **RUNNER_AGGREGATIONS}
    problems = check_reproduces(metrics, declared, parts)
    if problems and os.environ.get("EVALPIPE_STRICT_AGGREGATIONS"):
        # the test suite runs strict: a task whose declarations disagree with its scorer is a bug
        raise AssertionError(f"task {spec.name} ({compat or 'default'}): {problems}")
    aggregations = {m: a for m, a in declared.items() if m in metrics and m not in problems}
    no_interval = {**{m: f"its declared aggregation does not reproduce it: {why}" for m, why in problems.items()},
                   **{m: why for m, why in {**FIXED_METRICS, **sheet.fixed}.items() if m in metrics}}
    for metric in metrics:
        if metric not in aggregations and metric not in no_interval:
            no_interval[metric] = "the task declares no aggregation for it"
    keys_read = frozenset(k for a in aggregations.values() for k in a.keys())

    truncated = list(truncated) if truncated else [0] * n
    diagnostics: dict[str, float] = {}
    for ok, prediction in zip(answered_flags, predictions):
        if ok:
            for key, value in prediction.diagnostics.items():
                if isinstance(value, (bool, int, float)):
                    diagnostics[key] = diagnostics.get(key, 0) + value
    records = SampleRecords(
        task=spec.name, examples=examples, keys=keys, answers=answers, predictions=predictions,
        answered=answered_flags, per_sample=sheet.per_sample, parts=parts, parts_read=keys_read,
        truncated=truncated,
    )
    ok_answers = [c for c in answers if c is not None and c.ok]
    latencies = sorted(c.latency_s for c in ok_answers)
    summary = TaskSummary(
        scoring=compat or "default",
        diagnostics=diagnostics,
        parse_failures=parse_failures,
        prompt_tokens=sum(c.usage.prompt_tokens or 0 for c in ok_answers),
        completion_tokens=sum(c.usage.completion_tokens or 0 for c in ok_answers),
        latency_s={f"p{q}": _percentile(latencies, q) for q in (50, 90, 99)},
        error_kinds=_error_kinds(answers),
        not_computed=dict(sheet.notes),
        truncated_share=sum(1 for t in truncated if t > 0) / n if n else 0.0,
        truncated_tokens=sum(truncated),
        aggregations={m: a.to_json() for m, a in aggregations.items()},
        no_interval=no_interval,
    )
    return TaskOutcome(name=spec.name, metrics=metrics, summary=summary, records=records)


def answer_prefix(spec: TaskSpec, config: RunConfig) -> str:
    """What the completion template primed the answer with (only for ``--endpoint completions``)."""
    return spec.completion_prefix if config.endpoint == "completions" else ""


def _error_kinds(answers: Sequence[Completion | None]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for c in answers:
        if c is None:
            kinds["not sent"] = kinds.get("not sent", 0) + 1
        elif not c.ok:
            kinds[c.error or "unknown"] = kinds.get(c.error or "unknown", 0) + 1
    return kinds


@dataclass(frozen=True)
class ScoringChunk:
    """Consecutive samples of one task, as the runner reads them back: examples (from the loader),
    request keys and answers (from the store) and the tokens budgeting cut from each."""

    examples: Sequence[Example]
    keys: Sequence[str]
    answers: Sequence[Completion | None]
    truncated: Sequence[int]


def score_task_chunked(spec: TaskSpec, chunks: Any, compat: str | None, options: MetricOptions = MetricOptions(),
                       answer_prefix: str = "") -> TaskOutcome:
    """Interim: every chunk at once through :func:`score_task`."""
    examples: list[Example] = []
    keys: list[str] = []
    answers: list[Completion | None] = []
    truncated: list[int] = []
    for chunk in chunks():
        examples.extend(chunk.examples)
        keys.extend(chunk.keys)
        answers.extend(chunk.answers)
        truncated.extend(chunk.truncated)
    return score_task(spec, examples, keys, answers, compat, options, truncated, answer_prefix)
