"""Writing the extract of a samples file as its lines are written (see :mod:`evalpipe.report.extract`):
what a report takes of each line, taken by the same code (:class:`~evalpipe.report.taking.WhileWhole`)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from evalpipe.report.browser import json_for_script, json_string
from evalpipe.report.browser_spool import Spans, record_texts, result_head, result_judge
from evalpipe.report.extract.layout import (BATCH, FORMAT, SUFFIXES, Segment, extract_folder, fingerprint, remove,
                                            wanted)
from evalpipe.report.frame import FrameValues
from evalpipe.report.ner_errors import EntityOutcome, SampleOutcomes, is_span_kind
from evalpipe.report.reading import LEAN_FIELDS, ON_DEMAND_FIELDS, UNREAD_FIELDS
from evalpipe.report.taking import FRAME_COLUMNS, AllParts, SpanReading, WhileWhole
from evalpipe.results import _dumps

__all__ = ["ExtractWriter", "SegmentBuilder", "recorded_span_tasks", "taker", "writer"]

log = logging.getLogger(__name__)

#: the fields a held record leaves out (those :func:`evalpipe.report.reading.read_held` drops, slim)
_DROPPED = frozenset((*UNREAD_FIELDS, *ON_DEMAND_FIELDS, *LEAN_FIELDS))


def recorded_span_tasks(config: Mapping[str, Any]) -> frozenset[str]:
    """The run's tasks a report reads as span tasks, from its ``config.json`` (as
    :func:`evalpipe.report.runs.span_tasks` reads them: a recorded kind of ``span_ner``, or none recorded)."""
    recorded = config.get("tasks") or {}
    tasks = (config.get("config") or {}).get("tasks") or ()
    kinds = {str(t): (recorded.get(t) or {}).get("kind") for t in tasks}
    return frozenset(t for t, kind in kinds.items() if is_span_kind(str(kind) if kind else None) is not False)


def taker(task: str, kind: str | None) -> Callable[[Path], SegmentBuilder] | None:
    """What takes the extract of a task's lines as scoring spills them (a task without prompt
    conditions, whose spilled lines are its lines of the samples file); None where extracts are not wanted."""
    if not wanted():
        return None
    span = (task,) if is_span_kind(kind) is not False else ()
    return functools.partial(SegmentBuilder, span_tasks=span, references={})


def writer(samples: Path, config: Mapping[str, Any] | None, references: Mapping[str, str]) -> ExtractWriter | None:
    """The writer of ``samples``' extract (``config``: the run's config.json; None where it has none
    yet, and then no extract is written, nor where extracts are not wanted). An old extract is
    removed either way: it describes the file being replaced."""
    if config is None or not wanted():
        remove(extract_folder(samples) / "index.json")
        return None
    return ExtractWriter(samples, recorded_span_tasks(config), references)


class _Texts:
    """The browser texts of a segment's reference records, in the order taken: what
    :class:`~evalpipe.report.extract.rows.ExtractSpool` adopts; ``add`` is a spool's. An entry is the
    record's part of a browser row as the page's JSON texts
    (:class:`~evalpipe.report.browser_spool.WrittenRow`): a line saying its kind and each text's
    length in bytes, then the texts — :func:`~evalpipe.report.browser.json_for_script`'s, so that no
    ``<``, ``>``, ``&``, U+2028 or U+2029 is in the file, which a report checks at once
    (:func:`~evalpipe.report.extract.loading.checked_texts`). A row of another kind (a task two runs
    read differently) is made from the record, as a row of a run without an extract is."""

    def __init__(self, handle: IO[bytes], digest: Any, written: dict[str, str]) -> None:
        self._handle, self._digest, self._written = handle, digest, written
        self.keys: list[int] = []
        self.sizes: list[int] = []

    def add(self, record: Mapping[str, Any], spans: Spans | None, key: int) -> None:
        texts = record_texts(record, spans)
        ner = texts.ner is not None
        judge = result_judge(record)
        task, kind = str(record.get("task")), "N" if ner else "P"
        seen = self._written.get(task)
        if seen != kind:
            self._written[task] = kind if seen is None else "NP"
        pieces = [f'"task":{json_string(task)},"id":{json_string(str(record.get("id")))}'.encode("utf-8"),
                  texts.input_json.encode("utf-8"), json_string(texts.gold(ner)).encode("utf-8"),
                  json_for_script(result_head(record, ner, texts))[1:-1].encode("utf-8"),
                  json_for_script(judge)[1:-1].encode("utf-8") if judge else b""]
        line = " ".join([kind, *(str(len(piece)) for piece in pieces)]) + "\n"
        data = b"".join([line.encode("ascii"), *pieces])
        self._handle.write(data)
        self._digest.update(data)
        self.keys.append(key)
        self.sizes.append(len(data))


class SegmentBuilder:
    """Takes what a report takes of each line written to a samples file (see the module docstring):
    ``add`` the lines in order as they are written, then ``finish`` once.

    ``span_tasks``: the tasks whose records a report reads as spans (its recorded kind is ``span_ner``);
    ``references``: the tasks with prompt conditions and each one's reference condition. Never
    raises while taking: a line that cannot be taken (not a JSON object) ends the segment's taking,
    and ``finish`` gives None (the report then reads those lines itself)."""

    def __init__(self, folder: Path, span_tasks: Collection[str], references: Mapping[str, str]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.name = f"seg-{uuid.uuid4().hex}"
        self._data, self._parts, self._texts_handle = (
            (folder / f"{self.name}{suffix}").open("wb") for suffix in SUFFIXES)
        self._span_tasks = frozenset(span_tasks)
        self._references = dict(references)
        self._variants = {task: {"reference": reference} for task, reference in self._references.items()}
        self._reading = SpanReading(self._span_tasks, self._variants)
        self._sha = hashlib.sha256()
        self._data_sha, self._parts_sha, self._texts_sha = hashlib.sha256(), hashlib.sha256(), hashlib.sha256()
        self._size = 0
        self._lines = 0
        self._batch: list[str] = []
        self._starts: list[int] = []
        self._tasks: dict[str, None] = {}
        self._parts_tasks: dict[str, None] = {}
        self._written: dict[str, str] = {}
        self.problem: str | None = None

    def add(self, lines: Iterable[str]) -> None:
        """Lines of the samples file, in order, each with its newline (blank lines are not records)."""
        if self.problem is not None:
            return
        for line in lines:
            data = line.encode("utf-8")
            self._sha.update(data)
            if line.strip():
                self._batch.append(line)
                self._starts.append(self._size)
                self._lines += 1
                if len(self._batch) == BATCH:
                    self._take()
            self._size += len(data)

    def _take(self) -> None:
        lines, starts = self._batch, self._starts
        self._batch, self._starts = [], []
        if self.problem is not None or not lines:
            return
        try:
            records = json.loads("[" + ",".join(lines) + "]")
            if not isinstance(records, list) or len(records) != len(lines) or not all(
                    type(r) is dict for r in records):
                raise ValueError("a line that is not one JSON object")
            document, parts = self._document(records, starts)
            self._data.write(document)
            self._data_sha.update(document)
            self._parts.write(parts)
            self._parts_sha.update(parts)
        except (ValueError, RecursionError, TypeError, OverflowError, OSError) as exc:
            self.problem = f"not taken ({exc})"

    def _document(self, records: list[dict[str, Any]], starts: list[int]) -> tuple[bytes, bytes]:
        """A batch's document, and its parts' (``NAME.parts``: the parts apart from the rest)."""
        texts = _Texts(self._texts_handle, self._texts_sha, self._written)
        whole = WhileWhole((), self._variants, texts, FrameValues(FRAME_COLUMNS), None, starts,
                           reading=self._reading)
        parts: dict[str, AllParts] = {}
        held_records = []
        for record in records:
            task = str(record.get("task"))
            self._tasks.setdefault(task)
            held = {name: value for name, value in record.items() if name not in _DROPPED}
            whole(record, held)
            if task not in self._references:  # every record of such a task is a reference one
                self._parts_tasks.setdefault(task)
                parts.setdefault(task, AllParts()).add(record)
                held.pop("parts", None)
            held_records.append(held)
        found = {task: (None if values is None else [_outcomes_json(o) for o in values])
                 for task, values in self._reading.drained().items()}
        document = {"starts": starts, "records": held_records, "frame": whole.frame.state() if whole.frame else {},
                    "digests": [d.hex() if d is not None else None for d in whole.digests],
                    "found": found, "texts": [texts.keys, texts.sizes]}
        parts_document = {task: {"ids": p.ids, "records": p.records, "with_parts": p.with_parts,
                                 "columns": {key: column.tolist() for key, column in p.columns.items()}}
                          for task, p in parts.items()}
        return ((_dumps(document, separators=(",", ":")) + "\n").encode("utf-8"),
                (_dumps(parts_document, separators=(",", ":")) + "\n").encode("utf-8"))

    def finish(self) -> Segment | None:
        """The segment taken (its files written), or None where its lines could not all be taken."""
        self._take()
        try:
            for handle in (self._data, self._parts, self._texts_handle):
                handle.close()
        except OSError as exc:
            self.problem = self.problem or f"not written ({exc})"
        segment = Segment(self.folder, self.name, self._size, self._lines, self._sha.hexdigest(),
                          (self._data_sha.hexdigest(), self._parts_sha.hexdigest(), self._texts_sha.hexdigest()),
                          tuple(self._tasks), tuple(t for t in self._tasks if t in self._span_tasks),
                          {t: r for t, r in self._references.items() if t in self._tasks}, tuple(self._parts_tasks),
                          dict(self._written))
        if self.problem is not None:
            log.info("samples extract: %s", self.problem)
            segment.discard()
            return None
        return segment

    def abandon(self) -> None:
        """Stop taking and remove what was written."""
        for handle in (self._data, self._parts, self._texts_handle):
            with contextlib.suppress(OSError):
                handle.close()
        for suffix in SUFFIXES:
            remove(self.folder / f"{self.name}{suffix}")


def _outcomes_json(outcomes: SampleOutcomes) -> list[list[list[Any]]]:
    gold, pred = outcomes
    return [[_entity_json(o) for o in gold], [_entity_json(o) for o in pred]]


def _entity_json(outcome: EntityOutcome) -> list[Any]:
    counterpart = outcome.counterpart
    return [outcome.span.start, outcome.span.end, outcome.span.label, outcome.category,
            None if counterpart is None else [counterpart.start, counterpart.end, counterpart.label]]


class ExtractWriter:
    """The extract of one samples file, written beside it as its lines are (see the module docstring).

    Give :meth:`lines` the file's lines in pieces — a piece whose segment was taken already (a
    task's lines spilled by the scoring child, :attr:`evalpipe.scoring.records.ChunkedRecords.extract`)
    is only counted, any other is taken here — and write what it yields; once the file is in place,
    :meth:`commit` writes the index (or, when a piece could not be taken, removes the extract)."""

    def __init__(self, samples: Path, span_tasks: Collection[str], references: Mapping[str, str]) -> None:
        self.samples = samples
        self.folder = extract_folder(samples)
        self._span_tasks, self._references = frozenset(span_tasks), dict(references)
        self._segments: list[tuple[int, Segment]] = []
        self._size = 0
        self._failed = False
        #: the extract of the file as it was is gone from the moment a new file is written
        remove(self.folder / "index.json")

    def lines(self, pieces: Iterable[tuple[Iterable[str], Segment | None]]) -> Iterator[str]:
        for lines, segment in pieces:
            if self._failed:  # no extract this time: the lines as they are
                yield from lines
                if segment is not None:
                    segment.discard()
                continue
            if segment is not None:
                yield from lines
                self._adopt(segment)
                continue
            try:
                builder = SegmentBuilder(self.folder, self._span_tasks, self._references)
            except OSError as exc:
                log.info("samples extract: not written (%s)", exc)
                self._failed = True
                yield from lines
                continue
            try:
                for line in lines:
                    builder.add((line,))
                    yield line
            except BaseException:
                builder.abandon()
                raise
            self._keep(builder.finish())

    def _adopt(self, segment: Segment) -> None:
        """A segment taken in another folder (the scoring child's scratch): moved into the extract's."""
        if segment.folder != self.folder:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                for path in segment.files():
                    os.replace(path, self.folder / path.name)
            except OSError as exc:  # another file system: taken again is not worth the wait
                log.info("samples extract: segment not moved (%s)", exc)
                segment.discard()
                self._keep(None)
                return
            segment = replace(segment, folder=self.folder)
        self._keep(segment)

    def _keep(self, segment: Segment | None) -> None:
        if segment is None:
            self._failed = True
            return
        self._segments.append((self._size, segment))
        self._size += segment.size

    def commit(self) -> None:
        """Write the index once the samples file is in place; remove every file no index names."""
        size = self.samples.stat().st_size if self.samples.is_file() else -1
        keep: set[str] = set()
        if not self._failed and size == self._size:
            index = {"format": FORMAT, "fingerprint": fingerprint(), "size": size,
                     "segments": [segment.entry(start) for start, segment in self._segments]}
            tmp = self.folder / f".index.json.tmp{os.getpid()}"
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                tmp.write_text(json.dumps(index), encoding="utf-8")
                os.replace(tmp, self.folder / "index.json")
                keep = {"index.json", *(p.name for _, s in self._segments for p in s.files())}
            except OSError as exc:
                log.info("samples extract: index not written (%s)", exc)
                remove(tmp)
        elif not self._failed:
            log.info("samples extract: %s is %d bytes, its segments %d: not written", self.samples, size, self._size)
        for path in self.folder.glob("*") if self.folder.is_dir() else ():
            if path.name not in keep:
                remove(path)
        if not keep:
            with contextlib.suppress(OSError):
                self.folder.rmdir()

    def abandon(self) -> None:
        """The samples file was not written: remove what was taken for it."""
        for _, segment in self._segments:
            segment.discard()
        self._segments = []


