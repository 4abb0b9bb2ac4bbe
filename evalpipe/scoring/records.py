"""A task's per-sample records (the lines of ``samples.jsonl``), built when they are read.

The records — JSON copies of inputs, gold, prediction, scores … — would double what scoring holds,
so :class:`SampleRecords` builds each one from the parsed samples when it is read, and
:class:`ChunkedRecords` (a samplewise task scored chunk by chunk, :mod:`evalpipe.scoring.fold`)
parses and scores each chunk again when read — or copies the lines written while it was scored.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO, overload

from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Completion, Example, Prediction, to_jsonable
from evalpipe.results import record_line
from evalpipe.scoring.chunk import Chunks, ScoredChunk, ScoringChunk, score_chunk
from evalpipe.scoring.parts import sparse
from evalpipe.tasks.base import Scoring


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
            "parts": sparse(self.parts[i], self.parts_read),
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


def records_of(task: str, chunk: ScoringChunk, scored: ScoredChunk, parts_read: frozenset[str]) -> SampleRecords:
    return SampleRecords(
        task=task, examples=chunk.examples, keys=chunk.keys, answers=chunk.answers,
        predictions=scored.predictions, answered=scored.answered, per_sample=scored.per_sample(),
        parts=scored.parts(), parts_read=parts_read, truncated=chunk.cut_tokens(),
    )


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
    #: what was taken of the spilled lines as they were written (a :class:`LineTaker`'s ``finish``: the
    #: report's extract of them, :mod:`evalpipe.report.extract`); None: nothing, or no spill
    extract: Any = None

    def __len__(self) -> int:
        return self.n

    def _records(self, chunk: ScoringChunk) -> SampleRecords:
        scored = score_chunk(self.scoring, chunk, self.options, self.answer_prefix)
        return records_of(self.task, chunk, scored, self.parts_read)

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


class LineTaker(Protocol):
    """What takes something of each line spilled, as it is written (the report's extract of the lines:
    :class:`evalpipe.report.extract.SegmentBuilder`; scoring knows no report module)."""

    def add(self, lines: Iterable[str]) -> None: ...

    def finish(self) -> Any:
        """What was taken (picklable: a scoring child hands it over), or None where nothing usable was."""

    def abandon(self) -> None: ...


#: makes a :class:`LineTaker` that writes its files into the folder given (the spill's scratch folder)
TakerFactory = Callable[[Path], LineTaker]


class Spill:
    """A file in ``scratch`` for a task's record lines (see :class:`evalpipe.scoring.fold.TaskFold`), and
    what a :class:`LineTaker` takes of them as they are written (``taken`` once it has finished)."""

    def __init__(self, path: Path, handle: TextIO, taker: LineTaker | None = None, taken: Any = None) -> None:
        self.path, self.handle = path, handle
        self.taker, self.taken = taker, taken

    @classmethod
    def new(cls, scratch: Path, taker: TakerFactory | None = None) -> Spill:
        """An empty spill file in ``scratch``."""
        fd, name = tempfile.mkstemp(dir=scratch, prefix="records-", suffix=".jsonl")
        return cls(Path(name), os.fdopen(fd, "w", encoding="utf-8", newline=""),
                   taker(scratch) if taker is not None else None)

    @classmethod
    def adopt(cls, path: Path, taken: Any = None) -> Spill:
        """A spill another fold wrote (and closed), appended to from here on (``taken``: what was taken of it)."""
        return cls(path, path.open("a", encoding="utf-8", newline=""), taken=taken)

    def write(self, lines: list[str]) -> None:
        self.handle.writelines(lines)
        if self.taker is not None:
            self.taker.add(lines)

    def finish_taking(self) -> Any:
        """What was taken of the lines written (the taker finished here, once)."""
        if self.taker is not None:
            self.taken, self.taker = self.taker.finish(), None
        return self.taken

    def drop(self) -> None:
        self.handle.close()
        self.path.unlink(missing_ok=True)
        if self.taker is not None:
            self.taker.abandon()
            self.taker = None
        discard = getattr(self.taken, "discard", None)
        if callable(discard):
            discard()
        self.taken = None


def record_lines(records: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """A task's records as their lines of ``samples.jsonl`` (spilled ones are copied as they are)."""
    lines = getattr(records, "lines", None)
    return lines() if callable(lines) else (record_line(r) for r in records)
