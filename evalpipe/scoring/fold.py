"""The one scoring path: a task's chunks folded, one at a time, into its :class:`TaskOutcome`.

Shared by a run (fresh and stored answers) and by re-scoring (stored answers only), so both give
the same numbers from the same answers; scoring a corpus held in memory is one chunk of it
(:func:`evalpipe.scoring.score_task`).

**Push, then finish.** :meth:`TaskFold.add` takes the task's samples a chunk at a time, in sample
order; :meth:`TaskFold.finish` gives the metrics, summary and records. Every chunk is parsed as it
comes and its counts tallied (:class:`_Tally`: answered, parse failures, diagnostics, tokens, error
kinds, truncation, latencies); what happens to the scores depends on what the scoring declares:

* **samplewise** (:attr:`evalpipe.tasks.base.Scoring.samplewise`): the chunk is scored on its own
  and only its parts are kept, summed (:class:`_Sums`). Each corpus metric *is* its declared
  aggregation of the summed parts (:func:`evalpipe.metrics.aggregation.evaluate_sums`); the
  scorer's own corpus value on each chunk is only a check of the declaration (``tests/
  test_chunked_scoring.py`` shows they agree bit for bit at chunk sizes 1, 7 and all).
* **corpus** (not samplewise — BERTScore with idf, a reference implementation's corpus arithmetic,
  a retrieval pool, metrics per dataset found in the data; each scoring says why in its
  ``description``): the parsed chunks are held and the scorer runs once, on every answered sample,
  in :meth:`finish`; its declared aggregations are checked against its values there, and a metric
  whose declaration does not reproduce it is reported without an interval, with the reason.

A chunk that breaks a samplewise declaration (its metrics or declarations differ from an earlier
chunk's, or its values are not its declarations') is a scoring wrongly declared: an
``AssertionError`` under ``EVALPIPE_STRICT_AGGREGATIONS`` (the test suite), else the task falls
back to the corpus path, re-reading its chunks from ``source`` (or the chunks held), so its numbers
are never wrong.

**Which samples count** (:mod:`evalpipe.coverage`): the scorer sees the *answered* samples only —
a sample whose request failed for good, or was never sent, is left out of every metric, corpus
metrics included; an unparseable answer counts (as the scoring's failed prediction). With no
answered sample, every metric of the scorer is None (not computed, with the reason in
``summary.not_computed``). Besides the task's own metrics every task gets ``n``, ``errors``,
``answered``, ``coverage`` (fixed by the run, no interval) and ``parse_failure_rate``
(:mod:`evalpipe.scoring.parts`).

**Records.** With a ``source`` (chunks that can be read again), a samplewise task keeps nothing
per sample: its records are :class:`~evalpipe.scoring.records.ChunkedRecords`, made again from the
source when read, or — with a ``scratch`` folder — copied from the lines written there while each
chunk was at hand (measured: a quarter of a 47,000-sample NCBI run's CPU saved). Without a source
the fold holds the parsed chunks and its records are built from them.
"""

from __future__ import annotations

import logging
import os
import statistics
import weakref
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from evalpipe.coverage import ANSWERED_METRICS, Coverage, spread
from evalpipe.metrics.aggregation import Aggregation, check_reproduces, evaluate_sums
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Prediction, ScoreSheet
from evalpipe.results import TaskSummary, record_line
from evalpipe.scoring.chunk import (
    Chunks, ScoredChunk, ScoringChunk, error_kinds, parse_chunk, score_answered, score_chunk,
)
from evalpipe.scoring.parts import FIXED_METRICS, RUNNER_AGGREGATIONS, SampleParts
from evalpipe.scoring.records import ChunkedRecords, SampleRecords, Spill, TakerFactory, records_of
from evalpipe.tasks.base import TaskSpec

log = logging.getLogger(__name__)


@dataclass
class TaskOutcome:
    name: str
    #: metric → value; None for a metric not computed (no answered sample: summary.not_computed says why)
    metrics: dict[str, float | None]
    summary: TaskSummary
    #: one record per sample (:class:`SampleRecords` or :class:`ChunkedRecords`: built when read; a
    #: list where a caller changed them)
    records: Sequence[dict[str, Any]] = field(repr=False)
    #: a task scored under several prompt conditions: its entry of variants.json (evalpipe.variants.robustness)
    robustness: dict[str, Any] | None = field(default=None, repr=False)


class NotSamplewise(ValueError):
    """A scoring declared samplewise broke the contract on some chunk (see :class:`Scoring`)."""


@dataclass
class _Tally:
    """What every task counts, chunk by chunk, whatever its scoring: never a sample (but for one
    8-byte latency per answered sample, for the percentiles)."""

    n: int = 0
    answered: int = 0
    parse_failures: int = 0
    diagnostics: dict[str, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latencies: array[float] = field(default_factory=lambda: array("d"))
    error_kinds: dict[str, int] = field(default_factory=dict)
    truncated_samples: int = 0
    truncated_tokens: int = 0

    def add(self, chunk: ScoringChunk, parsed: ScoredChunk) -> None:
        self.n += len(chunk.examples)
        self.answered += sum(parsed.answered)
        self.parse_failures += sum(parsed.failed)
        for ok, prediction in zip(parsed.answered, parsed.predictions):
            if ok:
                for key, value in prediction.diagnostics.items():
                    if isinstance(value, (bool, int, float)):
                        self.diagnostics[key] = self.diagnostics.get(key, 0) + value
        for completion in chunk.answers:
            if completion is not None and completion.ok:
                self.prompt_tokens += completion.usage.prompt_tokens or 0
                self.completion_tokens += completion.usage.completion_tokens or 0
                self.latencies.append(completion.latency_s)
        for kind, count in error_kinds(chunk.answers).items():
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + count
        cut = chunk.cut_tokens()
        self.truncated_samples += sum(1 for t in cut if t > 0)
        self.truncated_tokens += sum(cut)

    def coverage(self) -> Coverage:
        return Coverage(self.n, self.answered, dict(self.error_kinds))


@dataclass
class _Sums:
    """A samplewise scoring's state between chunks: its metrics' declarations and every numeric
    part summed over the answered samples, in sample order (as :func:`sum_parts` adds them)."""

    sums: dict[str, float] = field(default_factory=dict)
    corpus_keys: tuple[str, ...] | None = None
    aggregations: dict[str, Aggregation] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    fixed: dict[str, str] = field(default_factory=dict)
    #: the values of metrics fixed by the run (no aggregation), each the same on every chunk
    fixed_values: dict[str, float] = field(default_factory=dict)

    def add(self, size: int, sheet: ScoreSheet) -> None:
        """The scorer's sheet of a chunk's answered samples: its metrics checked and its parts summed;
        :class:`NotSamplewise` when it cannot be summed with the earlier chunks'."""
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
            raise NotSamplewise(f"on a chunk of {size} samples: {problems}")
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

    def metrics(self, answered: int) -> dict[str, float | None]:
        return {k: evaluate_sums(self.aggregations[k], self.sums, answered) if k in self.aggregations
                else self.fixed_values[k] for k in self.corpus_keys or ()}


def parts_read(metrics: Mapping[str, Any], aggregations: Mapping[str, Aggregation]) -> frozenset[str]:
    """The parts a record carries: those read by the aggregations (the scorer's and the runner's) of
    the metrics reported."""
    reported = {*metrics, "parse_failure_rate", *FIXED_METRICS}
    return _keys_read({m: a for m, a in {**aggregations, **RUNNER_AGGREGATIONS}.items() if m in reported})


def _keys_read(aggregations: Mapping[str, Aggregation]) -> frozenset[str]:
    return frozenset(k for a in aggregations.values() for k in a.keys())


@dataclass(frozen=True)
class FoldState:
    """What a fold with a source has gathered from its chunks, handed to another process to finish
    (:mod:`evalpipe.pipeline.score_beside`: a run folds its pages beside the sending, and finishes
    them where the task's settings live). It holds no sample: the counts, the summed parts, and the
    path of the records' lines spilled so far; picklable."""

    tally: _Tally
    sums: _Sums
    samplewise: bool
    reread: bool
    fell_back: str | None
    spill: Path | None
    spill_keys: frozenset[str] | None
    spill_ok: bool
    #: what was taken of the spilled lines (:attr:`~evalpipe.scoring.records.ChunkedRecords.extract`)
    extract: Any = None


class TaskFold:
    """One task's chunks folded into its outcome (see the module's docstring): ``add`` each chunk
    in sample order, then ``finish`` once (or hand its :meth:`state` over to be finished by a fold
    :meth:`resumed` from it, in another process)."""

    def __init__(self, spec: TaskSpec, compat: str | None, options: MetricOptions = MetricOptions(),
                 answer_prefix: str = "", *, source: Chunks | None = None, scratch: Path | None = None,
                 taker: TakerFactory | None = None) -> None:
        """``taker``: what takes something of the spilled lines as they are written (the report's
        extract of them, :mod:`evalpipe.report.extract`), where there is a spill."""
        self.spec, self.compat, self.options, self.prefix = spec, compat, options, answer_prefix
        self.scoring = spec.scoring(compat)
        self.source = source
        self.samplewise = self.scoring.samplewise
        self.tally = _Tally()
        self.sums = _Sums()
        #: the parsed (samplewise: scored) chunks, held where there is no source to read them again
        #: from, or the scoring is a corpus one
        self.held: list[tuple[ScoringChunk, ScoredChunk]] = []
        self.spill = (Spill.new(scratch, taker) if scratch is not None and source is not None and self.samplewise
                      else None)
        #: the parts the spilled records carry; the spill is usable only if every chunk read the same
        self.spill_keys: frozenset[str] | None = None
        self.spill_ok = True
        #: fell back from samplewise with a source: the chunks are read and parsed again by finish
        self.reread = False
        #: why a scoring declared samplewise was valued whole (its declaration failed on a chunk)
        self.fell_back: str | None = None
        #: the first chunk, parsed: with nothing answered, its "no answer" predictions name the metrics
        self.first: tuple[ScoringChunk, ScoredChunk] | None = None
        self.finished = False

    def state(self) -> FoldState:
        """Hand the fold over (see :class:`FoldState`): its spilled lines are flushed, and this fold
        is finished here. Only a fold that holds no chunk can be handed over: one with a source
        whose scoring is samplewise (or fell back and will read its source again)."""
        if self.finished:
            raise RuntimeError("a finished fold has no state to hand over")
        if self.source is None or self.held:
            raise RuntimeError(f"task {self.spec.name}: a fold that holds its chunks cannot be handed over")
        self.finished = True
        spill = self.spill
        if spill is not None:
            spill.handle.close()
            self.spill = None
        return FoldState(tally=self.tally, sums=self.sums, samplewise=self.samplewise, reread=self.reread,
                         fell_back=self.fell_back, spill=spill.path if spill is not None else None,
                         spill_keys=self.spill_keys, spill_ok=self.spill_ok,
                         extract=spill.finish_taking() if spill is not None else None)

    @classmethod
    def resumed(cls, spec: TaskSpec, compat: str | None, options: MetricOptions, answer_prefix: str,
                state: FoldState, *, source: Chunks) -> TaskFold:
        """A fold that goes on from a handed-over :meth:`state`, made with the same settings and a
        source giving the same chunks; its :meth:`finish` gives what the first fold's would have."""
        fold = cls(spec, compat, options, answer_prefix, source=source, scratch=None)
        fold.tally, fold.sums, fold.samplewise, fold.reread = state.tally, state.sums, state.samplewise, state.reread
        fold.fell_back, fold.spill_keys, fold.spill_ok = state.fell_back, state.spill_keys, state.spill_ok
        if state.spill is not None:
            fold.spill = Spill.adopt(state.spill, state.extract)
        return fold

    def add(self, chunk: ScoringChunk) -> None:
        if self.finished:
            raise RuntimeError("a finished fold takes no more chunks")
        if not chunk.examples:
            return
        parsed = (score_chunk(self.scoring, chunk, self.options, self.prefix) if self.samplewise
                  else parse_chunk(self.scoring, chunk, self.prefix))
        if self.first is None:
            self.first = (chunk, parsed)
        self.tally.add(chunk, parsed)
        if parsed.sheet is not None:
            try:
                self.sums.add(len(chunk.examples), parsed.sheet)
            except NotSamplewise as problem:
                self._fall_back(problem)
        if self.reread:
            return
        if not self.samplewise or self.source is None:
            self.held.append((chunk, parsed))
        elif self.spill is not None:
            self._spill(chunk, parsed)

    def _fall_back(self, problem: NotSamplewise) -> None:
        if os.environ.get("EVALPIPE_STRICT_AGGREGATIONS"):
            raise AssertionError(f"task {self.spec.name} ({self.compat or 'default'}) is declared samplewise, "
                                 f"but {problem}") from problem
        log.warning("task %s (%s) is declared samplewise, but %s: scored as a whole", self.spec.name,
                    self.compat or "default", problem)
        self.samplewise = False
        self.fell_back = str(problem)
        self._drop_spill()
        if self.source is not None:  # the chunks folded so far are read again, and parsed, by finish
            self.held, self.reread = [], True

    def _spill(self, chunk: ScoringChunk, scored: ScoredChunk) -> None:
        """A chunk's records written as the lines ``samples.jsonl`` will hold, while it is at hand."""
        assert self.spill is not None
        if not self.spill_ok:
            return
        if scored.sheet is None:  # no answered sample: its records carry no parts, whatever the keys
            keys = self.spill_keys or frozenset()
        else:
            keys = parts_read(scored.sheet.corpus, scored.sheet.aggregations)
            self.spill_keys = keys if self.spill_keys is None else self.spill_keys
        if keys != (self.spill_keys or frozenset()):  # a label first seen here (macro F1): made again
            self.spill_ok = False
        else:
            self.spill.write([record_line(r) for r in records_of(self.spec.name, chunk, scored, keys)])

    def _drop_spill(self) -> None:
        if self.spill is not None:
            self.spill.drop()
            self.spill = None

    def abort(self) -> None:
        """Give up the fold (an error while reading the chunks): its scratch file goes."""
        self._drop_spill()

    def finish(self) -> TaskOutcome:
        if self.finished:
            raise RuntimeError("a task's fold is finished once")
        self.finished = True
        try:
            if self.samplewise and self.tally.n:
                return self._finish_samplewise()
            return self._finish_corpus()
        finally:
            self._drop_spill()

    # ---------------------------------------------------------------- the two valuations

    def _finish_samplewise(self) -> TaskOutcome:
        tally, sums = self.tally, self.sums
        coverage = tally.coverage()
        if tally.answered:
            metrics = sums.metrics(tally.answered)
            metrics["parse_failure_rate"] = tally.parse_failures / tally.answered
            declared: dict[str, Aggregation] = {**sums.aggregations, **RUNNER_AGGREGATIONS}
            fixed, notes = sums.fixed, sums.notes
        else:  # nothing answered: learn the metrics' names from the first chunk (see score_answered)
            first, parsed = self.first if self.first is not None else self._first_again()
            names = score_answered(self.scoring, first.examples, parsed.predictions, parsed.answered, self.options)
            metrics = dict.fromkeys([*names.corpus, "parse_failure_rate"], None)
            declared, fixed, notes = {}, dict(names.fixed), dict(names.notes)
        metrics.update(_coverage_metrics(coverage))
        aggregations = {m: a for m, a in declared.items() if m in metrics}
        keys_read = _keys_read(aggregations)
        records: Sequence[dict[str, Any]]
        if self.source is None:
            records = _held_records(self.spec.name, self.held, keys_read)
        else:
            records = ChunkedRecords(task=self.spec.name, scoring=self.scoring, chunks=self.source,
                                     options=self.options, answer_prefix=self.prefix, parts_read=keys_read,
                                     n=tally.n)
            spill = self.spill
            if spill is not None and self.spill_ok and self.spill_keys == keys_read:
                spill.handle.close()
                records = replace(records, spill=spill.path, extract=spill.finish_taking())
                spill.taken = None  # the records own it now
                weakref.finalize(records, spill.path.unlink, missing_ok=True)
                self.spill = None  # the records own it now (finish drops any other)
        return self._outcome(metrics, aggregations, {}, fixed, notes, records)

    def _first_again(self) -> tuple[ScoringChunk, ScoredChunk]:
        """The first chunk parsed again from the source (a fold resumed from a state holds none)."""
        assert self.source is not None
        chunk = next(c for c in self.source() if c.examples)
        return chunk, parse_chunk(self.scoring, chunk, self.prefix)

    def _finish_corpus(self) -> TaskOutcome:
        held = self.held
        if self.reread:  # fell back from samplewise: the chunks read and parsed again
            assert self.source is not None
            held = [(c, parse_chunk(self.scoring, c, self.prefix)) for c in self.source() if c.examples]
        examples = _joined([c.examples for c, _ in held])
        predictions: list[Prediction] = _joined([p.predictions for _, p in held])
        answered: list[bool] = _joined([p.answered for _, p in held])
        failed: list[bool] = _joined([p.failed for _, p in held])
        coverage = self.tally.coverage()
        sheet = score_answered(self.scoring, examples, predictions, answered, self.options)
        metrics: dict[str, float | None]
        if coverage.answered:
            metrics = {k: float(v) for k, v in sheet.corpus.items()}
            metrics["parse_failure_rate"] = self.tally.parse_failures / coverage.answered
        else:
            metrics = dict.fromkeys([*sheet.corpus, "parse_failure_rate"], None)
        metrics.update(_coverage_metrics(coverage))
        task_parts = spread(sheet.sample_parts(), answered, {}) if coverage.answered else [{}] * len(examples)
        parts = [SampleParts(row, ok, bad) for row, ok, bad in zip(task_parts, answered, failed)]
        declared: dict[str, Aggregation] = {**sheet.aggregations, **RUNNER_AGGREGATIONS} if coverage.answered else {}
        problems = _check(metrics, sheet, parts, answered) if coverage.answered else {}
        if problems and os.environ.get("EVALPIPE_STRICT_AGGREGATIONS"):
            # the test suite runs strict: a task whose declarations disagree with its scorer is a bug
            raise AssertionError(f"task {self.spec.name} ({self.compat or 'default'}): {problems}")
        aggregations = {m: a for m, a in declared.items() if m in metrics and m not in problems}
        keys_read = _keys_read(aggregations)
        per_sample = spread(sheet.per_sample, answered, {}) if coverage.answered else [{} for _ in answered]
        records = SampleRecords(
            task=self.spec.name, examples=examples, keys=_joined([c.keys for c, _ in held]),
            answers=_joined([c.answers for c, _ in held]), predictions=predictions, answered=answered,
            per_sample=per_sample, parts=parts, parts_read=keys_read,
            truncated=_joined([c.cut_tokens() for c, _ in held]))
        no_interval = {m: f"its declared aggregation does not reproduce it: {why}" for m, why in problems.items()}
        return self._outcome(metrics, aggregations, no_interval, dict(sheet.fixed), dict(sheet.notes), records)

    def _outcome(self, metrics: dict[str, float | None], aggregations: Mapping[str, Aggregation],
                 no_interval: dict[str, str], fixed: Mapping[str, str], notes: Mapping[str, str],
                 records: Sequence[dict[str, Any]]) -> TaskOutcome:
        """Metrics, summary and records, the same for both valuations."""
        tally = self.tally
        coverage = tally.coverage()
        no_interval.update({m: why for m, why in {**FIXED_METRICS, **fixed}.items() if m in metrics})
        for metric in metrics:
            if metric not in aggregations and metric not in no_interval:
                no_interval[metric] = ("not computed: " + coverage.not_computed_reason() if not coverage.answered
                                       else "the task declares no aggregation for it")
        latencies = sorted(tally.latencies)
        summary = TaskSummary(
            scoring=self.compat or "default",
            diagnostics=tally.diagnostics,
            parse_failures=tally.parse_failures,
            prompt_tokens=tally.prompt_tokens,
            completion_tokens=tally.completion_tokens,
            latency_s={f"p{q}": _percentile(latencies, q) for q in (50, 90, 99)},
            error_kinds=dict(coverage.unanswered),
            not_computed=_not_computed(notes, metrics, coverage),
            truncated_share=tally.truncated_samples / tally.n if tally.n else 0.0,
            truncated_tokens=tally.truncated_tokens,
            aggregations={m: a.to_json() for m, a in aggregations.items()},
            no_interval=no_interval,
            coverage=coverage.to_json(),
            valuation=self._valuation(),
        )
        return TaskOutcome(name=self.spec.name, metrics=metrics, summary=summary, records=records)


    def _valuation(self) -> dict[str, str]:
        if self.fell_back is not None:
            return {"path": "whole corpus", "why": f"declared samplewise, but {self.fell_back}"}
        return self.scoring.valuation()


def _joined(parts: list[Sequence[Any]]) -> list[Any]:
    """Sequences joined (one chunk's is returned as a list without a second copy where it is one)."""
    if len(parts) == 1 and isinstance(parts[0], list):
        return parts[0]
    return [x for part in parts for x in part]


def _held_records(task: str, held: list[tuple[ScoringChunk, ScoredChunk]], keys: frozenset[str]) -> SampleRecords:
    """The records of a samplewise task's held chunks: one :class:`SampleRecords` over them all."""
    chunks = [records_of(task, c, s, keys) for c, s in held]
    if len(chunks) == 1:
        return chunks[0]
    return SampleRecords(
        task=task, examples=_joined([r.examples for r in chunks]), keys=_joined([r.keys for r in chunks]),
        answers=_joined([r.answers for r in chunks]), predictions=_joined([r.predictions for r in chunks]),
        answered=_joined([r.answered for r in chunks]), per_sample=_joined([r.per_sample for r in chunks]),
        parts=_joined([r.parts for r in chunks]), parts_read=keys, truncated=_joined([r.truncated for r in chunks]))


def _check(metrics: Mapping[str, float | None], sheet: ScoreSheet, parts: Sequence[SampleParts],
           answered: Sequence[bool]) -> dict[str, str]:
    """The declared aggregations checked against the scorer's values: the scorer's on the answered
    samples' parts (what it scored), the runner's on every sample's."""
    answered_parts = [p for p, ok in zip(parts, answered) if ok]
    values = {k: v for k, v in metrics.items() if v is not None}
    return {**check_reproduces(values, sheet.aggregations, answered_parts),
            **check_reproduces(values, RUNNER_AGGREGATIONS, parts)}


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


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]

