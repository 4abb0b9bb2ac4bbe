"""A run as the report sees it: only its directory — config, metrics, summary and samples.

Nothing here reads a data file, imports a task, or re-parses an answer: the numbers are the run's
own (``metrics.json``), each sample's per-sample ``parts`` (``samples.jsonl``) and each metric's
declared aggregation (``summary.json``) are all that intervals and comparisons need, and what the
report says about a task (its kind, metric order, headline metric, description) was recorded in
``config.json`` when the run was made. So a report is the same on another machine, after the data
was deleted, and for a user's own task file the report has never heard of.

A run with prompt conditions (``run --prompt-variants`` …) is read as its tasks' *reference*
conditions — the canonical prompt, the numbers of metrics.json — by every part of the report; the
other conditions' records and ``variants.json`` are kept beside them for the robustness section
(:mod:`evalpipe.report.variants`).

A run written before per-sample parts existed still reports its numbers; its metrics get no
interval, and the report says why and how to add them (``evalpipe score RUN``).

Memory: the records are read once and held *lean* (:mod:`evalpipe.report.reading`): each is
whole only while it streams in, long enough for what is taken of it then (:class:`_WhileWhole`:
span outcomes, the frame's values, the answer's digest, the sample browser's texts — those in a
temporary file, ``ReportRun.spool``, :mod:`evalpipe.report.browser_spool`); then only the fields
the readers of every record use are held. The few readers of a few records' other fields (NER,
disagreement and judge examples) read the record's line of ``samples.jsonl`` again
(:meth:`ReportRun.full_records`, :class:`~evalpipe.report.reading.RecordLines`). What repeats
from record to record is kept once (:class:`~evalpipe.report.sharing._Sharing`), and the garbage
collector is paused while they are read (hundreds of thousands of new containers would make it
walk them all again and again, for nothing: records hold no cycles). ``ReportRun.samples`` is a
frame of only the columns the report reads (:data:`FRAME_COLUMNS`); ``report --parquet`` reads
the records again for the whole frame (:func:`full_samples_frame`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from array import array

from evalpipe.config import scoring_method
from evalpipe.frames import run_identity, samples_frame
from evalpipe.heap import collector_paused, frozen_heap
from evalpipe.metrics import calibration as _calibration  # noqa: F401 (registers its aggregation kinds)
from evalpipe.metrics.aggregation import Aggregation, aggregation_from_json
from evalpipe.report.bootstrap import ResampleTask
from evalpipe.report.browser_spool import BrowserSpool, Spans
from evalpipe.report.frame import FrameValues, answer_digest, report_frame
from evalpipe.report import read_beside
from evalpipe.report.reading import (LEAN_FIELDS, ON_DEMAND_FIELDS, UNREAD_FIELDS, RecordLines, line_starts, paired,
                                     read_held, read_records)
from evalpipe.report.sharing import SHARED_CHARS, SHARING_TRIAL, OutcomeSharing, _Sharing  # noqa: F401 (re-exported)
from evalpipe.report.ner_errors import SampleOutcomes, classify, is_span_kind, record_spans
from evalpipe.results import RunDir, RunSummary, TaskSummary
from evalpipe.variants.robustness import plain_metrics

__all__ = ["FRAME_COLUMNS", "LEAN_FIELDS", "ON_DEMAND_FIELDS", "UNREAD_FIELDS", "RUNNER_METRICS", "RecordLines", "ReportRun", "RunHead", "TaskInfo",
           "full_samples_frame", "load_report_runs", "resample_task", "run_heads"]

#: metrics the runner adds to every task (bookkeeping: the operations table shows them)
RUNNER_METRICS = frozenset({"n", "errors", "parse_failure_rate", "answered", "coverage"})


@dataclass(frozen=True)
class TaskInfo:
    """What the run recorded about a task for readers (``config.json`` ``tasks``)."""

    name: str
    #: metric names in display order (``*`` patterns allowed, e.g. ``bertscore[*]_f1``)
    metrics: tuple[str, ...] = ()
    primary_metric: str | None = None
    description: str = ""
    #: metric name or ``*`` pattern → the task's one-line definition of it (``TaskSpec.metric_definitions``)
    metric_definitions: Mapping[str, str] = field(default_factory=dict)
    #: the task's kind (``TaskSpec.kind``, e.g. ``span_ner``); None for a run written before kinds were recorded
    kind: str | None = None

    @classmethod
    def from_config(cls, name: str, record: Mapping[str, Any]) -> TaskInfo:
        kind = record.get("kind")
        return cls(name=name, metrics=tuple(record.get("metrics") or ()),
                   primary_metric=record.get("primary_metric"), description=str(record.get("description") or ""),
                   metric_definitions=dict(record.get("metric_definitions") or {}),
                   kind=str(kind) if kind else None)


@dataclass
class ReportRun:
    """One run directory, read once for every part of the report."""

    path: Path
    #: unique display name (the model, or model [run directory] when two runs share a model)
    label: str
    model: str
    compat: str | None
    config: dict[str, Any]
    tasks: tuple[str, ...]
    metrics: dict[str, dict[str, float]]
    summary: RunSummary | None
    #: the samples as a frame of the columns the report reads (:data:`FRAME_COLUMNS` and ``score.*``)
    samples: pd.DataFrame
    #: the samples as written, slim: without :data:`ON_DEMAND_FIELDS` when ``lines`` can read them
    #: again (:meth:`full_record`, :meth:`full_records`)
    records: list[dict[str, Any]] = field(default_factory=list, repr=False)
    #: task → what bootstrap and comparison resample
    resample: dict[str, ResampleTask] = field(default_factory=dict)
    info: dict[str, TaskInfo] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: prompt conditions: task → its variants.json entry, and task → condition id → sample records
    #: (the reference condition's records are also ``records``)
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    condition_records: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict, repr=False)
    #: where each slim record's line is (None: the records are held whole)
    lines: RecordLines | None = field(default=None, repr=False)
    #: what the sample browser shows of each reference record beyond its slim fields, made as it was read
    spool: BrowserSpool | None = field(default=None, repr=False)
    #: the frame's values of each of ``records``, taken while it was whole (None: made from the records)
    frame_values: FrameValues | None = field(default=None, repr=False)
    #: :func:`~evalpipe.report.frame.answer_digest` of each of ``records``' answers, taken while it was
    #: whole (None: the records hold their answers)
    digests: list[bytes | None] | None = field(default=None, repr=False)

    _task_records: dict[str, list[dict[str, Any]]] = field(default_factory=dict, init=False, repr=False)
    _outcomes: dict[str, list[SampleOutcomes] | None] = field(default_factory=dict, init=False, repr=False)

    def task_records(self, task: str) -> list[dict[str, Any]]:
        """The records of one task (its reference condition), in order; gathered once."""
        if not self._task_records:
            for record in self.records:
                self._task_records.setdefault(str(record.get("task")), []).append(record)
        return self._task_records.get(task, [])

    def span_outcomes(self, task: str) -> list[SampleOutcomes] | None:
        """Each record's classified entities (:func:`~evalpipe.report.ner_errors.sample_outcomes`) for a
        span task, else None. A span task is one whose recorded kind is ``span_ner`` (and whose records
        read as spans); a run written before kinds were recorded falls back to the shape test
        (:func:`~evalpipe.report.ner_errors.is_span_task`: every gold and prediction reads as spans).

        Computed once: the sample browser and the NER error analysis both need them."""
        if task not in self._outcomes:
            info = self.info.get(task)
            kind = info.kind if info is not None else None
            self._outcomes[task] = (_span_outcomes(self.full_records(self.task_records(task)))
                                    if is_span_kind(kind) is not False else None)
        return self._outcomes[task]

    def full_record(self, record: Mapping[str, Any]) -> Mapping[str, Any]:
        """``record`` (one of this run's) with every field, as samples.jsonl holds it (one read)."""
        if self.lines is None:
            return record
        with self.lines.reader() as full:
            return full(record)

    def full_records(self, records: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
        """Each of ``records`` (this run's) whole, one at a time, the file opened once."""
        if self.lines is None:
            yield from records
            return
        with self.lines.reader() as full:
            for record in records:
                yield full(record)

    @contextmanager
    def reader(self) -> Iterator[Callable[[Mapping[str, Any]], Mapping[str, Any]]]:
        """A function that gives one of this run's records whole, while the block lasts (the file open)."""
        if self.lines is None:
            yield lambda record: record
            return
        with self.lines.reader() as full:
            yield full

    def answer_digests(self) -> list[bytes | None]:
        """Each of ``records``' :func:`~evalpipe.report.frame.answer_digest`, in order: what tells two
        answers apart without holding their texts (a comparison's disagreements)."""
        if self.digests is not None:
            return self.digests
        return [answer_digest(record.get("answer")) for record in self.records]

    @property
    def aggregates(self) -> dict[str, dict[str, float]]:
        """Suite aggregates in metrics.json (keys that are not evaluated tasks)."""
        return {k: v for k, v in self.metrics.items() if k not in self.tasks}

    def task_summary(self, task: str) -> TaskSummary:
        return self.summary.tasks.get(task, TaskSummary()) if self.summary is not None else TaskSummary()


def _span_outcomes(records: Iterable[Mapping[str, Any]]) -> list[SampleOutcomes] | None:
    """``[sample_outcomes(r) for r in records] if is_span_task(records) else None``, each record's
    spans read once instead of twice."""
    outcomes: list[SampleOutcomes] = []
    shared = OutcomeSharing()
    for record in records:
        spans = record_spans(record)
        if spans is None:
            return None
        outcomes.append(shared.sample(classify(*spans)))
    return outcomes or None


def _aggregations(summary: TaskSummary, notes: list[str], task: str) -> dict[str, Aggregation]:
    out = {}
    for metric, spec in summary.aggregations.items():
        try:
            out[metric] = aggregation_from_json(spec)
        except (ValueError, TypeError) as exc:
            notes.append(f"{task}: {metric}: aggregation not readable ({exc}); no interval")
    return out


def _keys(aggregations: Mapping[str, Aggregation]) -> tuple[str, ...]:
    """The parts a task's aggregations read, in the parts matrix's column order."""
    return tuple(sorted({k for a in aggregations.values() for k in a.keys()}))


#: the types of a part that :func:`_number` takes as it is (a bool, a string, a missing part: 0)
_PLAIN_NUMBERS = frozenset({int, float})


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class TaskParts:
    """A task's answered samples' ids and parts, taken as its records stream in, so that the
    records need not hold their ``parts`` (a dict per record, mostly distinct: at 94,000 NCBI
    samples ~20 MB): what :func:`resample_task` makes its matrix of, in the order given."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self._zeros = (0.0,) * len(keys)
        self.ids: list[str] = []
        self.values = array("d")
        #: records seen (answered or not), and whether an answered one had parts at all
        self.records = 0
        self.with_parts = False

    def add(self, record: Mapping[str, Any]) -> None:
        self.records += 1
        if record.get("error") is not None:
            return
        self.ids.append(str(record.get("id")))
        parts = record.get("parts")
        if "parts" in record:
            self.with_parts = True
        found = parts if type(parts) is dict or isinstance(parts, Mapping) else {}
        values = list(map(found.get, self.keys, self._zeros))  # a part the record lacks: 0.0
        if _PLAIN_NUMBERS.issuperset(map(type, values)):  # every part an int or a float: as they are
            self.values.extend(values)
        else:
            self.values.extend(0.0 if (v := _number(value)) is None else v for value in values)

    def extend(self, later: TaskParts) -> None:
        """The parts of the records after these (taken by another process), added in order."""
        if later.keys != self.keys:
            raise ValueError(f"parts of {later.keys} for {self.keys}")
        self.ids.extend(later.ids)
        self.values.extend(later.values)
        self.records += later.records
        self.with_parts = self.with_parts or later.with_parts

    def matrix(self) -> np.ndarray:
        return np.array(self.values, dtype=float).reshape(len(self.ids), len(self.keys))


def resample_task(task: str, records: Sequence[Mapping[str, Any]], corpus: Mapping[str, Any],
                  summary: TaskSummary, notes: list[str], taken: TaskParts | None = None) -> ResampleTask:
    """The task's *answered* samples as a parts matrix with its declared aggregations (see bootstrap);
    from ``taken`` where the records' parts were taken as they were read (they then hold none).

    A sample without an answer (its record's ``error`` is set) is left out: the task's metrics are
    measured on the answered samples only (:mod:`evalpipe.coverage`), so its intervals and
    comparisons resample those. A run written before that policy (no ``coverage`` in its summary)
    with failed requests has point estimates that counted them: it is said so, and re-scoring
    (``evalpipe score RUN``) applies the policy."""
    aggregations = _aggregations(summary, notes, task)
    keys = _keys(aggregations)
    if taken is None:
        taken = TaskParts(keys)
        for record in records:
            taken.add(record)
    elif taken.keys != keys:
        raise ValueError(f"{task}: parts taken for {taken.keys}, the aggregations read {keys}")
    answered = len(taken.ids)
    if answered < taken.records and not summary.coverage:
        notes.append(f"{task}: written by an older evalpipe that counted the {taken.records - answered} samples "
                     "without an answer in its metrics; `evalpipe score RUN` re-scores it on the answered samples")
    numbers = {k: float(v) for k, v in corpus.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    no_interval = dict(summary.no_interval)
    if answered and not taken.with_parts:
        reason = ("the run was written by an older evalpipe without per-sample parts; "
                  "`evalpipe score RUN` (with the data at hand) adds them")
        aggregations = {}
        no_interval = {m: reason for m in numbers}
    return ResampleTask(name=task, ids=tuple(taken.ids), keys=keys, parts=taken.matrix(),
                        aggregations=aggregations, corpus=numbers, no_interval=no_interval)


def _model_label(identity: Mapping[str, Any]) -> str:
    """The model as the report names a run: with what changes its answers beside the model itself
    (``--structured``, ``--reasoning-effort``), so such a run stands apart from the free-text one."""
    settings = (identity.get("config") or {}).get("config") or {}
    marks = [m for m in ("structured" if settings.get("structured") else None,
                         f"effort {settings['reasoning_effort']}" if settings.get("reasoning_effort") else None) if m]
    return f"{identity['model']} ({', '.join(marks)})" if marks else str(identity["model"])


def _labels(models: Sequence[str], paths: Sequence[Path]) -> list[str]:
    """One label per run, all different (every part of the report keys its runs by label): the
    model, and where two runs share it, as much of the run directory's path as tells them apart
    (``m [run]``, then ``m [results-a/run]`` for two results folders holding a run of one name),
    at worst a number (the same folder given twice)."""
    counts = Counter(models)
    labels = []
    for model, path in zip(models, paths):
        if counts[model] == 1:
            labels.append(model)
            continue
        others = [Path(p).resolve() for m, p in zip(models, paths) if m == model]
        parts = Path(path).resolve().parts
        depth = next((d for d in range(1, len(parts))
                      if sum(o.parts[-d:] == parts[-d:] for o in others) == 1), 1)
        labels.append(f"{model} [{'/'.join(parts[-depth:])}]")
    seen: Counter[str] = Counter()
    unique = []
    for label in labels:
        seen[label] += 1
        unique.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return unique


def _split_conditions(records: list[dict[str, Any]], variants: Mapping[str, Mapping[str, Any]],
                      ) -> tuple[list[dict[str, Any]], dict[str, dict[str, list[dict[str, Any]]]]]:
    """The reference conditions' records (and those of tasks without conditions), and every
    condition's records by task and condition id."""
    references = {task: doc.get("reference") for task, doc in variants.items()}
    kept: list[dict[str, Any]] = []
    by_condition: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for record in records:
        task, condition = str(record.get("task")), record.get("condition")
        if condition is not None and task in references:
            by_condition.setdefault(task, {}).setdefault(str(condition), []).append(record)
            if condition != references[task]:
                continue
        kept.append(record)
    return kept, by_condition


#: the columns of ``ReportRun.samples`` besides the ``score.*`` ones: what the operations table and
#: the score-vs-length plots read (the whole frame, nested values and all, is :func:`full_samples_frame`)
FRAME_COLUMNS = frozenset({"task", "id", "answer_chars", "parse_failed", "error", "latency_s", "prompt_tokens",
                           "completion_tokens", "truncated_tokens", "finish_reason"})


class _SpanReading:
    """Which records of a run are its reference records, and each one's spans as it streams in whole:
    for the tasks that may be span tasks, the gold and predicted entities and their classified
    outcomes — until one of a task's records does not read as spans, after which that task's records
    have none (and the task's outcomes are None, as :func:`_span_outcomes` gives them). Each part of
    a file read (the report's and a child's, :mod:`evalpipe.report.read_beside`) has its own, joined
    in order afterwards (:meth:`join`): a part read from a line in the middle starts afresh, so a
    record after another of its task that did not read as spans may get the NER texts where one
    pass would give it the plain ones — texts no row of that task uses (``SpooledTexts.usable``:
    the task's outcomes are None either way), never different ones."""

    def __init__(self, tasks: Iterable[str], variants: Mapping[str, Mapping[str, Any]]) -> None:
        #: per task, the outcomes of its reference records so far (None: one did not read as spans)
        self.found: dict[str, list[SampleOutcomes] | None] = {task: [] for task in tasks}
        self._references = {task: doc.get("reference") for task, doc in variants.items()}
        self._shared = OutcomeSharing()

    def is_reference(self, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` is of its task's reference condition (every record of a task without conditions)."""
        task, condition = str(record.get("task")), record.get("condition")
        return condition is None or task not in self._references or condition == self._references[task]

    def spans(self, record: Mapping[str, Any]) -> Spans | None:
        """A reference record's spans (None where its task is not, or no longer, read as spans)."""
        task = str(record.get("task"))
        found = self.found.get(task)
        if found is None:
            return None
        spans = record_spans(record)
        if spans is None:
            self.found[task] = None
            return None
        outcome = self._shared.sample(classify(*spans))
        found.append(outcome)
        return (*spans, outcome)

    def join(self, later: Mapping[str, list[SampleOutcomes] | None]) -> None:
        """The ``found`` of the file's next part after this one's: a task that has none in either has none."""
        for task, found in self.found.items():
            more = later.get(task, [])
            self.found[task] = None if found is None or more is None else found + more

    def outcomes(self) -> dict[str, list[SampleOutcomes] | None]:
        return {task: found or None for task, found in self.found.items()}


@dataclass(frozen=True)
class _Taken:
    """What :class:`_WhileWhole` took of a part of a samples file, with the part's held records: what
    a child reading the last lines sends back (:mod:`evalpipe.report.read_beside`), joined after the
    report's own by :meth:`_WhileWhole.join`."""

    records: list[dict[str, Any]]
    frame: dict[str, list[Any]]
    digests: list[bytes | None]
    parts: dict[str, TaskParts]
    found: dict[str, list[SampleOutcomes] | None]


class _WhileWhole:
    """What is taken of each reference record while it streams in whole (see
    :mod:`evalpipe.report.reading`), so the lean records need not be read again for it:

    * the span outcomes (:meth:`ReportRun.span_outcomes`) of the tasks that may be span tasks
      (:class:`_SpanReading`);
    * the frame's values (``frame``, :class:`~evalpipe.report.frame.FrameValues`) and the answer's
      digest (``digests``), in the order of the reference records;
    * the parts (``parts``: :class:`TaskParts` of the tasks given, those without prompt conditions,
      whose every record the robustness section resamples): the held record then has none;
    * the sample browser's texts (``spool``, with the record's spans when it reads as spans), kept
      under the record's line offset (``starts``: those of the lines read, in order).

    A part of the file read by another process (:mod:`evalpipe.report.read_beside`) is taken by its
    own, and joined after this one's (:meth:`taken`, :meth:`join`)."""

    def __init__(self, tasks: Iterable[str], variants: Mapping[str, Mapping[str, Any]],
                 spool: BrowserSpool | None = None, frame: FrameValues | None = None,
                 parts: Mapping[str, TaskParts] | None = None, starts: Sequence[int] = ()) -> None:
        self._reading = _SpanReading(tasks, variants)
        self._spool = spool
        self._starts = starts
        self._seen = 0
        self.frame = frame
        self.digests: list[bytes | None] = []
        self.parts = dict(parts or {})

    def __call__(self, record: Mapping[str, Any], held: dict[str, Any]) -> None:
        self._seen += 1
        if not self._reading.is_reference(record):
            return
        spans = self._reading.spans(record)
        if self._spool is not None and self._seen <= len(self._starts):  # else lines and records do not pair up
            self._spool.add(record, spans, self._starts[self._seen - 1])
        if self.frame is not None:
            self.frame.add(record)
        self.digests.append(answer_digest(record.get("answer")))
        taken = self.parts.get(str(record.get("task")))
        if taken is not None:
            taken.add(record)
            held.pop("parts", None)

    def taken(self, records: list[dict[str, Any]]) -> _Taken:
        """What was taken, with the part's held ``records``: to be joined after another part's (:meth:`join`)."""
        return _Taken(records, self.frame.state() if self.frame is not None else {}, self.digests, self.parts,
                      self._reading.found)

    def join(self, later: _Taken) -> None:
        """What was taken of the file's next part (by another process) after this one's, in order."""
        if self.frame is not None:
            self.frame.extend(later.frame)
        self.digests.extend(later.digests)
        for task, parts in self.parts.items():
            parts.extend(later.parts[task])
        self._reading.join(later.found)

    def outcomes(self) -> dict[str, list[SampleOutcomes] | None]:
        return self._reading.outcomes()


def span_tasks(head: RunHead) -> list[str]:
    """The run's tasks that may be span tasks (whose records :class:`_SpanReading` reads as spans)."""
    return [t for t in head.tasks if is_span_kind(head.infos[t].kind) is not False]


class _RunReading:
    """One run's samples file being read: by the report alone, or its lines before ``split`` by the
    report and the rest by a child (:mod:`evalpipe.report.read_beside`)."""

    def __init__(self, head: RunHead, compat: str | None, make_spool: bool) -> None:
        self.head, self.compat, self.make_spool = head, compat, make_spool
        self.run_dir = RunDir(head.path)
        self.summary = self.run_dir.read_summary(compat)
        task_summaries = self.summary.tasks if self.summary is not None else {}
        #: the parts each task's aggregations read (the tasks without prompt conditions)
        self.keys = {t: _keys(_aggregations(task_summaries.get(t, TaskSummary()), [], t))
                     for t in head.tasks if t not in head.variants}
        self.starts = line_starts(head.samples_path)
        #: the first line the child reads (all lines read here: no child)
        self.split = len(self.starts)

    def _taking(self, starts: Sequence[int], spool: BrowserSpool | None) -> _WhileWhole:
        return _WhileWhole(span_tasks(self.head), self.head.variants, spool, FrameValues(FRAME_COLUMNS),
                           {t: TaskParts(k) for t, k in self.keys.items()}, starts)

    def read_first(self) -> tuple[list[dict[str, Any]], _WhileWhole, BrowserSpool | None]:
        """The held records of the lines before ``split``, what was taken of them, and their spool."""
        spool = BrowserSpool() if self.make_spool else None
        whole = self._taking(self.starts[:self.split], spool)
        stop = self.starts[self.split] if self.split < len(self.starts) else None
        return read_held(self.run_dir, self.compat, True, whole, stop=stop), whole, spool

    def read_rest(self, spool: BrowserSpool | None) -> _Taken:
        """What is taken of the lines from ``split`` on, with their held records (in the child)."""
        whole = self._taking(self.starts[self.split:], spool)
        if self.split >= len(self.starts):
            return whole.taken([])
        return whole.taken(read_held(self.run_dir, self.compat, True, whole, start=self.starts[self.split]))

    def finish(self, first: tuple[list[dict[str, Any]], _WhileWhole, BrowserSpool | None],
               rest: tuple[_Taken, BrowserSpool | None] | None) -> ReportRun:
        """The run, from its first lines as read here and the rest as the child read them (``rest``;
        None where it did not: the whole file is then read here again, so that an error names its
        line as it would without a child)."""
        records, whole, spool = first
        if self.split < len(self.starts):
            taken, rest_spool = rest if rest is not None else (None, None)
            if taken is None or len(records) != self.split or len(taken.records) != len(self.starts) - self.split:
                for unused in (spool, rest_spool):
                    if unused is not None:
                        unused.close()
                self.split = len(self.starts)
                return self.finish(self.read_first(), None)
            records = records + taken.records
            whole.join(taken)
            if spool is not None:
                spool.rest = rest_spool
            elif rest_spool is not None:
                rest_spool.close()
        records, lines = paired(self.run_dir, self.compat, records, self.starts)
        if spool is not None and lines is None:
            spool.close()
            spool = None
        elif spool is not None and lines is not None:
            spool.pack()
            spool.key = lines.offset
            if spool.rest is not None:
                spool.rest.key = lines.offset
        return self._run(records, lines, whole, spool)

    def _run(self, read: list[dict[str, Any]], lines: RecordLines | None, whole: _WhileWhole,
             spool: BrowserSpool | None) -> ReportRun:
        head, variants, identity = self.head, self.head.variants, self.head.identity
        records, by_condition = _split_conditions(read, variants)
        metrics = self.run_dir.read_metrics(self.compat)
        run = ReportRun(
            path=head.path, label=head.label, model=identity["model"], compat=self.compat, config=identity["config"],
            tasks=head.tasks, info=dict(head.infos),
            # the spread numbers are the robustness section's; every other part reads the reference's metrics
            metrics={t: plain_metrics(v) if t in variants else v for t, v in metrics.items()},
            summary=self.summary,
            samples=pd.DataFrame(),  # made by load_report_runs
            records=records, variants=variants, condition_records=by_condition, lines=lines, spool=spool,
            # else the records were read again, whole: they hold what these were taken from
            frame_values=whole.frame if lines is not None else None,
            digests=whole.digests if lines is not None else None,
        )
        by_task: dict[str, list[dict[str, Any]]] = {}
        for record in records:
            by_task.setdefault(str(record.get("task")), []).append(record)
        if lines is not None:  # else the records are whole: span_outcomes classifies them when asked
            run._outcomes.update(whole.outcomes())
        for task in run.tasks:
            run.resample[task] = resample_task(task, by_task.get(task, []), run.metrics.get(task, {}),
                                               run.task_summary(task), run.notes,
                                               whole.parts.get(task) if lines is not None else None)
        return run


def full_samples_frame(run: ReportRun) -> pd.DataFrame:
    """Every column of :func:`evalpipe.frames.samples_frame` for the run's samples (its reference
    conditions, as ``ReportRun.samples``), read again from the run directory: ``report --parquet``."""
    run_dir = RunDir(run.path)
    records = _split_conditions(read_records(run_dir, run.compat)[0], run.variants)[0]
    return samples_frame(records, run_identity(run.path), run.compat)


def load_report_runs(paths: Sequence[Path], compat: str | None = None) -> list[ReportRun]:
    """Read every run directory; raises FileNotFoundError naming the first missing file.

    The records are read with the collector paused (see the module docstring); each run's frame
    (``ReportRun.samples``, :func:`~evalpipe.report.frame.report_frame`) is made afterwards, with
    the records frozen out of the collector's sight instead, so what pandas leaves as it builds a
    frame is collected as usual."""
    runs = read_report_runs(paths, compat)
    with frozen_heap():
        add_report_frames(runs, compat)
    return runs


def read_report_runs(paths: Sequence[Path], compat: str | None = None, *, spool: bool = True,
                     heads: Sequence[RunHead] | None = None) -> list[ReportRun]:
    """:func:`load_report_runs` but for each run's frame (``ReportRun.samples`` left empty): for a
    report that starts work beside it first (:mod:`evalpipe.report.browser_beside`).

    ``spool``: make the sample browser's texts of each record as it is read (``ReportRun.spool``);
    False for a report whose browser is made otherwise. ``heads``: :func:`run_heads` of ``paths``,
    when already read."""
    heads = run_heads(paths, compat) if heads is None else heads
    with collector_paused():
        return _load_report_runs(heads, compat, spool)


def add_report_frames(runs: Sequence[ReportRun], compat: str | None = None) -> None:
    """Each run's ``samples`` frame (:func:`~evalpipe.report.frame.report_frame`), made from its records."""
    for run in runs:
        run.samples = report_frame(run.records, run_identity(run.path), compat, FRAME_COLUMNS, run.frame_values)
        run.frame_values = None  # made once: the values are the frame's now


@dataclass(frozen=True)
class RunHead:
    """What a run directory says of itself before its samples are read: enough to label it, to
    know its tasks and conditions, and to check that it has samples (:func:`run_heads`)."""

    path: Path
    label: str
    identity: Mapping[str, Any]
    tasks: tuple[str, ...]
    infos: Mapping[str, TaskInfo]
    variants: dict[str, dict[str, Any]]
    samples_path: Path


def run_heads(paths: Sequence[Path], compat: str | None = None) -> list[RunHead]:
    """Each run directory's :class:`RunHead`; raises FileNotFoundError naming the first missing file."""
    identities = [run_identity(p) for p in paths]
    # a log-likelihood run is labelled so (a generated run of the same model is another measurement)
    methods = [scoring_method(i["config"].get("config", {})) for i in identities]
    labels = _labels([_model_label(i) if m == "generated" else f"{_model_label(i)} [{m}]"
                      for i, m in zip(identities, methods)], [Path(p) for p in paths])
    heads = []
    for path, identity, label in zip(paths, identities, labels):
        run_dir = RunDir(path)
        samples_path = run_dir.samples_path(compat)
        if not samples_path.is_file():
            hint = f" --compat {compat}" if compat else ""
            raise FileNotFoundError(f"{samples_path}: no samples (run `evalpipe score {run_dir.path}{hint}` first)")
        config = identity["config"]
        recorded_tasks = config.get("tasks") or {}
        tasks = tuple(config.get("config", {}).get("tasks", []))
        infos = {task: TaskInfo.from_config(task, recorded_tasks.get(task) or {}) for task in tasks}
        heads.append(RunHead(path=Path(path), label=label, identity=identity, tasks=tasks, infos=infos,
                             variants=run_dir.read_variants(compat), samples_path=samples_path))
    return heads


def _load_report_runs(heads: Sequence[RunHead], compat: str | None, make_spool: bool = True) -> list[ReportRun]:
    # the runs' last lines read by a child beside this reading where a fork is wanted (read_beside)
    readings = [_RunReading(head, compat, make_spool) for head in heads]
    beside = None
    if read_beside.wanted(sum(head.samples_path.stat().st_size for head in heads)):
        for reading in readings:
            reading.split = read_beside.first_child_line(len(reading.starts))
        beside = read_beside.start([reading.read_rest for reading in readings], make_spool)
        if beside is None:  # no fork to be had: read alone
            for reading in readings:
                reading.split = len(reading.starts)
    try:
        firsts = [reading.read_first() for reading in readings]
        rests = beside.results() if beside is not None else [None] * len(readings)
        return [reading.finish(first, rest) for reading, first, rest in zip(readings, firsts, rests)]
    finally:
        if beside is not None:
            beside.close()
