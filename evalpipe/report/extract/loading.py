"""Reading a run's extract instead of its samples file, every check first (see :mod:`evalpipe.report.extract`)."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from array import array
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from evalpipe.records import Span
from evalpipe.report.browser_spool import BrowserSpool
from evalpipe.report.extract.layout import FORMAT, INDEX_LIMIT, ExtractUnusable, extract_folder, fingerprint, wanted
from evalpipe.report.extract.rows import ExtractSpool
from evalpipe.report.frame import FrameValues
from evalpipe.report.ner_errors import EntityOutcome, SampleOutcomes
from evalpipe.report.sharing import SHARED_CHARS, _Sharing
from evalpipe.report.taking import FRAME_COLUMNS, Digests, TaskParts, Taken, WhileWhole, is_reference

__all__ = ["Loaded", "checked_texts", "load"]

log = logging.getLogger(__name__)


@dataclass
class Loaded:
    """What a report takes of a run's samples file, from its extract: the lines' offsets, what was taken
    of the records (with the held ones), and the spool of their browser texts (one per segment,
    chained by ``rest``; None where no texts are wanted)."""

    starts: list[int]
    taken: Taken
    spool: BrowserSpool | None


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
    no markup (:func:`checked_texts`). Its data files are hashed as they are decoded."""

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
                if checked_texts(folder / f"{entry['name']}.texts", self._stopped) != entry["files_sha256"][2]:
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
    name, references = entry["name"], {str(t): str(r) for t, r in entry["references"].items()}
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
                             _digests(document["digests"]),
                             {t: _task_parts(parts_document.get(t), k, sharing) for t, k in parts_keys.items()},
                             {str(t): (None if v is None else [outcomes.sample(o) for o in v])
                              for t, v in document["found"].items()}))
            records.extend(batch)
            starts.extend(offsets)
            lines += len(batch)
            keys, sizes = document["texts"]
            if [start + int(k) for k in keys] != [at for at, record in zip(offsets, batch)
                                                  if is_reference(record, references)]:
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


def _digests(hexes: Sequence[str | None]) -> Digests:
    digests = Digests()
    digests.extend_hex(hexes)
    return digests


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


def checked_texts(path: Path, stopped: threading.Event | None = None) -> str:
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
    """:class:`TaskParts` of the keys the report reads, from a batch's parts under every key its records
    had (:class:`~evalpipe.report.taking.AllParts`), its ids the held records' strings."""
    if document is None:
        return TaskParts(keys)
    share = sharing.strings.setdefault
    return TaskParts.of_columns(keys, [share(i, i) for i in map(str, document["ids"])], document["columns"],
                                int(document["records"]), bool(document["with_parts"]))


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


