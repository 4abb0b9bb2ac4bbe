"""What the report takes of each record of a samples file while it is whole (issue 28).

A record is decoded whole once; the report then keeps only a lean form of it, and takes what its
sections need of the rest at that moment (:class:`WhileWhole`): the span outcomes, the frame's
values, the answer's digest, the parts a task's intervals resample, the sample browser's texts.
Three readers apply it to a samples file's lines, and must take exactly the same:

* the report reading a run (:mod:`evalpipe.report.runs`);
* a child process reading the last part of it beside the report (:mod:`evalpipe.report.read_beside`);
* whoever writes a samples file, as it writes each line: the run's extract
  (:mod:`evalpipe.report.extract`), which a later report reads instead of the records.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, overload

from evalpipe.metrics.aggregation import Aggregation, aggregation_from_json
from evalpipe.report.browser_spool import Spans
from evalpipe.report.frame import FrameValues, answer_digest
from evalpipe.report.ner_errors import SampleOutcomes, classify, record_spans
from evalpipe.report.sharing import OutcomeSharing
from evalpipe.results import TaskSummary

if TYPE_CHECKING:
    import numpy as np

__all__ = ["FRAME_COLUMNS", "AllParts", "Digests", "SpanReading", "TaskParts", "Taken", "TextsTaker", "WhileWhole",
           "aggregations", "is_reference", "part_value", "parts_keys", "references"]


def aggregations(summary: TaskSummary, notes: list[str], task: str) -> dict[str, Aggregation]:
    out = {}
    for metric, spec in summary.aggregations.items():
        try:
            out[metric] = aggregation_from_json(spec)
        except (ValueError, TypeError) as exc:
            notes.append(f"{task}: {metric}: aggregation not readable ({exc}); no interval")
    return out


def parts_keys(aggregations: Mapping[str, Aggregation]) -> tuple[str, ...]:
    """The parts a task's aggregations read, in the parts matrix's column order."""
    return tuple(sorted({k for a in aggregations.values() for k in a.keys()}))


#: the types of a part that :func:`part_value` takes as it is (a bool, a string, a missing part: 0)
_PLAIN_NUMBERS = frozenset({int, float})


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def part_value(value: Any) -> float:
    """A part's value as the parts matrix holds it: a number as a float, anything else (a bool, a
    string, None) 0.0."""
    return 0.0 if (v := _number(value)) is None else v


class _AnsweredParts:
    """What both takers of parts count of a task's records: every record, and of the answered ones
    (no ``error``) their ids in order and whether any had ``parts`` at all; each answered record's
    parts are the subclass's to keep (:meth:`_row`)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
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
        self._row(parts if type(parts) is dict or isinstance(parts, Mapping) else {})

    def _row(self, parts: Mapping[str, Any]) -> None:
        raise NotImplementedError


class TaskParts(_AnsweredParts):
    """A task's answered samples' ids and parts, taken as its records stream in, so that the
    records need not hold their ``parts`` (a dict per record, mostly distinct: at 94,000 NCBI
    samples ~20 MB): what :func:`resample_task` makes its matrix of, in the order given."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.keys = keys
        self._zeros = (0.0,) * len(keys)
        self.values = array("d")

    def _row(self, parts: Mapping[str, Any]) -> None:
        values = list(map(parts.get, self.keys, self._zeros))  # a part the record lacks: 0.0
        if _PLAIN_NUMBERS.issuperset(map(type, values)):  # every part an int or a float: as they are
            self.values.extend(values)
        else:
            self.values.extend(map(part_value, values))

    @classmethod
    def of_columns(cls, keys: tuple[str, ...], ids: list[str], columns: Mapping[str, Sequence[float]],
                   records: int, with_parts: bool) -> TaskParts:
        """The parts of ``keys`` from :class:`AllParts`' columns (a key no record had: 0.0 each)."""
        taken = cls(keys)
        zeros = [0.0] * len(ids)
        chosen = [columns.get(key, zeros) for key in keys]
        if any(len(column) != len(ids) for column in chosen):
            raise ValueError("a parts column of another length")
        taken.ids = ids
        taken.values = array("d", [float(v) for row in zip(*chosen) for v in row]) if keys else array("d")
        taken.records, taken.with_parts = records, with_parts
        return taken

    def extend(self, later: TaskParts) -> None:
        """The parts of the records after these (taken by another process), added in order."""
        if later.keys != self.keys:
            raise ValueError(f"parts of {later.keys} for {self.keys}")
        self.ids.extend(later.ids)
        self.values.extend(later.values)
        self.records += later.records
        self.with_parts = self.with_parts or later.with_parts

    def matrix(self) -> np.ndarray:
        import numpy as np  # the report's; not a run writing its extract

        return np.array(self.values, dtype=float).reshape(len(self.ids), len(self.keys))


class AllParts(_AnsweredParts):
    """A task's parts as :class:`TaskParts` takes them, under every key a record has, as columns: what
    a run's extract keeps (:mod:`evalpipe.report.extract`), whose reader picks the keys its intervals
    read (:meth:`TaskParts.of_columns`)."""

    def __init__(self) -> None:
        super().__init__()
        self.columns: dict[str, array[float]] = {}

    def _row(self, parts: Mapping[str, Any]) -> None:
        row = len(self.ids) - 1
        for key, value in parts.items():
            column = self.columns.get(key)
            if column is None:
                column = self.columns[key] = array("d", bytes(8 * row))
            column.append(part_value(value))
        for column in self.columns.values():
            if len(column) == row:  # a key this record lacks: 0.0
                column.append(0.0)


#: the columns of ``ReportRun.samples`` besides the ``score.*`` ones: what the operations table and
#: the score-vs-length plots read (the whole frame, nested values and all, is :func:`full_samples_frame`)
FRAME_COLUMNS = frozenset({"task", "id", "answer_chars", "parse_failed", "error", "latency_s", "prompt_tokens",
                           "completion_tokens", "truncated_tokens", "finish_reason"})


def references(variants: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Each task with prompt conditions and its reference condition (``variants.json``'s ``reference``)."""
    return {str(task): str(doc.get("reference")) for task, doc in variants.items()}


def is_reference(record: Mapping[str, Any], references: Mapping[str, str]) -> bool:
    """Whether ``record`` is of its task's reference condition (every record of a task without conditions)."""
    task, condition = str(record.get("task")), record.get("condition")
    return condition is None or task not in references or condition == references[task]


class SpanReading:
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
        self._references = references(variants)
        self._shared = OutcomeSharing()

    def is_reference(self, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` is of its task's reference condition (:func:`is_reference`)."""
        return is_reference(record, self._references)

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
            if found is None or more is None:
                self.found[task] = None
            else:
                found.extend(more)

    def outcomes(self) -> dict[str, list[SampleOutcomes] | None]:
        return {task: found or None for task, found in self.found.items()}

    def drained(self) -> dict[str, list[SampleOutcomes] | None]:
        """The outcomes found since the last time (a task with none left out; None: a record did not
        read as spans), the reading going on without them — nor the outcomes it shared: a writer of
        an extract holds a batch of records at a time, never what grows with the file."""
        found = {task: (None if values is None else list(values)) for task, values in self.found.items()
                 if values is None or values}
        for values in self.found.values():
            if values is not None:
                values.clear()
        self._shared = OutcomeSharing()
        return found


@dataclass(frozen=True)
class Taken:
    """What :class:`WhileWhole` took of a part of a samples file, with the part's held records: what
    a child reading the last lines sends back (:mod:`evalpipe.report.read_beside`), joined after the
    report's own by :meth:`WhileWhole.join`."""

    records: list[dict[str, Any]]
    frame: dict[str, list[Any]]
    digests: Sequence[bytes | None]
    parts: dict[str, TaskParts]
    found: dict[str, list[SampleOutcomes] | None]


class Digests(Sequence["bytes | None"]):
    """Each reference record's answer digest (:func:`~evalpipe.report.frame.answer_digest`: 16 bytes,
    or None), packed in one buffer: 94,000 bytes objects and their list were ~7 MB of a report's
    memory, packed 1.6 MB. A sequence of what was appended, equal to another of the same digests."""

    SIZE = 16
    _EMPTY = bytes(SIZE)

    def __init__(self, digests: Iterable[bytes | None] = ()) -> None:
        self._data = bytearray()
        self._present = bytearray()
        self.extend(digests)

    def append(self, digest: bytes | None) -> None:
        if digest is None:
            self._data += self._EMPTY
            self._present.append(0)
        elif len(digest) == self.SIZE:
            self._data += digest
            self._present.append(1)
        else:
            raise ValueError(f"a digest of {len(digest)} bytes")

    def extend(self, digests: Iterable[bytes | None]) -> None:
        if isinstance(digests, Digests):
            self._data += digests._data
            self._present += digests._present
            return
        for digest in digests:
            self.append(digest)

    def extend_hex(self, digests: Sequence[str | None]) -> None:
        """Digests written as hex (None: none), as an extract holds them."""
        self._data += bytes.fromhex("".join(d if d is not None else "0" * 2 * self.SIZE for d in digests))
        self._present += bytes(0 if d is None else 1 for d in digests)
        if len(self._data) != self.SIZE * len(self._present):
            raise ValueError("digests of another size")

    def __len__(self) -> int:
        return len(self._present)

    @overload
    def __getitem__(self, index: int) -> bytes | None: ...
    @overload
    def __getitem__(self, index: slice) -> list[bytes | None]: ...

    def __getitem__(self, index: int | slice) -> bytes | None | list[bytes | None]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not self._present[index]:  # IndexError beyond the end, as a list's
            return None
        return bytes(self._data[index * self.SIZE:(index + 1) * self.SIZE])

    def __iter__(self) -> Iterator[bytes | None]:
        data, size = self._data, self.SIZE
        for i, present in enumerate(self._present):
            yield bytes(data[i * size:(i + 1) * size]) if present else None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Digests):
            return self._present == other._present and self._data == other._data
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]


class TextsTaker(Protocol):
    """What keeps the sample browser's texts of each reference record (a report's
    :class:`~evalpipe.report.browser_spool.BrowserSpool`, an extract's writer of them)."""

    def add(self, record: Mapping[str, Any], spans: Spans | None, key: int) -> None: ...


class WhileWhole:
    """What is taken of each reference record while it streams in whole (see
    :mod:`evalpipe.report.reading`), so the lean records need not be read again for it:

    * the span outcomes (:meth:`ReportRun.span_outcomes`) of the tasks that may be span tasks
      (:class:`SpanReading`);
    * the frame's values (``frame``, :class:`~evalpipe.report.frame.FrameValues`) and the answer's
      digest (``digests``), in the order of the reference records;
    * the parts (``parts``: :class:`TaskParts` of the tasks given, those without prompt conditions,
      whose every record the robustness section resamples): the held record then has none;
    * the sample browser's texts (``spool``, with the record's spans when it reads as spans), kept
      under the record's line offset (``starts``: those of the lines read, in order).

    A part of the file read by another process (:mod:`evalpipe.report.read_beside`) is taken by its
    own, and joined after this one's (:meth:`taken`, :meth:`join`)."""

    def __init__(self, tasks: Iterable[str], variants: Mapping[str, Mapping[str, Any]],
                 spool: TextsTaker | None = None, frame: FrameValues | None = None,
                 parts: Mapping[str, TaskParts] | None = None, starts: Sequence[int] = (),
                 reading: SpanReading | None = None) -> None:
        #: ``reading``: the span reading of the lines before these, going on (an extract's batches)
        self._reading = SpanReading(tasks, variants) if reading is None else reading
        self._spool = spool
        self._starts = starts
        self._seen = 0
        self.frame = frame
        self.digests = Digests()
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

    def taken(self, records: list[dict[str, Any]]) -> Taken:
        """What was taken, with the part's held ``records``: to be joined after another part's (:meth:`join`)."""
        return Taken(records, self.frame.state() if self.frame is not None else {}, self.digests, self.parts,
                      self._reading.found)

    def join(self, later: Taken) -> None:
        """What was taken of the file's next part (by another process) after this one's, in order."""
        if self.frame is not None:
            self.frame.extend(later.frame)
        self.digests.extend(later.digests)
        for task, parts in self.parts.items():
            parts.extend(later.parts[task])
        self._reading.join(later.found)

    def outcomes(self) -> dict[str, list[SampleOutcomes] | None]:
        return self._reading.outcomes()
