"""Sample browser rows made of what the runs' extracts wrote of their records (issue 28).

A row of the sample browser is one sample's JSON: its task and id, its input and gold, and each
run's result (answer, prediction, scores, entities … and its outcomes). All of it but the outcomes
is decided by the record alone, so the writer of a run's extract (:mod:`evalpipe.report.extract`)
wrote it as the page's JSON text, per record; the outcomes depend on the report's runs (a task read
as NER, or the key that says a sample is correct) and are worked out here, from the held records,
once, as a small code per row (the very lists :func:`~evalpipe.report.browser_data._outcomes`
gives). A row is then a few texts read at their offsets and joined — the same bytes as the row made
from the records (``tests/report/test_extract.py``), at a fraction of the Python work.

Why a plan, made before anything is written: the sample browser is written by a forked child
(:mod:`evalpipe.report.browser_beside`), and every Python object a child reads is written to (its
reference count), so the kernel copies the page it lives on — reading the records for 94,000 rows
copied ~60 MB. The plan is arrays (no object per row), the texts are read from the extract's files:
the child writing the rows of planned tasks reads no record at all.

A task is planned where every run that has it has an extract whose texts were written for the kind
the report reads the task as (NER, or not), and no run repeats one of its ids; any other row (and
one whose written texts are refused, :func:`~evalpipe.report.extract.rows.written_row`) is made from
the records as before.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe.report.browser import json_for_script
from evalpipe.report.extract.rows import ExtractSpool, written_row
from evalpipe.report.runs import ReportRun

__all__ = ["WrittenRows"]


@dataclass(frozen=True)
class _RunTexts:
    """One run's written texts: per reference record (in the run's order), its entry's spool and place."""

    spools: tuple[ExtractSpool, ...]
    links: array[int]
    offsets: array[int]
    sizes: array[int]

    @classmethod
    def of(cls, run: ReportRun) -> _RunTexts | None:
        """The run's written texts, where its spool is an extract's with an entry for every held record."""
        spools: list[ExtractSpool] = []
        links, offsets, sizes = array("h"), array("q"), array("q")
        spool = run.spool
        while spool is not None:
            if not isinstance(spool, ExtractSpool):
                return None
            at, size = spool.entries()
            links.extend([len(spools)] * len(at))
            offsets.extend(at)
            sizes.extend(size)
            spools.append(spool)
            spool = spool.rest
        if not spools or len(offsets) != len(run.records):
            return None
        return cls(tuple(spools), links, offsets, sizes)

    def read(self, entry: int) -> bytes:
        return self.spools[self.links[entry]].read_at(self.offsets[entry], self.sizes[entry])


@dataclass(frozen=True)
class _TaskPlan:
    """One task's rows: per run that has the task, each row's entry (-1: the run lacks the sample) and
    outcome code."""

    ner: bool
    runs: tuple[tuple[str, _RunTexts, array[int], array[int]], ...]


class WrittenRows:
    """The plan of the rows made of written texts (see the module docstring), and their texts."""

    def __init__(self, runs: Sequence[ReportRun], kinds: Mapping[str, tuple[str, str | None]],
                 order: Mapping[str, list[str]], where: Mapping[str, list[dict[str, int]]],
                 outcomes: Callable[[Mapping[str, Any], str, str | None, Any], list[str]], ner_kind: str) -> None:
        """``kinds``, ``order`` and ``where``: :class:`~evalpipe.report.browser_data.BrowserRows`' (each
        task's kind and correctness key, its sample ids in page order, where each run's record of each
        id is); ``outcomes``: a record's outcomes (as the rows list them)."""
        texts = [_RunTexts.of(run) for run in runs]
        #: the JSON text of each outcome list seen, by its code
        self.outcome_texts: list[str] = []
        #: the outcome lists of each code (what the links count)
        self.outcome_lists: list[list[str]] = []
        self._codes: dict[tuple[str, ...], int] = {}
        self.tasks: dict[str, _TaskPlan] = {}
        self._positions: dict[int, dict[str, array[int]]] = {}
        for task, (kind, correct_key) in kinds.items():
            ner = kind == ner_kind
            plan = self._plan(task, runs, texts, order[task], where[task], ner, kind, correct_key, outcomes)
            if plan is not None:
                self.tasks[task] = plan
        self._positions = {}  # only while planning

    def _plan(self, task: str, runs: Sequence[ReportRun], texts: Sequence[_RunTexts | None], order: list[str],
              where: list[dict[str, int]], ner: bool, kind: str, correct_key: str | None,
              outcomes: Callable[[Mapping[str, Any], str, str | None, Any], list[str]]) -> _TaskPlan | None:
        planned = []
        written = "N" if ner else "P"
        for index, run in enumerate(runs):
            if not where[index]:
                continue
            run_texts = texts[index]
            records = run.task_records(task)
            if run_texts is None or len(where[index]) != len(records) or _kinds(run, task) != {written}:
                return None  # no texts, an id the run repeats, or texts of the other kind
            if index not in self._positions:
                self._positions[index] = _positions(run)
            positions = self._positions[index][task]
            span = run.span_outcomes(task) if ner else None
            entries, codes = array("q", [-1] * len(order)), array("l", [0] * len(order))
            for k, sample_id in enumerate(order):
                at = where[index].get(sample_id)
                if at is None:
                    continue
                entries[k] = positions[at]
                codes[k] = self._code(outcomes(records[at], kind, correct_key, span[at] if span else None))
            planned.append((f"r{index}", run_texts, entries, codes))
        return _TaskPlan(ner, tuple(planned)) if planned else None

    def _code(self, found: list[str]) -> int:
        key = tuple(found)
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = len(self.outcome_texts)
            self.outcome_texts.append(json_for_script(found))
            self.outcome_lists.append(found)
        return code

    def counts(self, task: str, run_key: str) -> dict[str, int] | None:
        """The outcome counts of a planned task's rows of one run (the links' counts), or None."""
        plan = self.tasks.get(task)
        run = next((r for r in plan.runs if r[0] == run_key), None) if plan is not None else None
        if run is None:
            return None
        _, _, entries, codes = run
        per_code: dict[int, int] = {}
        for entry, code in zip(entries, codes):
            if entry >= 0:
                per_code[code] = per_code.get(code, 0) + 1
        counts: dict[str, int] = {}
        for code, n in per_code.items():
            for outcome in self.outcome_lists[code]:
                counts[outcome] = counts.get(outcome, 0) + n
        return counts

    def text(self, task: str, k: int) -> str | None:
        """The page's JSON of the ``k``-th row of a planned task, or None where a run's written texts for
        it are refused (the row is then made from the records)."""
        plan = self.tasks[task]
        first = None
        results = []
        for key, run_texts, entries, codes in plan.runs:
            entry = entries[k]
            if entry < 0:
                continue
            row = written_row(run_texts.read(entry))
            if row is None or row.ner != plan.ner:
                return None
            if first is None:
                first = row
            judge = "," + row.judge if row.judge else ""
            results.append(f'"{key}":{{{row.head},"outcomes":{self.outcome_texts[codes[k]]}{judge}}}')
        if first is None:
            return None
        return ("{" + first.key + ',"input":' + first.input_json + ',"gold_text":' + first.gold_json
                + ',"runs":{' + ",".join(results) + "}}")


def _kinds(run: ReportRun, task: str) -> set[str]:
    """The kinds a run's extract wrote the task's rows for."""
    found: set[str] = set()
    spool = run.spool
    while isinstance(spool, ExtractSpool):
        kind = spool.kinds.get(task)
        if kind is not None:
            found.update(kind)
        spool = spool.rest
    return found


def _positions(run: ReportRun) -> dict[str, array[int]]:
    """Each task's records' places among the run's held records (as :meth:`ReportRun.task_records` orders them)."""
    positions: dict[str, array[int]] = {}
    for i, record in enumerate(run.records):
        task = str(record.get("task"))
        found = positions.get(task)
        if found is None:
            found = positions[task] = array("q")
        found.append(i)
    return positions
