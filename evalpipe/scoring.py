"""Parse and score one task's answers: predictions, corpus metrics, per-sample records, summary.

Shared by a run (fresh and stored answers) and by re-scoring (stored answers only), so both give
the same numbers from the same answers.

**Which samples count** (:mod:`evalpipe.coverage`): the scorer sees the *answered* samples only —
a sample whose request failed for good, or was never sent, is left out of every metric, corpus
metrics included; an unparseable answer counts (as the scoring's failed prediction). With no
answered sample, every metric of the scorer is None (not computed, with the reason in
``summary.not_computed``).

Besides the task's own metrics, every task gets five the runner defines the same way for all:

* ``n`` — evaluated samples; ``errors`` — samples without an answer; ``answered`` = n − errors;
  ``coverage`` = answered / n (all four fixed by the run, so without an interval);
* ``parse_failure_rate`` — answered samples whose answer could not be parsed, over answered
  samples (``Σ run.parse_failed / Σ run.answered``; None when nothing was answered).

Each sample record carries ``parts``: the additive statistics the task's declared aggregations
sum (:mod:`evalpipe.metrics.aggregation`), so intervals and comparisons need only the run directory.

A record names its request ``key`` rather than repeating its prompt: prompts are stored once in the
run's store (:meth:`evalpipe.store.answers.ResponseStore.prompts`; ``RunDir.read_samples(prompts=True)`` and
``frames.load_samples`` give them back).

**Records are built when read.** The corpus scorer sees every example and prediction at once (a
micro F1, BERTScore's idf, a reference's corpus arithmetic), so those are held; the records —
JSON copies of inputs, gold, prediction, scores … — would double that, so :class:`SampleRecords`
builds each one when it is read and ``samples.jsonl`` is written as they stream by.

**Chunk by chunk.** A scoring that declares itself samplewise (``Scoring.samplewise``: every
per-sample value depends on its sample alone, every corpus metric is its declared aggregation of
summed parts) needs none of that held: :func:`score_task_chunked` reads the task as
:class:`ScoringChunk` s, keeps only the summed parts and counts, and its records
(:class:`ChunkedRecords`) parse and score each chunk again when read — the same numbers, summary
and records as :func:`score_task`, in memory flat in the number of samples. Other scorings are
joined and scored whole.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import weakref
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO, overload

from evalpipe.config import RunConfig
from evalpipe.coverage import ANSWERED_METRICS, COVERAGE_FIXED, Coverage, is_answered, spread
from evalpipe.metrics.aggregation import Aggregation, Ratio, check_reproduces, evaluate_sums
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Completion, Example, Prediction, ScoreSheet, to_jsonable
from evalpipe.results import TaskSummary, record_line
from evalpipe.tasks.base import Scoring, TaskSpec

log = logging.getLogger(__name__)

#: per-sample parts every task gets from the runner (namespaced: they never shadow a scorer's)
ANSWERED, PARSE_FAILED, ERROR = "run.answered", "run.parse_failed", "run.error"
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
    parts: Sequence[Mapping[str, float | None]]
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
            # the API's separate reasoning text (issue 25), only where there is one: never parsed or scored
            **({"reasoning": completion.reasoning} if completion is not None and completion.reasoning else {}),
        }


@dataclass
class TaskOutcome:
    name: str
    #: metric → value; None for a metric not computed (no answered sample: summary.not_computed says why)
    metrics: dict[str, float | None]
    summary: TaskSummary
    #: one record per sample (:class:`SampleRecords` or, scored chunk by chunk, :class:`ChunkedRecords`:
    #: built when read; a list where a caller changed them)
    records: Sequence[dict[str, Any]] = field(repr=False)
    #: a task scored under several prompt conditions: its entry of variants.json (evalpipe.variants.robustness)
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

    ``keys`` are the samples' request keys (each record names its own). Only answered samples are
    scored (:mod:`evalpipe.coverage`): a sample without an answer (request failed for good, or never
    sent) is left out of every metric and gets the scoring's "no answer" prediction in its record
    only; with no answered sample, every metric of the scorer is None with the reason.
    """
    scoring = spec.scoring(compat)
    predictions = _predict(scoring, examples, answers, answer_prefix)
    n = len(examples)
    answered_flags = [is_answered(c) for c in answers]
    coverage = Coverage(n, sum(answered_flags), _error_kinds(answers))
    failed_flags = [ok and p.failed for ok, p in zip(answered_flags, predictions)]
    parse_failures = sum(failed_flags)
    sheet = _score_answered(scoring, examples, predictions, answered_flags, options)
    if coverage.answered:
        metrics: dict[str, float | None] = {k: float(v) for k, v in sheet.corpus.items()}
        metrics["parse_failure_rate"] = parse_failures / coverage.answered
    else:
        metrics = dict.fromkeys([*sheet.corpus, "parse_failure_rate"], None)
    metrics.update(_coverage_metrics(coverage))

    # per-sample parts: the scorer's (answered samples only), plus the runner's three (views: SampleParts)
    task_parts = spread(sheet.sample_parts(), answered_flags, {}) if coverage.answered else [{}] * n
    parts = [SampleParts(row, ok, failed) for row, ok, failed in zip(task_parts, answered_flags, failed_flags)]
    declared: dict[str, Aggregation] = {**sheet.aggregations, **RUNNER_AGGREGATIONS} if coverage.answered else {}
    problems = _check(metrics, sheet, parts, answered_flags) if coverage.answered else {}
    if problems and os.environ.get("EVALPIPE_STRICT_AGGREGATIONS"):
        # the test suite runs strict: a task whose declarations disagree with its scorer is a bug
        raise AssertionError(f"task {spec.name} ({compat or 'default'}): {problems}")
    aggregations = {m: a for m, a in declared.items() if m in metrics and m not in problems}
    no_interval = {**{m: f"its declared aggregation does not reproduce it: {why}" for m, why in problems.items()},
                   **{m: why for m, why in {**FIXED_METRICS, **sheet.fixed}.items() if m in metrics}}
    for metric in metrics:
        if metric not in aggregations and metric not in no_interval:
            no_interval[metric] = ("not computed: " + coverage.not_computed_reason() if not coverage.answered
                                   else "the task declares no aggregation for it")
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
        answered=answered_flags, per_sample=_per_sample(sheet, answered_flags, coverage.answered), parts=parts,
        parts_read=keys_read, truncated=truncated,
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
        error_kinds=dict(coverage.unanswered),
        not_computed=_not_computed(sheet.notes, metrics, coverage),
        truncated_share=sum(1 for t in truncated if t > 0) / n if n else 0.0,
        truncated_tokens=sum(truncated),
        aggregations={m: a.to_json() for m, a in aggregations.items()},
        no_interval=no_interval,
        coverage=coverage.to_json(),
    )
    return TaskOutcome(name=spec.name, metrics=metrics, summary=summary, records=records)


def _score_answered(scoring: Scoring, examples: Sequence[Example], predictions: Sequence[Prediction],
                    answered: Sequence[bool], options: MetricOptions) -> ScoreSheet:
    """The scorer on the answered samples only (the policy of :mod:`evalpipe.coverage`).

    With none answered, the scorer still runs once on every sample's "no answer" prediction, only
    to learn which metrics the task reports (many scorers refuse an empty corpus); its values are
    then discarded (None), never reported."""
    if any(answered):
        return scoring.score([e for e, ok in zip(examples, answered) if ok],
                             [p for p, ok in zip(predictions, answered) if ok], options)
    if not examples:
        return ScoreSheet(corpus={}, per_sample=[])
    return scoring.score(examples, predictions, options)


def _check(metrics: Mapping[str, float | None], sheet: ScoreSheet, parts: Sequence[SampleParts],
           answered: Sequence[bool]) -> dict[str, str]:
    """The declared aggregations checked against the scorer's values: the scorer's on the answered
    samples' parts (what it scored), the runner's on every sample's."""
    answered_parts = [p for p, ok in zip(parts, answered) if ok]
    values = {k: v for k, v in metrics.items() if v is not None}
    return {**check_reproduces(values, sheet.aggregations, answered_parts),
            **check_reproduces(values, RUNNER_AGGREGATIONS, parts)}


def _per_sample(sheet: ScoreSheet, answered: Sequence[bool], count: int) -> list[Mapping[str, Any]]:
    """Each sample's shown scores: the scorer's for an answered sample, none for the others."""
    return spread(sheet.per_sample, answered, {}) if count else [{} for _ in answered]


def _coverage_metrics(coverage: Coverage) -> dict[str, float | None]:
    """The runner's counts every task reports: ``n``, ``errors``, ``answered`` and ``coverage``."""
    return {"n": coverage.samples, "errors": coverage.samples - coverage.answered, **coverage.metrics()}


def _not_computed(notes: Mapping[str, str], metrics: Mapping[str, float | None], coverage: Coverage) -> dict[str, str]:
    """The scorer's notes, and for each metric left None for want of answers, the reason."""
    out = dict(notes)
    if not coverage.answered and coverage.samples:
        for metric, value in metrics.items():
            if value is None and metric not in ANSWERED_METRICS:
                out.setdefault(metric, coverage.not_computed_reason())
    return out


def _predict(scoring: Scoring, examples: Sequence[Example], answers: Sequence[Completion | None],
             answer_prefix: str) -> list[Prediction]:
    """Each answer parsed; a sample without an answer gets the scoring's "no answer" prediction."""
    predictions: list[Prediction] = []
    for example, completion in zip(examples, answers):
        if completion is None or not completion.ok:
            predictions.append(scoring.empty(example))
        else:
            predictions.append(scoring.parse(answer_prefix + (completion.text or ""), example))
    return predictions


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


# --------------------------------------------------------------------------- chunk by chunk


@dataclass(frozen=True)
class ScoringChunk:
    """Consecutive samples of one task: examples with their request keys, answers (None: not
    answered yet) and tokens cut from their prompts (empty: none cut)."""

    examples: Sequence[Example]
    keys: Sequence[str]
    answers: Sequence[Completion | None]
    truncated: Sequence[int] = ()

    def __post_init__(self) -> None:
        n = len(self.examples)
        if len(self.keys) != n or len(self.answers) != n or (self.truncated and len(self.truncated) != n):
            raise ValueError(f"a scoring chunk of {n} examples has {len(self.keys)} keys, {len(self.answers)} "
                             f"answers and {len(self.truncated)} truncation counts")

    def cut_tokens(self) -> Sequence[int]:
        return self.truncated if self.truncated else [0] * len(self.examples)


#: the chunks of one task, read again each time it is called (the same chunks, in the same order)
Chunks = Callable[[], Iterable[ScoringChunk]]


class NotSamplewise(ValueError):
    """A scoring declared samplewise broke the contract on some chunk (see :class:`Scoring`)."""


@dataclass(frozen=True)
class _ScoredChunk:
    """One chunk parsed and scored: what its records are made of (dropped once they are built).

    ``sheet`` is the scorer's on the chunk's answered samples only (None when it has none):
    its rows are put back among the chunk's samples by :meth:`parts` and :meth:`per_sample`."""

    predictions: list[Prediction]
    answered: list[bool]
    failed: list[bool]
    sheet: ScoreSheet | None

    def parts(self) -> list[SampleParts]:
        rows = spread(self.sheet.sample_parts(), self.answered, {}) if self.sheet is not None else \
            [{}] * len(self.answered)
        return [SampleParts(row, ok, failed) for row, ok, failed in zip(rows, self.answered, self.failed)]

    def per_sample(self) -> list[Mapping[str, Any]]:
        if self.sheet is None:
            return [{} for _ in self.answered]
        return spread(self.sheet.per_sample, self.answered, {})


def _score_chunk(scoring: Scoring, chunk: ScoringChunk, options: MetricOptions, prefix: str) -> _ScoredChunk:
    predictions = _predict(scoring, chunk.examples, chunk.answers, prefix)
    answered = [is_answered(c) for c in chunk.answers]
    sheet = _score_answered(scoring, chunk.examples, predictions, answered, options) if any(answered) else None
    return _ScoredChunk(predictions, answered, [ok and p.failed for ok, p in zip(answered, predictions)], sheet)


def _records_of(task: str, chunk: ScoringChunk, scored: _ScoredChunk, parts_read: frozenset[str]) -> SampleRecords:
    return SampleRecords(
        task=task, examples=chunk.examples, keys=chunk.keys, answers=chunk.answers,
        predictions=scored.predictions, answered=scored.answered, per_sample=scored.per_sample(),
        parts=scored.parts(), parts_read=parts_read, truncated=chunk.cut_tokens(),
    )


def _parts_read(corpus: Iterable[str], aggregations: Mapping[str, Aggregation]) -> frozenset[str]:
    """The parts a record carries: those read by the aggregations of the metrics reported (as
    :func:`score_task` and :func:`_outcome_of_fold` choose them)."""
    metrics = {*corpus, "parse_failure_rate", *FIXED_METRICS}
    return frozenset(k for m, a in {**aggregations, **RUNNER_AGGREGATIONS}.items() if m in metrics for k in a.keys())


@dataclass
class _Fold:
    """What a samplewise task keeps between chunks: sums and counts, never a sample (but for one
    8-byte latency per answered sample, for the percentiles)."""

    n: int = 0
    answered: int = 0
    parse_failures: int = 0
    #: every numeric part summed over samples, in sample order (as :func:`sum_parts` adds them)
    sums: dict[str, float] = field(default_factory=dict)
    corpus_keys: tuple[str, ...] | None = None
    aggregations: dict[str, Aggregation] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    fixed: dict[str, str] = field(default_factory=dict)
    #: the values of metrics fixed by the run (no aggregation), each the same on every chunk
    fixed_values: dict[str, float] = field(default_factory=dict)
    diagnostics: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latencies: array[float] = field(default_factory=lambda: array("d"))
    error_kinds: dict[str, int] = field(default_factory=dict)
    truncated_samples: int = 0
    truncated_tokens: int = 0
    #: where the records are written as the chunks are scored (None: they are made again when read)
    spill: TextIO | None = None
    task: str = ""
    #: the parts the spilled records carry; the spill is usable only if every chunk read the same
    spill_keys: frozenset[str] | None = None
    spill_ok: bool = True

    def add(self, chunk: ScoringChunk, scored: _ScoredChunk) -> None:
        """Fold one chunk in; :class:`NotSamplewise` when its sheet cannot be summed with the others'.
        A chunk without an answered sample has no sheet: only its counts are folded in."""
        if scored.sheet is not None:
            self._add_sheet(chunk, scored.sheet)
        self.n += len(chunk.examples)
        self.answered += sum(scored.answered)
        self.parse_failures += sum(scored.failed)
        for ok, prediction in zip(scored.answered, scored.predictions):
            if ok:
                for key, value in prediction.diagnostics.items():
                    if isinstance(value, (bool, int, float)):
                        self.diagnostics[key] = self.diagnostics.get(key, 0) + value
        for completion in chunk.answers:
            if completion is not None and completion.ok:
                self.prompt_tokens += completion.usage.prompt_tokens or 0
                self.completion_tokens += completion.usage.completion_tokens or 0
                self.latencies.append(completion.latency_s)
        for kind, count in _error_kinds(chunk.answers).items():
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + count
        cut = chunk.cut_tokens()
        self.truncated_samples += sum(1 for t in cut if t > 0)
        self.truncated_tokens += sum(cut)
        if self.spill is not None and self.spill_ok:
            sheet = scored.sheet
            if sheet is None:  # no answered sample: its records carry no parts, whatever the keys
                keys = self.spill_keys or frozenset()
            else:
                keys = _parts_read(sheet.corpus, sheet.aggregations)
                self.spill_keys = keys if self.spill_keys is None else self.spill_keys
            if keys != (self.spill_keys or frozenset()):  # a label first seen here (macro F1): made again
                self.spill_ok = False
            else:
                self.spill.writelines(record_line(r) for r in _records_of(self.task, chunk, scored, keys))



    def _add_sheet(self, chunk: ScoringChunk, sheet: ScoreSheet) -> None:
        """The scorer's sheet of a chunk's answered samples: its metrics checked and its parts summed."""
        keys = tuple(sheet.corpus)
        if self.corpus_keys is None:
            self.corpus_keys = keys
        elif keys != self.corpus_keys:
            raise NotSamplewise(f"a chunk reports the metrics {list(keys)}, an earlier one {list(self.corpus_keys)}")
        undeclared = [m for m in keys if m not in sheet.aggregations and m not in sheet.fixed]
        if undeclared:
            raise NotSamplewise(f"no aggregation is declared for {undeclared}")
        for metric in keys:
            if metric not in sheet.aggregations:  # fixed by the run (a pool's size): the same on every chunk
                value = float(sheet.corpus[metric])
                if self.fixed_values.setdefault(metric, value) != value:
                    raise NotSamplewise(f"{metric}, fixed by the run, is {value!r} on a chunk and "
                                        f"{self.fixed_values[metric]!r} on an earlier one")
        problems = check_reproduces(sheet.corpus, sheet.aggregations, sheet.sample_parts())
        if problems:
            raise NotSamplewise(f"on a chunk of {len(chunk.examples)} samples: {problems}")
        for metric, aggregation in sheet.aggregations.items():
            known = self.aggregations.get(metric)
            merged = aggregation if known is None else known.merge(aggregation)
            if merged is None:
                raise NotSamplewise(f"{metric}: a chunk declares {aggregation.to_json()}, an earlier one "
                                    f"{known.to_json() if known else None}")
            self.aggregations[metric] = merged
        for key, note in sheet.notes.items():
            self.notes.setdefault(key, note)
        for key, why in sheet.fixed.items():
            self.fixed.setdefault(key, why)
        sums = self.sums
        for row in sheet.sample_parts():
            for key, part in row.items():
                if part and isinstance(part, (int, float)):
                    sums[key] = sums.get(key, 0.0) + float(part)


@dataclass(frozen=True, eq=False)
class ChunkedRecords(Sequence[dict[str, Any]]):
    """A samplewise task's per-sample records, made again from its chunks whenever they are read.

    Iterating reads the chunks once more (``chunks()``) and parses and scores each chunk again,
    yielding its records as :class:`SampleRecords` builds them; nothing but the chunk being read is
    held. ``records[i]`` and slices read the chunks up to the last one wanted and score only those
    that hold a wanted sample. The price of not holding predictions and scores is parsing and
    scoring twice. Measured (``bench/chunked_scoring.py``, NCBI Disease, 47,000 samples, chunks of
    1,000, one process, load ~3.8 on 2 shared cores): scoring whole 6.3 s and its records 1.3 s;
    scoring chunked 6.6 s and its records 6.8 s — reading the records costs ~5.6 s more, one more
    parse and score of every sample (~0.12 ms each), paid once when ``samples.jsonl`` is written.
    """

    task: str
    scoring: Scoring
    chunks: Chunks
    options: MetricOptions
    answer_prefix: str
    parts_read: frozenset[str]
    n: int
    #: the records' lines, written while the task was scored (None: made again when read)
    spill: Path | None = None

    def __len__(self) -> int:
        return self.n

    def _records(self, chunk: ScoringChunk) -> SampleRecords:
        scored = _score_chunk(self.scoring, chunk, self.options, self.answer_prefix)
        return _records_of(self.task, chunk, scored, self.parts_read)

    def lines(self) -> Iterator[str]:
        """The records as their lines of ``samples.jsonl``: copied from the spill written while
        scoring (no second parse and score), else made again from the chunks."""
        try:
            lines = self.spill.open(encoding="utf-8", newline="") if self.spill is not None else None
        except FileNotFoundError:  # its scratch folder is gone (the run or re-scoring has ended)
            lines = None
        if lines is None:
            yield from (record_line(r) for r in self)
            return
        with lines:
            yield from lines

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for chunk in self.chunks():
            if chunk.examples:
                yield from self._records(chunk)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return self._pick(list(range(*index.indices(self.n))))
        position = index + self.n if index < 0 else index
        if not 0 <= position < self.n:
            raise IndexError(index)
        return self._pick([position])[0]

    def _pick(self, positions: list[int]) -> list[dict[str, Any]]:
        """The records at ``positions`` (ascending, no repeats), scoring only the chunks that hold them."""
        if not positions:
            return []
        wanted = sorted(positions)
        found: dict[int, dict[str, Any]] = {}
        start, w = 0, 0
        for chunk in self.chunks():
            end = start + len(chunk.examples)
            inside = []
            while w < len(wanted) and wanted[w] < end:
                inside.append(wanted[w])
                w += 1
            if inside:
                records = self._records(chunk)
                found.update((p, records.record(p - start)) for p in inside)
            if w == len(wanted):
                break
            start = end
        return [found[p] for p in positions]


class _Spill:
    """A file in ``scratch`` for a task's record lines (see :func:`score_task_chunked`)."""

    def __init__(self, scratch: Path) -> None:
        fd, name = tempfile.mkstemp(dir=scratch, prefix="records-", suffix=".jsonl")
        self.path = Path(name)
        self.handle: TextIO = os.fdopen(fd, "w", encoding="utf-8", newline="")

    def drop(self) -> None:
        self.handle.close()
        self.path.unlink(missing_ok=True)


def record_lines(records: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """A task's records as their lines of ``samples.jsonl`` (spilled ones are copied as they are)."""
    lines = getattr(records, "lines", None)
    return lines() if callable(lines) else (record_line(r) for r in records)


def score_task_chunked(
    spec: TaskSpec,
    chunks: Chunks,
    compat: str | None,
    options: MetricOptions = MetricOptions(),
    answer_prefix: str = "",
    scratch: Path | None = None,
) -> TaskOutcome:
    """:func:`score_task` on a task read a chunk at a time: the same metrics, summary and records.

    ``chunks()`` yields the task's samples as :class:`ScoringChunk` s, in sample order, and may be
    called again (it must then yield the same chunks): the records read them once more.

    * A scoring that is not :attr:`~evalpipe.tasks.base.Scoring.samplewise` is scored as a whole:
      the chunks are joined and :func:`score_task` called — exactly today's behaviour and memory.
    * A samplewise scoring is scored in one pass: per chunk the answers are parsed and the scorer
      run on the chunk alone, and only running state is kept (:class:`_Fold`: every numeric part
      summed, counts, diagnostics, tokens, error kinds, an array of latencies). Each corpus metric is
      then its declared aggregation of the summed parts; with parts summed in sample order and the
      same arithmetic as the scorer's, that is the scorer's own value bit for bit (the test suite
      checks it for every samplewise scoring of every task at chunk sizes 1, 7 and all). The records
      are :class:`ChunkedRecords`: made again, chunk by chunk, when read. With a ``scratch`` folder,
      each chunk's records are also written there as the lines ``samples.jsonl`` will hold, while the
      chunk is at hand, so writing the run's files copies them instead of parsing and scoring every
      sample again (measured: a quarter of a 47,000-sample NCBI run's CPU); the file goes with the
      records object.

    The aggregation check of :func:`score_task` applies to every chunk (the scorer's corpus values
    on the chunk against its declarations on the chunk's parts), and the chunks must agree on which
    metrics they report and how (:meth:`Aggregation.merge`). A chunk that breaks this is a scoring
    wrongly declared samplewise: an ``AssertionError`` under ``EVALPIPE_STRICT_AGGREGATIONS`` (the
    test suite), else the task is scored as a whole instead, so its numbers are never wrong.
    """
    scoring = spec.scoring(compat)
    if scoring.samplewise:
        spill = _Spill(scratch) if scratch is not None else None
        fold = _Fold(spill=spill.handle if spill is not None else None, task=spec.name)
        try:
            for chunk in chunks():
                if chunk.examples:
                    fold.add(chunk, _score_chunk(scoring, chunk, options, answer_prefix))
        except NotSamplewise as problem:
            if spill is not None:
                spill.drop()
            if os.environ.get("EVALPIPE_STRICT_AGGREGATIONS"):
                raise AssertionError(f"task {spec.name} ({compat or 'default'}) is declared samplewise, "
                                     f"but {problem}") from problem
            log.warning("task %s (%s) is declared samplewise, but %s: scored as a whole", spec.name,
                        compat or "default", problem)
        except BaseException:
            if spill is not None:
                spill.drop()
            raise
        else:
            if fold.n:
                outcome = _outcome_of_fold(spec, scoring, fold, chunks, compat, options, answer_prefix)
                if spill is not None:
                    spill.handle.close()
                    records = outcome.records
                    assert isinstance(records, ChunkedRecords)
                    if fold.spill_ok and fold.spill_keys == records.parts_read:
                        outcome.records = replace(records, spill=spill.path)
                        weakref.finalize(outcome.records, spill.path.unlink, missing_ok=True)
                    else:
                        spill.drop()
                return outcome
            if spill is not None:
                spill.drop()
    return _score_whole(spec, chunks, compat, options, answer_prefix)


def _score_whole(spec: TaskSpec, chunks: Chunks, compat: str | None, options: MetricOptions,
                 answer_prefix: str) -> TaskOutcome:
    examples: list[Example] = []
    keys: list[str] = []
    answers: list[Completion | None] = []
    truncated: list[int] = []
    for chunk in chunks():
        examples.extend(chunk.examples)
        keys.extend(chunk.keys)
        answers.extend(chunk.answers)
        truncated.extend(chunk.cut_tokens())
    return score_task(spec, examples, keys, answers, compat, options, truncated, answer_prefix)


def _outcome_of_fold(spec: TaskSpec, scoring: Scoring, fold: _Fold, chunks: Chunks, compat: str | None,
                     options: MetricOptions, answer_prefix: str) -> TaskOutcome:
    """What :func:`score_task` returns, from the folded state (same formulas, same order): the
    corpus metrics from the parts summed over the answered samples, as many as the scorer saw."""
    n = fold.n
    coverage = Coverage(n, fold.answered, dict(fold.error_kinds))
    metrics: dict[str, float | None]
    if fold.answered:
        metrics = {k: evaluate_sums(fold.aggregations[k], fold.sums, fold.answered) if k in fold.aggregations
                   else fold.fixed_values[k] for k in fold.corpus_keys or ()}
        metrics["parse_failure_rate"] = fold.parse_failures / fold.answered
        declared: dict[str, Aggregation] = {**fold.aggregations, **RUNNER_AGGREGATIONS}
        fixed = fold.fixed
    else:  # nothing answered: learn the metrics' names from the first chunk (see _score_answered)
        first = next((c for c in chunks() if c.examples), None)
        sheet = _score_answered(scoring, first.examples, _predict(scoring, first.examples, first.answers, answer_prefix),
                                [False] * len(first.examples), options) if first is not None else \
            ScoreSheet(corpus={}, per_sample=[])
        metrics = dict.fromkeys([*sheet.corpus, "parse_failure_rate"], None)
        declared, fixed = {}, dict(sheet.fixed)
        fold.notes.update({k: v for k, v in sheet.notes.items() if k not in fold.notes})
    metrics.update(_coverage_metrics(coverage))
    aggregations = {m: a for m, a in declared.items() if m in metrics}
    no_interval = {m: why for m, why in {**FIXED_METRICS, **fixed}.items() if m in metrics}
    for metric in metrics:
        if metric not in aggregations and metric not in no_interval:
            no_interval[metric] = ("not computed: " + coverage.not_computed_reason() if not coverage.answered
                                   else "the task declares no aggregation for it")
    keys_read = frozenset(k for a in aggregations.values() for k in a.keys())
    latencies = sorted(fold.latencies)
    summary = TaskSummary(
        scoring=compat or "default",
        diagnostics=fold.diagnostics,
        parse_failures=fold.parse_failures,
        prompt_tokens=fold.prompt_tokens,
        completion_tokens=fold.completion_tokens,
        latency_s={f"p{q}": _percentile(latencies, q) for q in (50, 90, 99)},
        error_kinds=fold.error_kinds,
        not_computed=_not_computed(fold.notes, metrics, coverage),
        truncated_share=fold.truncated_samples / n,
        truncated_tokens=fold.truncated_tokens,
        aggregations={m: a.to_json() for m, a in aggregations.items()},
        no_interval=no_interval,
        coverage=coverage.to_json(),
    )
    records = ChunkedRecords(task=spec.name, scoring=scoring, chunks=chunks, options=options,
                             answer_prefix=answer_prefix, parts_read=keys_read, n=n)
    return TaskOutcome(name=spec.name, metrics=metrics, summary=summary, records=records)
