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
whole only while it streams in, long enough for what is taken of it then (:class:`WhileWhole`:
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

Where the run wrote its extract (:mod:`evalpipe.report.extract`: what is taken of each record,
taken by the writer of ``samples.jsonl`` with the same code) and it describes the samples file as
it is, the run is read from it instead, and no record is decoded: the same held records, frame
values, digests, parts and outcomes, and the sample browser's texts as the writer wrote them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from evalpipe.config import scoring_method
from evalpipe.frames import run_identity, samples_frame
from evalpipe.heap import collector_paused, frozen_heap, give_back_free_memory
from evalpipe.metrics import calibration as _calibration  # noqa: F401 (registers its aggregation kinds)
from evalpipe.report.bootstrap import ResampleTask
from evalpipe.report.browser_spool import BrowserSpool
from evalpipe.report.frame import FrameValues, answer_digest, report_frame
from evalpipe.report import extract, read_beside
from evalpipe.report.reading import (LEAN_FIELDS, ON_DEMAND_FIELDS, UNREAD_FIELDS, RecordLines, line_starts, paired,
                                     read_held, read_records)
from evalpipe.report.sharing import SHARED_CHARS, SHARING_TRIAL, OutcomeSharing, _Sharing  # noqa: F401 (re-exported)
from evalpipe.report.ner_errors import NerAnalysis, SampleOutcomes, analyse, classify, is_span_kind, record_spans
from evalpipe.report.taking import FRAME_COLUMNS, TaskParts, Taken, WhileWhole, references
from evalpipe.report.taking import aggregations as _aggregations
from evalpipe.report.taking import parts_keys as _keys
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
    digests: Sequence[bytes | None] | None = field(default=None, repr=False)

    _task_records: dict[str, list[dict[str, Any]]] = field(default_factory=dict, init=False, repr=False)
    _outcomes: dict[str, list[SampleOutcomes] | None] = field(default_factory=dict, init=False, repr=False)
    _analyses: dict[tuple[str, int], NerAnalysis | None] = field(default_factory=dict, init=False, repr=False)

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

    def ner_analysis(self, task: str, per_category: int) -> NerAnalysis | None:
        """The NER error analysis of a span task (:func:`~evalpipe.report.ner_errors.analyse`, ``per_category``
        examples of each error), else None. Made once: it reads every record and outcome of the task, and
        a report makes it before its sample browser's child forks (made after, every page it reads
        would be copied: :mod:`evalpipe.report.browser_beside`)."""
        key = (task, per_category)
        if key not in self._analyses:
            outcomes = self.span_outcomes(task) if task in self.tasks else None
            analysis = None
            if outcomes is not None:
                with self.reader() as whole:  # the records an example quotes, read again with their inputs
                    analysis = analyse(task, self.task_records(task), per_category=per_category, outcomes=outcomes,
                                       whole=whole)
            self._analyses[key] = analysis
        return self._analyses[key]

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

    def answer_digests(self) -> Sequence[bytes | None]:
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


def span_tasks(head: RunHead) -> list[str]:
    """The run's tasks that may be span tasks (whose records :class:`SpanReading` reads as spans)."""
    return [t for t in head.tasks if is_span_kind(head.infos[t].kind) is not False]


class _RunReading:
    """One run's samples file being read: from its extract (every line's taking as its writer took it,
    :mod:`evalpipe.report.extract`), by the report alone, or its lines before ``split`` by the report
    and the rest by a child (:mod:`evalpipe.report.read_beside`)."""

    def __init__(self, head: RunHead, compat: str | None, make_spool: bool) -> None:
        self.head, self.compat, self.make_spool = head, compat, make_spool
        self.run_dir = RunDir(head.path)
        self.summary = self.run_dir.read_summary(compat)
        task_summaries = self.summary.tasks if self.summary is not None else {}
        #: the parts each task's aggregations read (the tasks without prompt conditions)
        self.keys = {t: _keys(_aggregations(task_summaries.get(t, TaskSummary()), [], t))
                     for t in head.tasks if t not in head.variants}
        #: what the run's writer took of its lines, where its extract is usable (evalpipe.report.extract):
        #: then no line is read here
        self.extract = extract.load(head.samples_path, span_tasks(head),
                                references(head.variants), self.keys, make_spool)
        self.starts = self.extract.starts if self.extract is not None else line_starts(head.samples_path)
        #: the first line the child (or the extract) gives (all lines read here: neither)
        self.split = 0 if self.extract is not None else len(self.starts)

    def _taking(self, starts: Sequence[int], spool: BrowserSpool | None) -> WhileWhole:
        return WhileWhole(span_tasks(self.head), self.head.variants, spool, FrameValues(FRAME_COLUMNS),
                           {t: TaskParts(k) for t, k in self.keys.items()}, starts)

    def read_first(self) -> tuple[list[dict[str, Any]], WhileWhole, BrowserSpool | None]:
        """The held records of the lines before ``split``, what was taken of them, and their spool."""
        if self.split == 0 and self.starts:  # every line the child's or the extract's: none read here
            return [], self._taking((), None), None
        spool = BrowserSpool() if self.make_spool else None
        whole = self._taking(self.starts[:self.split], spool)
        stop = self.starts[self.split] if self.split < len(self.starts) else None
        return read_held(self.run_dir, self.compat, True, whole, stop=stop), whole, spool

    def read_rest(self, spool: BrowserSpool | None) -> Taken:
        """What is taken of the lines from ``split`` on, with their held records (in the child)."""
        whole = self._taking(self.starts[self.split:], spool)
        if self.split >= len(self.starts):
            return whole.taken([])
        return whole.taken(read_held(self.run_dir, self.compat, True, whole, start=self.starts[self.split]))

    def finish(self, first: tuple[list[dict[str, Any]], WhileWhole, BrowserSpool | None],
               rest: tuple[Taken, BrowserSpool | None] | None) -> ReportRun:
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
            if spool is None:  # no line read here: the rest's spool is the run's
                spool = rest_spool
            else:
                spool.rest = rest_spool
        elif rest is not None and rest[1] is not None:  # no line at all: an extract's empty spool
            rest[1].close()
        records, lines = paired(self.run_dir, self.compat, records, self.starts)
        if spool is not None and lines is None:
            spool.close()
            spool = None
        elif spool is not None and lines is not None:
            spool.pack()
            link: BrowserSpool | None = spool
            while link is not None:  # the child's spool, or an extract's one per segment
                link.key = lines.offset
                link = link.rest
        return self._run(records, lines, whole, spool)

    def _run(self, read: list[dict[str, Any]], lines: RecordLines | None, whole: WhileWhole,
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
        runs = _load_report_runs(heads, compat, spool)
    give_back_free_memory()
    return runs


def add_report_frames(runs: Sequence[ReportRun], compat: str | None = None) -> None:
    """Each run's ``samples`` frame (:func:`~evalpipe.report.frame.report_frame`), made from its records."""
    for run in runs:
        run.samples = report_frame(run.records, run_identity(run.path), compat, FRAME_COLUMNS, run.frame_values)
        run.frame_values = None  # made once: the values are the frame's now
    give_back_free_memory()


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
    # a run with a usable extract is read from it; the others' last lines by a child beside this reading
    # where a fork is wanted (read_beside)
    unread = [reading for reading in readings if reading.extract is None]
    beside = None
    if unread and read_beside.wanted(sum(reading.head.samples_path.stat().st_size for reading in unread)):
        for reading in unread:
            reading.split = read_beside.first_child_line(len(reading.starts))
        beside = read_beside.start([reading.read_rest for reading in unread], make_spool)
        if beside is None:  # no fork to be had: read alone
            for reading in unread:
                reading.split = len(reading.starts)
    try:
        firsts = [reading.read_first() for reading in readings]
        from_child = iter(beside.results() if beside is not None else [None] * len(unread))
        rests = [(reading.extract.taken, reading.extract.spool) if reading.extract is not None else next(from_child)
                 for reading in readings]
        return [reading.finish(first, rest) for reading, first, rest in zip(readings, firsts, rests)]
    finally:
        if beside is not None:
            beside.close()
