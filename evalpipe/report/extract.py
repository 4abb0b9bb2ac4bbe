"""The report's extract of a samples file: what a report takes of each record, written as the file is.

Why (issue 28): a report reads every record of ``samples.jsonl`` whole once and takes of it what
its sections need (:class:`~evalpipe.report.taking.WhileWhole`: the held slim record, the frame's
values, the answer's digest, the parts, the span outcomes, the sample browser's texts). At 94,000
NCBI samples that was ~7 s of the report's ~11.5 s of CPU — Python work on every record, whose
parts each cost a few microseconds and which two processes could only share. Whoever *writes* a
samples file has every line in hand, and the run writes it while its requests are in flight (the
scoring child, :mod:`evalpipe.pipeline.score_beside`), when a core is otherwise idle behind a remote
model. So the writer takes the same of each line, with the same code, and keeps it beside the file;
a report reads that back in bulk, at a few microseconds a record, and decodes no record at all.

**What is written** (the folder ``samples.extract/`` beside ``samples.jsonl``; ``samples.COMPAT.extract/``
beside a compatibility scoring's file):

* ``index.json`` — the format, the fingerprint of the code that took (:func:`fingerprint`), the
  samples file's size, and its *segments*: consecutive byte ranges of the file, each taken by one
  writer (a task's lines spilled by the scoring child, or the lines the run wrote itself), with
  its line count, SHA-256, the tasks its lines belong to and what the writer knew of them (which
  were span tasks, which ran under prompt conditions and which of those was the reference);
* per segment, ``NAME.json``: one JSON document per batch of lines (:data:`BATCH`) — the lines'
  offsets, the held slim records, the frame's values, the digests, the span outcomes and the
  parts (the union of the keys its records had: the keys an interval reads are the report's to
  choose) —, and ``NAME.texts``: each reference record's browser texts, one JSON array each, read
  at their offsets as the sample browser's rows are written.

**Trust.** An extract is a shortcut, never a source: the report uses it only if every check holds —
the format and the taking code's fingerprint are this evalpipe's, the segments tile the samples
file exactly and each one's SHA-256 is that of the file's bytes (so a samples file changed by any
hand since is read as before), and what each writer knew of its tasks is what the run directory
says. Anything else, a damaged or missing file included, and the report reads the samples file
itself, as it always did; the extract changes no byte of a report (``tests/report/test_extract.py``).
An extract is data read with :mod:`json` only, and a text spliced into the page as it is (the inputs'
JSON) is checked before it is used (:func:`_safe_input`): a run directory someone sent you cannot
put script into your report through its extract. Deleting the folder loses nothing.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import threading
import uuid
from array import array
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

import orjson

from evalpipe.records import Span
from evalpipe.report.browser import json_for_script, json_string
from evalpipe.report.browser_spool import (BrowserSpool, Spans, SpooledTexts, WrittenRow, record_texts, result_head,
                                           result_judge)
from evalpipe.report.frame import FrameValues
from evalpipe.report.ner_errors import EntityOutcome, SampleOutcomes, is_span_kind
from evalpipe.report.reading import LEAN_FIELDS, ON_DEMAND_FIELDS, UNREAD_FIELDS
from evalpipe.report.sharing import SHARED_CHARS, _Sharing
from evalpipe.report.taking import FRAME_COLUMNS, SpanReading, TaskParts, Taken, WhileWhole
from evalpipe.results import _dumps

__all__ = ["BATCH", "ENV", "FORMAT", "ExtractWriter", "Loaded", "Segment", "SegmentBuilder", "extract_folder",
           "fingerprint", "load", "recorded_span_tasks", "taker", "wanted", "writer"]

log = logging.getLogger(__name__)

#: the extract's layout; an extract of another format is not read
FORMAT = 1
#: a segment's files: what was taken of its records, their parts, their browser texts
SUFFIXES = (".json", ".parts", ".texts")
#: lines taken and written as one document of a segment (decoded as one JSON array, as the report does)
BATCH = 512
#: the modules whose code decides what is taken of a record (:func:`fingerprint`)
TAKING_MODULES = ("evalpipe.report.taking", "evalpipe.report.extract", "evalpipe.report.browser_spool",
                  "evalpipe.report.browser", "evalpipe.report.frame", "evalpipe.frames",
                  "evalpipe.report.ner_errors", "evalpipe.report.reading", "evalpipe.metrics.spans",
                  "evalpipe.records", "evalpipe.jsonfast")
#: index.json larger than this is not an extract's (a segment is a few hundred bytes of it)
INDEX_LIMIT = 16 << 20
#: the fields a held record leaves out (those :func:`evalpipe.report.reading.read_held` drops, slim)
_DROPPED = frozenset((*UNREAD_FIELDS, *ON_DEMAND_FIELDS, *LEAN_FIELDS))


def extract_folder(samples: Path) -> Path:
    """The extract's folder of a samples file: ``samples.extract`` beside ``samples.jsonl``."""
    return samples.with_suffix(".extract")


#: the setting: "0" neither writes nor reads extracts (a report reads the samples files, as it always could)
ENV = "EVALPIPE_EXTRACT"


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether extracts are written and read (see :data:`ENV`)."""
    return environ.get(ENV, "").strip() != "0"


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
        _remove(extract_folder(samples) / "index.json")
        return None
    return ExtractWriter(samples, recorded_span_tasks(config), references)


@functools.cache
def fingerprint() -> str:
    """A digest of the code that decides what is taken of a record (:data:`TAKING_MODULES`): an extract
    taken by other code — an older or newer evalpipe, a local edit — is not used, so what a report
    shows never depends on whether an extract was there."""
    digest = hashlib.sha256(f"format {FORMAT}".encode())
    for name in TAKING_MODULES:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        digest.update(name.encode() + b"\0")
        digest.update(Path(origin).read_bytes() if origin and os.path.isfile(origin) else b"?")
    return digest.hexdigest()


# ---- writing ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Segment:
    """A consecutive byte range of a samples file and the extract its writer took of it (``NAME.json``,
    ``NAME.texts`` in ``folder``). Picklable: the scoring child hands its segments to the run."""

    folder: Path
    name: str
    size: int
    lines: int
    sha256: str
    #: the SHA-256 of its own files (:data:`SUFFIXES`: what a report reads of them is what its writer wrote)
    files_sha256: tuple[str, ...]
    #: the tasks its lines belong to, in order of appearance
    tasks: tuple[str, ...]
    #: those the writer took as span tasks, and those with prompt conditions (task → reference condition)
    span_tasks: tuple[str, ...]
    references: Mapping[str, str]
    #: the tasks whose parts were taken (every task without prompt conditions)
    parts_tasks: tuple[str, ...]
    #: task → the kind its rows were written for (:class:`_Texts`): ``N`` (NER), ``P`` (plain), ``NP`` (both)
    written: Mapping[str, str] = field(default_factory=dict)

    def files(self) -> tuple[Path, ...]:
        return tuple(self.folder / f"{self.name}{suffix}" for suffix in SUFFIXES)

    def entry(self, start: int) -> dict[str, Any]:
        return {"name": self.name, "start": start, "size": self.size, "lines": self.lines, "sha256": self.sha256,
                "files_sha256": list(self.files_sha256),
                "tasks": list(self.tasks), "span_tasks": list(self.span_tasks), "references": dict(self.references),
                "parts_tasks": list(self.parts_tasks), "written": dict(self.written)}

    def discard(self) -> None:
        for path in self.files():
            path.unlink(missing_ok=True)


class _Texts:
    """The browser texts of a segment's reference records, in the order taken: what
    :class:`ExtractSpool` adopts. ``add`` is a spool's. An entry is the record's part of a browser row
    as the page's JSON texts (:class:`~evalpipe.report.browser_spool.WrittenRow`): a line saying its
    kind and each text's length in bytes, then the texts — :func:`~evalpipe.report.browser.json_for_script`'s,
    so that no ``<``, ``>``, ``&``, U+2028 or U+2029 is in the file, which a report checks at once
    (:func:`_checked_texts`). A row of another kind (a task two runs read differently) is made from
    the record, as a row of a run without an extract is."""

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


class _Parts:
    """One task's parts as :class:`~evalpipe.report.taking.TaskParts` takes them, but under every key
    a record has (the report picks the keys its intervals read when it reads them)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.columns: dict[str, array[float]] = {}
        self.records = 0
        self.with_parts = False

    def add(self, record: Mapping[str, Any]) -> None:
        self.records += 1
        if record.get("error") is not None:
            return
        row = len(self.ids)
        self.ids.append(str(record.get("id")))
        if "parts" in record:
            self.with_parts = True
        parts = record.get("parts")
        if isinstance(parts, Mapping):
            for key, value in parts.items():
                column = self.columns.get(key)
                if column is None:
                    column = self.columns[key] = array("d", bytes(8 * row))
                column.append(_part(value))
        for column in self.columns.values():
            if len(column) == row:  # a key this record lacks: 0.0
                column.append(0.0)

    def json(self) -> dict[str, Any]:
        return {"ids": self.ids, "records": self.records, "with_parts": self.with_parts,
                "columns": {key: column.tolist() for key, column in self.columns.items()}}


def _part(value: Any) -> float:
    """A part's value as :class:`~evalpipe.report.taking.TaskParts` holds it: a number as a float, else 0.0."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


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
        """A batch's document, and its parts' (a file of their own: :func:`load_parts` reads only them)."""
        texts = _Texts(self._texts_handle, self._texts_sha, self._written)
        whole = WhileWhole((), self._variants, texts, FrameValues(FRAME_COLUMNS), None, starts,  # type: ignore[arg-type]
                           reading=self._reading)
        parts: dict[str, _Parts] = {}
        held_records = []
        for record in records:
            task = str(record.get("task"))
            self._tasks.setdefault(task)
            held = {name: value for name, value in record.items() if name not in _DROPPED}
            whole(record, held)
            if task not in self._references:  # every record of such a task is a reference one
                self._parts_tasks.setdefault(task)
                parts.setdefault(task, _Parts()).add(record)
                held.pop("parts", None)
            held_records.append(held)
        found = {task: (None if values is None else [_outcomes_json(o) for o in values])
                 for task, values in self._reading.drained().items()}
        document = {"starts": starts, "records": held_records, "frame": whole.frame.state() if whole.frame else {},
                    "digests": [d.hex() if d is not None else None for d in whole.digests],
                    "found": found, "texts": [texts.keys, texts.sizes]}
        return ((_dumps(document, separators=(",", ":")) + "\n").encode("utf-8"),
                (_dumps({task: p.json() for task, p in parts.items()}, separators=(",", ":")) + "\n").encode("utf-8"))

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
            with _suppressed():
                handle.close()
        for suffix in SUFFIXES:
            _remove(self.folder / f"{self.name}{suffix}")


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
        _remove(self.folder / "index.json")

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
                _remove(tmp)
        elif not self._failed:
            log.info("samples extract: %s is %d bytes, its segments %d: not written", self.samples, size, self._size)
        for path in self.folder.glob("*") if self.folder.is_dir() else ():
            if path.name not in keep:
                _remove(path)
        if not keep:
            with _suppressed():
                self.folder.rmdir()

    def abandon(self) -> None:
        """The samples file was not written: remove what was taken for it."""
        for _, segment in self._segments:
            segment.discard()
        self._segments = []


def _remove(path: Path) -> None:
    with _suppressed():
        path.unlink(missing_ok=True)


class _suppressed:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, value: Any, tb: Any) -> bool:
        return kind is not None and issubclass(kind, OSError)


# ---- reading ---------------------------------------------------------------------------------------

@dataclass
class Loaded:
    """What a report takes of a run's samples file, from its extract: the lines' offsets, what was taken
    of the records (with the held ones), and the spool of their browser texts (one per segment,
    chained by ``rest``; None where no texts are wanted)."""

    starts: list[int]
    taken: Taken
    spool: BrowserSpool | None


class ExtractUnusable(Exception):
    """Why an extract is not used (the report reads the samples file itself)."""


def load(samples: Path, span_tasks: Collection[str], references: Mapping[str, str],
         parts_keys: Mapping[str, tuple[str, ...]], texts: bool) -> Loaded | None:
    """The extract of ``samples`` as the report would have taken the file itself, or None where there is
    none or it is not usable (see the module docstring). ``span_tasks``, ``references`` and
    ``parts_keys`` (task → the keys its intervals read, for each task without prompt conditions) are
    what the report knows of the run; ``texts``: the browser texts are wanted."""
    index_path = extract_folder(samples) / "index.json"
    if not wanted() or not index_path.is_file():
        return None
    spools: list[BrowserSpool] = []
    checking: _Checking | None = None
    try:
        segments = _segments(index_path, samples, frozenset(span_tasks), references, parts_keys)
        # the files' bytes hashed beside the decoding (hashlib lets go of the interpreter's lock)
        checking = _Checking(samples, index_path.parent, segments, texts)
        whole = WhileWhole(span_tasks, {}, None, FrameValues(FRAME_COLUMNS),
                           {t: TaskParts(k) for t, k in parts_keys.items()}, ())
        records: list[dict[str, Any]] = []
        starts: list[int] = []
        for start, entry in segments:
            spool = _load_segment(index_path.parent, start, entry, parts_keys, texts, whole, records, starts)
            if spool is not None:
                spools.append(spool)
        checking.result()
    except (ExtractUnusable, OSError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            RecursionError, OverflowError) as exc:
        if checking is not None:
            checking.stop()
        for spool in spools:
            spool.close()
        log.info("samples extract of %s not used: %s", samples, exc)
        return None
    for spool, after in zip(spools, spools[1:]):
        spool.rest = after
    first = spools[0] if spools else (BrowserSpool() if texts else None)
    return Loaded(starts, whole.taken(records), first)


class _Checking:
    """The checks of an extract's files that read every byte, in a thread: each segment's bytes of the
    samples file hash to what its writer wrote (:func:`_verify`), and so do its texts files, which hold
    no markup (:func:`_checked_texts`). Its data files are hashed as they are decoded."""

    def __init__(self, samples: Path, folder: Path, segments: Sequence[tuple[int, dict[str, Any]]],
                 texts: bool) -> None:
        self._problem: BaseException | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._check, args=(samples, folder, segments, texts),
                                        name="evalpipe-extract-check", daemon=True)
        self._thread.start()

    def _check(self, samples: Path, folder: Path, segments: Sequence[tuple[int, dict[str, Any]]], texts: bool) -> None:
        try:
            _verify(samples, segments, self._stopped)
            for _, entry in segments if texts else ():
                if _checked_texts(folder / f"{entry['name']}.texts", self._stopped) != entry["files_sha256"][2]:
                    raise ExtractUnusable("a segment's texts changed since they were written")
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
            self._problem = exc

    def result(self) -> None:
        """Wait for the checks; raise what they found."""
        self._thread.join()
        if self._problem is not None:
            raise self._problem

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()


def _segments(index_path: Path, samples: Path, span_tasks: frozenset[str], references: Mapping[str, str],
              parts_keys: Mapping[str, tuple[str, ...]]) -> list[tuple[int, dict[str, Any]]]:
    """The index's segments, each checked against the run (the file's bytes are :func:`_verify`'s)."""
    if index_path.stat().st_size > INDEX_LIMIT:
        raise ExtractUnusable("index.json too large")
    index = json.loads(index_path.read_bytes())
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise ExtractUnusable("another format")
    if index.get("fingerprint") != fingerprint():
        raise ExtractUnusable("taken by other code")
    size = samples.stat().st_size
    if index.get("size") != size:
        raise ExtractUnusable("the samples file changed size")
    segments, at = [], 0
    for entry in index.get("segments") or ():
        if not isinstance(entry, dict) or entry.get("start") != at:
            raise ExtractUnusable("segments do not tile the file")
        tasks = set(map(str, entry["tasks"]))
        if set(entry["span_tasks"]) != tasks & span_tasks:
            raise ExtractUnusable("span tasks differ")
        if dict(entry["references"]) != {t: r for t, r in references.items() if t in tasks}:
            raise ExtractUnusable("prompt conditions differ")
        if set(entry["parts_tasks"]) != tasks & set(parts_keys):
            raise ExtractUnusable("tasks whose parts were taken differ")
        if not isinstance(entry["size"], int) or entry["size"] < 0 or not isinstance(entry["name"], str) \
                or "/" in entry["name"] or entry["name"].startswith("."):
            raise ExtractUnusable("a damaged segment entry")
        segments.append((at, entry))
        at += entry["size"]
    if at != size:
        raise ExtractUnusable("segments do not cover the file")
    return segments


def _verify(samples: Path, segments: Sequence[tuple[int, dict[str, Any]]], stopped: threading.Event) -> None:
    """Each segment's bytes of the samples file hash to what its writer wrote."""
    with samples.open("rb") as handle:
        for start, entry in segments:
            digest, left = hashlib.sha256(), entry["size"]
            handle.seek(start)
            while left > 0 and not stopped.is_set():
                chunk = handle.read(min(left, 1 << 22))
                if not chunk:
                    break
                digest.update(chunk)
                left -= len(chunk)
            if left or digest.hexdigest() != entry["sha256"]:
                raise ExtractUnusable("the samples file changed since its extract was written")


def _load_segment(folder: Path, start: int, entry: Mapping[str, Any], parts_keys: Mapping[str, tuple[str, ...]],
                  texts: bool, whole: WhileWhole, records: list[dict[str, Any]], starts: list[int],
                  ) -> BrowserSpool | None:
    """One segment's batches joined to ``whole`` (its held records to ``records``, its lines' offsets to
    ``starts``); the spool of its browser texts where they are wanted."""
    name, references = entry["name"], dict(entry["references"])
    sharing, outcomes = _Sharing(), _Outcomes()
    text_keys: list[int] = []
    text_sizes: list[int] = []
    lines = 0
    data_sha256, parts_sha256 = entry["files_sha256"][:2]
    digest, parts_digest = hashlib.sha256(), hashlib.sha256()
    with (folder / f"{name}.json").open("rb") as handle, (folder / f"{name}.parts").open("rb") as parts_handle:
        for line in handle:
            digest.update(line)
            document = _decoded(line)
            parts_line = parts_handle.readline()
            parts_digest.update(parts_line)
            parts_document = _decoded(parts_line)
            batch = [sharing.record(record) for record in document["records"]]
            offsets = [start + int(at) for at in document["starts"]]
            if len(offsets) != len(batch) or not all(type(r) is dict for r in batch):
                raise ExtractUnusable("a batch's offsets and records differ")
            whole.join(Taken(batch, _shared_frame(document["frame"], sharing),
                             [bytes.fromhex(d) if d is not None else None for d in document["digests"]],
                             {t: _task_parts(parts_document.get(t), k, sharing) for t, k in parts_keys.items()},
                             {str(t): (None if v is None else [outcomes.sample(o) for o in v])
                              for t, v in document["found"].items()}))
            records.extend(batch)
            starts.extend(offsets)
            lines += len(batch)
            keys, sizes = document["texts"]
            if [start + int(k) for k in keys] != [at for at, record in zip(offsets, batch)
                                                  if _is_reference(record, references)]:
                raise ExtractUnusable("texts that are not those of the reference records")
            text_keys.extend(start + int(k) for k in keys)
            text_sizes.extend(map(int, sizes))
        if parts_handle.readline():
            raise ExtractUnusable("a segment's parts and records differ")
    if digest.hexdigest() != data_sha256 or parts_digest.hexdigest() != parts_sha256:
        raise ExtractUnusable("a segment's file changed since it was written")
    if lines != entry["lines"]:
        raise ExtractUnusable("the segment's lines and records differ")
    if not texts:
        return None
    offsets_in_file, at = array("q"), 0
    for size in text_sizes:
        offsets_in_file.append(at)
        at += size
    handle = (folder / f"{name}.texts").open("rb")
    # the keys ascend (the reference records' lines, in order): the packed index is the entries' order
    spool = ExtractSpool.adopt(handle, (array("q", text_keys), offsets_in_file, array("q", text_sizes)), None)
    assert isinstance(spool, ExtractSpool)
    spool.kinds = {str(t): str(k) for t, k in (entry.get("written") or {}).items()}
    return spool


def _is_reference(record: Mapping[str, Any], references: Mapping[str, str]) -> bool:
    """As :meth:`~evalpipe.report.taking.SpanReading.is_reference`."""
    task, condition = str(record.get("task")), record.get("condition")
    return condition is None or task not in references or condition == references[task]


#: the frame's columns whose strings repeat from record to record, or are the records' own (the id)
_SHARED_COLUMNS = ("task", "id", "finish_reason", "error")


def _shared_frame(frame: dict[str, list[Any]], sharing: _Sharing) -> dict[str, list[Any]]:
    """A batch's frame values, their strings the held records' (the JSON decoder makes each anew)."""
    share = sharing.strings.setdefault
    for name in _SHARED_COLUMNS:
        column = frame.get(name)
        if column:
            frame[name] = [share(v, v) if type(v) is str and len(v) <= SHARED_CHARS else v for v in column]
    return frame


def _decoded(line: bytes) -> Any:
    """A document of an extract's file: by orjson (twice as fast), else — a NaN, an integer beyond 64
    bits, an escaped lone surrogate, what only :mod:`json` reads — by :mod:`json`; where both read a
    document, they read the same values."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


#: what no byte of an extract's texts file may be (:class:`_Texts`): the UTF-8 of < > & U+2028 U+2029
_MARKUP = (b"<", b">", b"&", "\u2028".encode(), "\u2029".encode())


def _checked_texts(path: Path, stopped: threading.Event | None = None) -> str:
    """The SHA-256 of a segment's texts file, read once; raises where it holds markup (see :class:`_Texts`):
    a text spliced from it into the page as it is can then never end the page's script element."""
    digest = hashlib.sha256()
    tail = b""
    with path.open("rb") as handle:
        while (chunk := handle.read(1 << 22)) and not (stopped is not None and stopped.is_set()):
            digest.update(chunk)
            window = tail + chunk  # a character's bytes split between two chunks
            if any(mark in window for mark in _MARKUP):
                raise ExtractUnusable("its texts hold markup")
            tail = chunk[-2:]
    return digest.hexdigest()


def _task_parts(document: Mapping[str, Any] | None, keys: tuple[str, ...], sharing: _Sharing) -> TaskParts:
    """:class:`TaskParts` of the keys the report reads, from a batch's parts under every key its records had."""
    parts = TaskParts(keys)
    if document is None:
        return parts
    share = sharing.strings.setdefault
    ids = [share(i, i) for i in map(str, document["ids"])]
    columns = document["columns"]
    zeros = [0.0] * len(ids)
    chosen = []
    for key in keys:
        column = columns.get(key, zeros)
        if len(column) != len(ids):
            raise ExtractUnusable("a parts column of another length")
        chosen.append(column)
    parts.ids = ids
    parts.values = array("d", [float(v) for row in zip(*chosen) for v in row]) if keys else array("d")
    parts.records = int(document["records"])
    parts.with_parts = bool(document["with_parts"])
    return parts


class _Outcomes:
    """Span outcomes decoded from an extract, equal ones one object — as :class:`OutcomeSharing` shares
    them, found by their decoded values (tuples of numbers and strings hash faster than the outcomes)."""

    def __init__(self) -> None:
        self._samples: dict[tuple[Any, ...], SampleOutcomes] = {}
        self._entities: dict[tuple[Any, ...], EntityOutcome] = {}
        self._spans: dict[tuple[Any, ...], Span] = {}

    def sample(self, document: Sequence[Sequence[Sequence[Any]]]) -> SampleOutcomes:
        gold, pred = document
        key = (tuple(map(_entity_key, gold)), tuple(map(_entity_key, pred)))
        found = self._samples.get(key)
        if found is None:
            found = self._samples[key] = (tuple(self._entity("gold", k) for k in key[0]),
                                          tuple(self._entity("pred", k) for k in key[1]))
        return found

    def _entity(self, side: str, key: tuple[Any, ...]) -> EntityOutcome:
        found = self._entities.get((side, key))
        if found is None:
            start, end, label, category, counterpart = key
            if not isinstance(category, str):
                raise ExtractUnusable("a damaged span outcome")
            found = self._entities[(side, key)] = EntityOutcome(
                side, self._span(start, end, label), category,  # type: ignore[arg-type]
                None if counterpart is None else self._span(*counterpart))
        return found

    def _span(self, start: Any, end: Any, label: Any) -> Span:
        if type(start) is not int or type(end) is not int or type(label) is not str:
            raise ExtractUnusable("a damaged span")
        key = (start, end, label)
        found = self._spans.get(key)
        if found is None:
            found = self._spans[key] = Span(start, end, label)
        return found


def _entity_key(entity: Sequence[Any]) -> tuple[Any, ...]:
    """An entity's outcome as an extract writes it (:func:`_entity_json`), as a tuple."""
    start, end, label, category, counterpart = entity
    return (start, end, label, category, None if counterpart is None else tuple(counterpart))


class ExtractSpool(BrowserSpool):
    """The browser texts of an extract's segment (:class:`_Texts` wrote them), as a spool that gives a
    row's part as written (:meth:`written`), each checked as it is read (:func:`_written_row`): what is
    not as a writer of extracts wrote it is None, and the row is made from the record. Its entries are
    those of the segment's reference records, in order (:meth:`entries`)."""

    #: task → the kind its rows were written for: ``N`` (NER), ``P`` (plain), ``NP`` (both)
    kinds: Mapping[str, str] = {}

    def entries(self) -> tuple[array[int], array[int]]:
        """Where each entry is in the file (offset and size), in the order of the segment's reference records."""
        assert self._packed is not None
        return self._packed[1], self._packed[2]

    def read_at(self, offset: int, size: int) -> bytes:
        """The bytes of an entry (:meth:`entries`), read without moving the file's position."""
        return self._read(offset, size)

    def _written_at(self, offset: int, size: int) -> WrittenRow | None:
        return _written_row(self._read(offset, size))

    def _texts_at(self, offset: int, size: int) -> SpooledTexts | None:
        return None  # the row is made from the record read whole (a kind the extract did not write)


#: the members a result's head may have (:func:`~evalpipe.report.browser_spool.result_head`), and its judge's
_HEAD = frozenset({"answer", "prediction_text", "scores", "parse_failed", "error", "reasoning", "diagnostics",
                   "entities"})
_JUDGE = frozenset({"judge"})
_KEY = frozenset({"task", "id"})
_loads = orjson.loads


def _written_row(data: bytes) -> WrittenRow | None:
    """A record's written part of a browser row, each text checked to be the JSON the page takes there
    (the file holds no markup: checked when it was adopted, :func:`_checked_texts`)."""
    end = data.find(b"\n", 0, 80)
    head = data[:end].split(b" ") if end > 0 else ()
    if len(head) != 6 or head[0] not in (b"N", b"P"):
        return None
    try:
        sizes = [int(n) for n in head[1:]]
    except ValueError:
        return None
    pieces, at = [], end + 1
    for size in sizes:
        if size < 0:
            return None
        pieces.append(data[at:at + size])
        at += size
    if at != len(data):
        return None
    key, input_json, gold, members, judge = pieces
    try:
        named = _loads(b"{" + key + b"}")
        if type(named) is not dict or named.keys() != _KEY or type(named["task"]) is not str \
                or type(named["id"]) is not str:
            return None
        if type(_loads(input_json)) is not dict or type(_loads(gold)) is not str:
            return None
        result = _loads(b"{" + members + b"}")
        if type(result) is not dict or not result.keys() <= _HEAD or type(result.get("entities", ())) not in (list, tuple):
            return None
        if judge and (type(judged := _loads(b"{" + judge + b"}")) is not dict or judged.keys() != _JUDGE
                      or type(judged["judge"]) is not dict):
            return None
        return WrittenRow(head[0] == b"N", key.decode("utf-8"), input_json.decode("utf-8"), gold.decode("utf-8"),
                          members.decode("utf-8"), judge.decode("utf-8"))
    except (orjson.JSONDecodeError, UnicodeDecodeError):
        return None
