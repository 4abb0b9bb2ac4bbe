"""The report's runs as the sample browser's data: every answer behind the numbers, with its outcome.

:mod:`evalpipe.report.browser` shows and filters; this module decides what each row says, from the
sample records of the run directories (``ReportRun.records``) and nothing else:

* **outcomes** of one sample in one run (the browser's ``outcome`` filter):

  - ``parse_failure`` when the answer could not be parsed, ``error`` when the request failed for good
    (any task);
  - NER (a task recorded as kind ``span_ner`` whose records read as spans; for a run written before
    kinds were recorded, one whose gold and predictions read as spans, :meth:`ReportRun.span_outcomes`):
    the categories of its entities, :func:`~evalpipe.report.ner_errors.sample_outcomes` — ``correct``,
    ``type``, ``boundary``, ``boundary+type``, ``missed`` (gold), ``spurious`` (predicted); each entity is
    listed with its category and offsets, so the page marks it in the sentence;
  - ``correct`` / ``incorrect`` for a task whose primary metric is a *0/1 mean*: declared as the mean
    of a per-sample value (``Mean`` aggregation) that is 0 or 1 on every sample of every run — else its
    ``accuracy``, if that is one (a classification task whose primary metric is macro F1). Other
    metrics are not used even when their values happen to be 0/1 (a ROUGE of a tiny run). A sample
    whose value is undefined (None) gets neither;
  - nothing else for other tasks (ROUGE, BLEU …: the per-sample scores are shown instead);
* **texts**: gold as text (entities as ``text (type)``), the prediction as text (a ranking as "rank 3
  of the top 10" or "not in the top 10"), the answer, the inputs as recorded — except that a text
  input longer than :data:`INPUT_CHARS` (a discharge letter, LongHealth's documents) is cut there,
  saying how much is left out (the whole text is in samples.jsonl): the page carries every sample of
  every run, and a few such inputs would otherwise make it tens of megabytes;
* **diagnostics** only where they say something (a flag set, a counter above 0): the rest are
  false/0 for almost every sample and would only make the page heavier;
* the **judge** rating(s) a sample carries (``judge`` in samples.jsonl), shown as they are.

Run keys are ``r0``, ``r1`` … in the order the runs were given (A = ``r0`` in a comparison):
:func:`run_key`; links into the page are built with :func:`evalpipe.report.browser.samples_fragment`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

from evalpipe.metrics.aggregation import Mean
from evalpipe.report.browser import SplicedSample, WrittenSample, samples_fragment
from evalpipe.report.browser_spool import (INPUT_CHARS, SpooledTexts, gold_text, result_head, result_judge,
                                           shown_inputs)
from evalpipe.report.browser_written import WrittenRows
from evalpipe.report.leaderboard import primary_metric
from evalpipe.report.ner_errors import SampleOutcomes, sample_outcomes
from evalpipe.report.runs import ReportRun, TaskInfo

__all__ = ["INPUT_CHARS", "LINKED_OUTCOMES", "BrowserRows", "SampleLinks", "TaskKind", "browser_data", "correctness_key", "run_key", "task_kinds"]

#: the outcomes any task can have, besides its own (NER categories, correct/incorrect)
PARSE_FAILURE, ERROR = "parse_failure", "error"


def run_key(index: int) -> str:
    """The browser's key of the ``index``-th run of a report (``r0``, ``r1`` …)."""
    return f"r{index}"


class TaskKind:
    """How the browser classifies a task's samples (see the module docstring)."""

    NER = "NER"
    SCORED = "scored"

    @staticmethod
    def correctness(key: str) -> str:
        return f"correct = {key} is 1"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


#: the metric tried after the primary one (see the module docstring)
ACCURACY = "accuracy"


def correctness_key(task: str, runs: Sequence[ReportRun], info: TaskInfo | None) -> str | None:
    """The per-sample 0/1 value that says whether a sample of ``task`` is correct, or None.

    The primary metric, else ``accuracy``, qualifies when every run that has it declares it as the mean
    of one per-sample key and that key is 0 or 1 (or undefined) on every sample.
    """
    records = [r for run in runs for r in run.task_records(task)]
    corpus = list(dict.fromkeys(m for run in runs for m in run.metrics.get(task, {})))
    if not records or not corpus:
        return None
    for metric in dict.fromkeys(m for m in (primary_metric(info, corpus), ACCURACY) if m is not None):
        keys = {a.key if isinstance(a, Mean) else None
                for run in runs if (a := run.resample[task].aggregations.get(metric) if task in run.resample else None)}
        if len(keys) != 1 or None in keys:
            continue
        key = keys.pop()
        values = [(r.get("scores") or {}).get(key) for r in records]
        defined = [v for v in values if v is not None]
        if defined and all(_number(v) in (0.0, 1.0) for v in defined):
            return key
    return None


def task_kinds(runs: Sequence[ReportRun], infos: Mapping[str, TaskInfo]) -> dict[str, tuple[str, str | None]]:
    """task → (kind, correctness key): NER when every run's records of it read as spans."""
    tasks: list[str] = []
    for run in runs:
        tasks.extend(t for t in run.tasks if t not in tasks)
    kinds: dict[str, tuple[str, str | None]] = {}
    for task in tasks:
        per_run = [run for run in runs if task in run.tasks and run.task_records(task)]
        if per_run and all(run.span_outcomes(task) is not None for run in per_run):
            kinds[task] = (TaskKind.NER, None)
            continue
        key = correctness_key(task, runs, infos.get(task))
        kinds[task] = (TaskKind.correctness(key), key) if key else (TaskKind.SCORED, None)
    return kinds


def _outcomes(record: Mapping[str, Any], kind: str, key: str | None,
              entity_outcomes: SampleOutcomes | None = None) -> list[str]:
    """The browser's ``outcomes`` of one record (see the module docstring), in the page's order."""
    outcomes: list[str] = []
    if kind == TaskKind.NER:
        gold_out, pred_out = entity_outcomes if entity_outcomes is not None else sample_outcomes(record)
        outcomes = list(dict.fromkeys(o.category for o in (*gold_out, *pred_out)))
    elif key is not None:
        value = _number((record.get("scores") or {}).get(key))
        if value is not None:
            outcomes.append("correct" if value == 1.0 else "incorrect")
    if record.get("parse_failed") is True:
        outcomes.append(PARSE_FAILURE)
    if record.get("error"):
        outcomes.append(ERROR)
    return outcomes


def _result(record: Mapping[str, Any], kind: str, key: str | None,
            entity_outcomes: SampleOutcomes | None = None, texts: SpooledTexts | None = None) -> dict[str, Any]:
    """One run's result of one sample: from its whole record, or from its lean record and the
    ``texts`` made of it as it was read (:mod:`evalpipe.report.browser_spool`; usable for ``kind``)."""
    result = result_head(record, kind == TaskKind.NER, texts, entity_outcomes)
    result["outcomes"] = _outcomes(record, kind, key, entity_outcomes)
    result.update(result_judge(record))
    return result


def _score_keys(task: str, runs: Sequence[ReportRun], info: TaskInfo | None) -> list[str]:
    """Per-sample score keys in the task's metric order (the browser puts the rest after them)."""
    present: set[str] = set()
    for run in runs:
        for record in run.records:
            if record.get("task") == task:
                present.update((record.get("scores") or {}).keys())
                break
    declared = [m for m in (info.metrics if info else ()) if m in present]
    return declared


class BrowserRows:
    """Every sample of every run in the browser's data contract (:class:`evalpipe.report.browser.BrowserData`),
    made one row at a time.

    Samples are keyed by (task, id); a sample only some runs evaluated has only their results. Order:
    tasks as the runs list them, samples in the first run's order, then samples only later runs have
    (a run that repeats an id: its first record's place, its last record's result, the first record's
    input and gold).

    Why rows on demand: at tens of thousands of samples the rows (and their JSON) were the report's
    largest objects after the records themselves, and the page only needs them once, as they are
    written (:func:`evalpipe.report.browser.iter_sample_browser`). What holds is an index per task — the
    sample ids in order and where each run's record of them is — and the outcome counts the report's
    numbers link with (:meth:`links`).
    """

    def __init__(self, runs: Sequence[ReportRun], infos: Mapping[str, TaskInfo] | None = None) -> None:
        infos = infos or {}
        self._runs = tuple(runs)
        self._kinds = task_kinds(runs, infos)
        self.header: dict[str, Any] = {
            "runs": [{"key": run_key(i), "label": run.label, "path": str(run.path)} for i, run in enumerate(runs)],
            "tasks": [{"name": task, "kind": kind, "score_keys": _score_keys(task, runs, infos.get(task))}
                      for task, (kind, _) in self._kinds.items()],
        }
        self._links: SampleLinks | None = None
        self._plan: WrittenRows | None = None
        #: task → sample ids in page order; task → run index → id → index of that run's (last) record
        self._order: dict[str, list[str]] = {}
        self._where: dict[str, list[dict[str, int]]] = {}
        for task in self._kinds:
            where = []
            for run in runs:
                where.append({str(record.get("id")): i for i, record in enumerate(run.task_records(task))})
            self._order[task] = list(dict.fromkeys(sample_id for run_where in where for sample_id in run_where))
            self._where[task] = where

    def __len__(self) -> int:
        return sum(len(ids) for ids in self._order.values())

    def links(self) -> SampleLinks:
        """The rows' counts per (task, run) and outcome, as links for the report's numbers (no row is
        made); counted once (a report counts them before its browser child forks: counted after,
        reading every record would copy the pages the two processes share)."""
        if self._links is None:
            self._links = self._count_links()
        return self._links

    def _count_links(self) -> SampleLinks:
        links = SampleLinks({"samples": ()})
        plan = self.plan()  # its rows' outcomes are worked out once, for both
        for task, (kind, correct_key) in self._kinds.items():
            for index, run in enumerate(self._runs):
                where = self._where[task][index]
                if not where:
                    continue
                links.samples[(task, run_key(index))] = len(where)
                planned = plan.counts(task, run_key(index))
                if planned is not None:
                    links.outcomes[(task, run_key(index))] = planned
                    continue
                records = run.task_records(task)
                outcomes = run.span_outcomes(task) if kind == TaskKind.NER else None
                counts = links.outcomes.setdefault((task, run_key(index)), {})
                for i in where.values():
                    for outcome in _outcomes(records[i], kind, correct_key, outcomes[i] if outcomes else None):
                        counts[outcome] = counts.get(outcome, 0) + 1
        return links

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The rows as dicts (:meth:`pieces`, each spliced row decoded)."""
        for row in self.pieces():
            yield row.as_dict() if isinstance(row, (SplicedSample, WrittenSample)) else row

    def pieces(self, start: int = 0, stop: int | None = None,
               ) -> Iterator[dict[str, Any] | SplicedSample | WrittenSample]:
        """The rows, each made as it is asked for: from the texts its records' run made of them as they
        were read (:class:`~evalpipe.report.browser_spool.BrowserSpool`; the input already as the page's
        JSON, a :class:`~evalpipe.report.browser.SplicedSample`), else from each record read whole from
        its run's samples file (the runs hold slim records: :data:`~evalpipe.report.runs.ON_DEMAND_FIELDS`).
        ``start``, ``stop``: only the rows at those positions of the page (the rows before are not made)."""
        with ExitStack() as stack:
            readers = [stack.enter_context(run.reader()) for run in self._runs]
            yield from self._rows(readers, start, len(self) if stop is None else stop)

    def _texts(self, index: int, record: Mapping[str, Any], ner: bool) -> SpooledTexts | None:
        spool = self._runs[index].spool
        texts = spool.texts(record) if spool is not None else None
        return texts if texts is not None and texts.usable(ner) else None

    def _rows(self, readers: Sequence[Callable[[Mapping[str, Any]], Mapping[str, Any]]], start: int, stop: int,
              ) -> Iterator[dict[str, Any] | SplicedSample | WrittenSample]:
        plan = self.plan()
        before = 0  # the rows of the tasks before this one
        for task, (kind, correct_key) in self._kinds.items():
            order = self._order[task]
            lo, hi = max(start - before, 0), min(max(stop - before, 0), len(order))
            before += len(order)
            if lo >= hi:
                continue
            planned = task in plan.tasks
            made: Callable[[str], dict[str, Any] | SplicedSample] | None = None
            for k in range(lo, hi):
                if planned and (text := plan.text(task, k)) is not None:
                    yield WrittenSample(None, text)  # its parts were checked as they were read
                    continue
                if made is None:
                    made = self._maker(task, kind, correct_key, readers)
                yield made(order[k])

    def _maker(self, task: str, kind: str, correct_key: str | None,
               readers: Sequence[Callable[[Mapping[str, Any]], Mapping[str, Any]]],
               ) -> Callable[[str], dict[str, Any] | SplicedSample]:
        """What makes a row of ``task`` from its runs' records (and the texts made of them as they were read)."""
        ner = kind == TaskKind.NER
        per_run = [(index, run_key(index), run.task_records(task), self._where[task][index],
                    run.span_outcomes(task) if ner else None)
                   for index, run in enumerate(self._runs)]
        firsts: list[dict[str, int]] = []
        for _, _, records, where, _ in per_run:  # the first record of each id, for input and gold
            first: dict[str, int] = {}
            if len(where) != len(records):
                for i, record in enumerate(records):
                    first.setdefault(str(record.get("id")), i)
            firsts.append(first)

        def row(sample_id: str) -> dict[str, Any] | SplicedSample:
            sample: dict[str, Any] | None = None
            input_json: str | None = None
            for (index, key, records, where, outcomes), first, full in zip(per_run, firsts, readers):
                at = where.get(sample_id)
                if at is None:
                    continue
                texts = self._texts(index, records[at], ner)
                result = records[at] if texts is not None else full(records[at])
                if sample is None:
                    at_first = first.get(sample_id, at)
                    given_texts = texts if at_first == at else self._texts(index, records[at_first], ner)
                    sample = {"task": task, "id": sample_id}
                    if given_texts is not None:
                        input_json = given_texts.input_json
                        sample["gold_text"] = given_texts.gold(ner)
                    else:
                        given = result if at_first == at and texts is None else full(records[at_first])
                        sample["input"] = shown_inputs(given)
                        sample["gold_text"] = gold_text(given, ner)
                    sample["runs"] = {}
                sample["runs"][key] = _result(result, kind, correct_key, outcomes[at] if outcomes else None, texts)
            assert sample is not None
            return SplicedSample(sample, input_json) if input_json is not None else sample

        return row

    def written(self) -> bool:
        """Whether every row is made of the runs' written texts (:meth:`plan`)."""
        return set(self.plan().tasks) == set(self._kinds)

    def plan(self) -> WrittenRows:
        """The rows made of the runs' written texts (:mod:`evalpipe.report.browser_written`), planned once:
        before the browser's child forks, as the links are (it reads every record)."""
        if self._plan is None:
            self._plan = WrittenRows(self._runs, self._kinds, self._order, self._where, _outcomes, TaskKind.NER)
        return self._plan


def browser_data(runs: Sequence[ReportRun], infos: Mapping[str, TaskInfo] | None = None) -> dict[str, Any]:
    """Every sample of every run in the browser's data contract, all at once (see :class:`BrowserRows`)."""
    rows = BrowserRows(runs, infos)
    return {**rows.header, "samples": list(rows)}


#: outcomes a metrics row links to, in this order, with the words its link shows
LINKED_OUTCOMES = (("missed", "missed"), ("spurious", "spurious"), ("boundary", "boundary"), ("type", "type"),
                   ("boundary+type", "boundary+type"), ("incorrect", "incorrect"),
                   (PARSE_FAILURE, "parse failures"), (ERROR, "errors"))


class SampleLinks:
    """Links from the report's numbers to the rows behind them in the sample browser, with the row counts.

    Counts are samples (rows), not entities: a sentence with two missed entities is one row.
    """

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.samples: dict[tuple[str, str], int] = {}
        self.outcomes: dict[tuple[str, str], dict[str, int]] = {}
        for sample in data["samples"]:
            for key, result in sample["runs"].items():
                where = (sample["task"], key)
                self.samples[where] = self.samples.get(where, 0) + 1
                counts = self.outcomes.setdefault(where, {})
                for outcome in result.get("outcomes") or ():
                    counts[outcome] = counts.get(outcome, 0) + 1

    def all(self, task: str, run: str) -> str:
        """``#samples?task=…&run=…``: every sample of the task in the run."""
        return samples_fragment(task=task, run=run)

    def outcome(self, task: str, run: str, outcome: str) -> str:
        return samples_fragment(task=task, run=run, outcome=outcome)

    def count(self, task: str, run: str, outcome: str | None = None) -> int:
        if outcome is None:
            return self.samples.get((task, run), 0)
        return self.outcomes.get((task, run), {}).get(outcome, 0)

    def row_links(self, task: str, run: str) -> tuple[tuple[str, str], ...]:
        """(text, href) of each outcome the task's samples in this run have, e.g. ("missed: 12", …)."""
        counts = self.outcomes.get((task, run), {})
        return tuple((f"{words}: {counts[outcome]}", self.outcome(task, run, outcome))
                     for outcome, words in LINKED_OUTCOMES if counts.get(outcome))

    @staticmethod
    def sample(task: str, sample_id: str, run: str, compare: str | None = None) -> str:
        """One sample of one run (``compare``: another run beside it)."""
        return samples_fragment(task=task, sample=sample_id, run=run, compare=compare)
