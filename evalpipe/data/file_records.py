"""Data files read one way everywhere: records with the file and line they come from.

Every loader — shipped tasks, a user's task file, the CLUE, CBLUE, PromptCBLUE and Huatuo readers —
reads its files through here, so a broken file is always reported the same way, ``FILE:LINE:
FIELD: what is wrong``, before any request is sent:

* :func:`iter_records` — the same records one at a time, reading the file a block at a time where
  the container allows (JSON lines line by line, CSV/TSV row by row; a JSON array and parquet are
  read whole): a loader that streams holds one block, never the whole file (issue 15, memory flat
  in N). :func:`read_records` is its list.
* :func:`read_records` — a top-level JSON array of objects *or* JSON lines (detected from the
  first character; either container works for every file), CSV / TSV with a header row (by the
  file's extension), or parquet. Each :class:`Record` knows its 1-based line (for an array, the
  line its object starts on; for parquet, its row number).
* :func:`read_values` — JSON lines whose values need not be objects (:func:`iter_values` one at a time).
* :func:`text_blocks` / :func:`iter_lines` — a file's text a block (or a line) at a time, with the
  same errors as :func:`read_text`.
* :func:`read_json_object` — a file holding one JSON object.
* :func:`read_keyed_records` — one JSON object whose values are the records, keyed by their ids
  (PubMedQA's ``ori_pqal.json``), each with the line its value starts on.

Common rules: a UTF-8 byte-order mark is accepted (spreadsheet exports write one); bytes that are
not UTF-8 are an error naming the line and column (never a bare ``codec can't decode``); lines are
split on ``\\n`` only (``str.splitlines`` also breaks at U+2028, which JSON leaves unescaped in
strings); a record longer than :data:`MAX_RECORD_CHARS` is refused with its line, since no task
needs one and processing it would cost minutes and gigabytes; an empty file is an error.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
from array import array
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from evalpipe.data import strict_json
from evalpipe.data.errors import DataError

__all__ = [
    "MAX_RECORD_CHARS",
    "Record",
    "UniqueIds",
    "check_unique_ids",
    "iter_lines",
    "iter_records",
    "iter_table",
    "iter_values",
    "read_json_object",
    "read_keyed_records",
    "read_records",
    "read_table",
    "read_text",
    "read_values",
    "text_blocks",
]

#: the longest record (one JSON line, one CSV row, one array item) accepted, in characters: far
#: above any clinical note or LongHealth letter set (a few hundred thousand characters), far below
#: what would stall a run (a 50 MB line took minutes and gigabytes to align)
MAX_RECORD_CHARS = 5_000_000
TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t", ".tab": "\t"}
#: bytes read at a time by :func:`text_blocks`: small next to the file, large enough that decoding
#: and splitting stay in C (a 64 KiB block of CoNLL is ~6,000 lines)
BLOCK_BYTES = 64 * 1024
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Record:
    """One JSON object or table row, with the 1-based line it starts on (for error messages)."""

    fields: Mapping[str, Any]
    line: int | None
    path: Path

    def text(self, name: str, *, allow_empty: bool = False) -> str:
        """A required string field; a missing, non-string or (unless allowed) blank one is a DataError."""
        value = self.get(name, str)
        if not allow_empty and not value.strip():
            raise self.error(name, "empty")
        return cast("str", value)

    def get(self, name: str, kind: type | tuple[type, ...] = object, hint: str = "") -> Any:
        """``fields[name]`` checked for type; the error lists the fields the record does have."""
        if name not in self.fields:
            found = ", ".join(sorted(map(str, self.fields))) or "none"
            raise self.error(name, f"missing field (fields found: {found})" + (f"; {hint}" if hint else ""))
        value = self.fields[name]
        kinds = _kinds(kind)
        # a JSON true is not a number here, even though Python's bool is an int
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds and object not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise self.error(name, f"expected {names}, found {type(value).__name__}: {str(value)[:60]!r}")
        return value

    def error(self, name: str | None, problem: str) -> DataError:
        return DataError(self.path, self.line, name, problem)


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def read_text(path: str | Path, missing: str = "file not found") -> str:
    """The file as text (BOM dropped); not UTF-8 → DataError with the line and column of the bad byte."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, None, missing)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(path, None, None, f"cannot read the file ({exc.strerror or exc})") from None
    raw = raw.removeprefix(_BOM)  # (the line and column of a bad byte count from after it)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DataError(path, line, None, f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at column {column} "
                        "(save the file as UTF-8)") from None


def _not_utf8(path: Path, raw: bytes, exc: UnicodeDecodeError, first_line: int) -> DataError:
    line = first_line + raw.count(b"\n", 0, exc.start)
    column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
    return DataError(path, line, None, f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at column {column} "
                     "(save the file as UTF-8)")


def text_blocks(path: str | Path, missing: str = "file not found",
                block_bytes: int | None = None) -> Iterator[tuple[int, str]]:
    """The file's text as ``(first line number, text)`` blocks of about ``block_bytes`` (default
    :data:`BLOCK_BYTES`), each ending just after a ``\n`` (the last one wherever the file ends), with
    :func:`read_text`'s errors (file not found, unreadable, not UTF-8 with line and column; a leading
    BOM dropped). Joined, the blocks are exactly :func:`read_text`'s text; cut only after ``\n``, no
    line, character or ``\r\n`` is split. A file smaller than a block is decoded whole before
    anything is yielded, as by read_text."""
    path = Path(path)
    size = block_bytes or BLOCK_BYTES
    if not path.is_file():
        raise DataError(path, None, None, missing)
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise DataError(path, None, None, f"cannot read the file ({exc.strerror or exc})") from None
    with handle:
        line, pending = 1, []
        head = _read(path, handle, len(_BOM))
        if head != _BOM:
            pending.append(head)
        while True:
            chunk = _read(path, handle, size)
            end = not chunk
            cut = chunk.rfind(b"\n") + 1
            if not end and cut == 0:  # no line ends in this block: a long line, keep reading
                pending.append(chunk)
                continue
            raw = b"".join((*pending, chunk[:cut]))
            pending = [chunk[cut:]]
            if raw:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise _not_utf8(path, raw, exc, line) from None
                yield line, text
                line += raw.count(b"\n")
            if end:
                return


def _read(path: Path, handle: BinaryIO, size: int) -> bytes:
    try:
        return handle.read(size)
    except OSError as exc:
        raise DataError(path, None, None, f"cannot read the file ({exc.strerror or exc})") from None


def iter_lines(path: str | Path, missing: str = "file not found") -> Generator[tuple[int, str], None, None]:
    """``(1-based line number, line)`` for every line of the file, split on ``\n`` only (a ``\r``
    before it stays), read a block at a time (:func:`text_blocks`). A final ``\n`` ends the last
    line; it does not start an empty one."""
    for first, text in text_blocks(path, missing):
        lines = text.split("\n")
        if text.endswith("\n"):
            lines.pop()
        yield from enumerate(lines, start=first)


def _check_size(path: Path, line: int, size: int) -> None:
    if size > MAX_RECORD_CHARS:
        raise DataError(path, line, None, f"a record of {size:,} characters, over evalpipe's limit of "
                        f"{MAX_RECORD_CHARS:,} per record (is this really one sample?)")


def _json_lines(path: Path, lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, Any]]:
    for number, line in lines:
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        _check_size(path, number, len(line))
        try:
            yield number, strict_json.loads(path, number, line)
        except json.JSONDecodeError as exc:
            raise DataError(path, number, None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None


def _json_array(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    """Items of a top-level JSON array with the line each starts on (decoded one item at a time)."""
    pos = text.index("[") + 1
    line, counted = 1, 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            raise DataError(path, None, None, "not valid JSON: the top-level array is not closed")
        line += text.count("\n", counted, pos)
        counted = pos
        if text[pos] == "]":
            if text[pos + 1:].strip():
                raise DataError(path, line, None, "not valid JSON: text after the closing ]")
            return
        try:
            value, end = strict_json.raw_decode(path, line, text, pos)
        except json.JSONDecodeError as exc:
            raise DataError(path, exc.lineno, None, f"not valid JSON ({exc.msg})") from None
        _check_size(path, line, end - pos)
        yield line, value
        pos = end


def iter_values(path: str | Path, missing: str = "file not found") -> Iterator[tuple[int, Any]]:
    """``(line, value)`` for every item of a JSON array or every non-blank JSON line, one at a time:
    JSON lines are read a block at a time; a file whose first non-blank character is ``[`` is one
    JSON array, read whole."""
    path = Path(path)
    lines = iter_lines(path, missing)
    for number, line in lines:
        if not line.strip():
            continue
        if line.lstrip().startswith("["):
            lines.close()
            yield from _json_array(path, read_text(path, missing))
            return
        yield from _json_lines(path, itertools.chain([(number, line)], lines))
        return


def read_values(path: str | Path, missing: str = "file not found") -> list[tuple[int, Any]]:
    """``(line, value)`` for every item of a JSON array or every non-blank JSON line."""
    return list(iter_values(path, missing))


def _objects(path: Path, values: Iterable[tuple[int, Any]]) -> Iterator[Record]:
    for line, value in values:
        if not isinstance(value, dict):
            raise DataError(path, line, None, f"expected a JSON object, found {type(value).__name__}")
        yield Record(value, line, path)


def read_table(path: str | Path, delimiter: str | None = None, missing: str = "file not found",
               header: Sequence[str] | None = None) -> list[Record]:
    """CSV/TSV with a header row (or, for a file without one, the column names in ``header``);
    ``line`` is the physical line a row starts on (quoted fields may span lines). A row with another
    number of columns than the header is an error."""
    return list(iter_table(path, delimiter, missing, header))


def _text_lines(blocks: Iterable[tuple[int, str]]) -> Iterator[str]:
    """Lines as a text file opened with ``newline=""`` gives them (``\r``, ``\n`` and ``\r\n`` end a
    line, kept), block by block: a block ends after ``\n``, so no line ending is split between two."""
    for _, text in blocks:
        yield from io.StringIO(text, newline="")


def iter_table(path: str | Path, delimiter: str | None = None, missing: str = "file not found",
               header: Sequence[str] | None = None) -> Iterator[Record]:
    """:func:`read_table`'s rows one at a time, the file read a block at a time."""
    path = Path(path)
    delimiter = delimiter or TABLE_SUFFIXES.get(path.suffix.lower(), ",")
    reader = csv.reader(_text_lines(text_blocks(path, missing)), delimiter=delimiter)
    if header is None:
        try:
            header = next(reader)
        except StopIteration:
            raise DataError(path, None, None, "empty file (expected a header row)") from None
        except csv.Error as exc:
            raise DataError(path, 1, None, f"not a valid table ({exc})") from None
    given = header is not None and reader.line_num == 0
    header = [h.strip() for h in header]
    _check_columns(path, header, None if given else 1)
    start = reader.line_num + 1
    try:
        for row in reader:
            if not any(cell.strip() for cell in row):
                start = reader.line_num + 1
                continue
            if len(row) != len(header):
                raise DataError(path, start, None, f"{len(row)} columns, the header has {len(header)}")
            _check_size(path, start, sum(map(len, row)))
            record = Record(dict(zip(header, row)), start, path)
            start = reader.line_num + 1
            yield record
    except csv.Error as exc:
        raise DataError(path, reader.line_num, None, f"not a valid table ({exc})") from None


def _check_columns(path: Path, header: Sequence[str], line: int | None) -> None:
    """Column names must be unique: a record keeps one value per name, so a second column of a
    name would silently replace the first."""
    seen: dict[str, int] = {}
    for number, name in enumerate(header, start=1):
        if name in seen:
            raise DataError(path, line, name, f"column name given twice (columns {seen[name]} and {number}); "
                            "rename one")
        seen[name] = number


def _parquet(path: Path, missing: str) -> list[Record]:
    if not path.is_file():
        raise DataError(path, None, None, missing)
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise DataError(path, None, None, "reading parquet needs the pyarrow package") from None
    try:
        rows = pq.read_table(path).to_pylist()
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise DataError(path, None, None, f"not a readable parquet file ({exc})") from None
    return [Record(row, i + 1, path) for i, row in enumerate(rows)]


def read_records(path: str | Path, missing: str = "file not found", header: Sequence[str] | None = None,
                 suffix: str | None = None) -> list[Record]:
    """Every record of a data file, whatever its container (see the module docstring).

    ``missing`` is the message when the file does not exist (say where the data is published);
    ``header`` names the columns of a CSV/TSV file without a header row; ``suffix`` decides the
    container instead of the file's extension (``".tsv"``, ``".jsonl"``, ``".parquet"`` …)."""
    return list(iter_records(path, missing, header, suffix))


def iter_records(path: str | Path, missing: str = "file not found", header: Sequence[str] | None = None,
                 suffix: str | None = None) -> Iterator[Record]:
    """:func:`read_records` one record at a time (JSON lines and tables read a block at a time); an
    empty file is the same error, raised once the end is reached."""
    path = Path(path)
    suffix = (suffix or path.suffix).lower()
    if suffix == ".parquet":
        records: Iterable[Record] = _parquet(path, missing)
    elif suffix in TABLE_SUFFIXES:
        records = iter_table(path, TABLE_SUFFIXES[suffix], missing=missing, header=header)
    else:
        records = _objects(path, iter_values(path, missing))
    empty = True
    for record in records:
        empty = False
        yield record
    if empty:
        raise DataError(path, None, None, "no records (empty file?)")


def read_json_object(path: str | Path, missing: str = "file not found") -> Mapping[str, Any]:
    """A file holding one JSON object (LongHealth's benchmark)."""
    path = Path(path)
    text = read_text(path, missing)
    try:
        value = strict_json.loads(path, None, text)
    except json.JSONDecodeError as exc:
        raise DataError(path, exc.lineno, None, f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise DataError(path, None, None, f"expected a JSON object at the top level, found {type(value).__name__}")
    return value


def read_keyed_records(path: str | Path, key_field: str, missing: str = "file not found") -> list[Record]:
    """Records of a file holding one JSON object whose values are objects, keyed by id: each value
    becomes a Record with its key added as ``key_field`` and the line the value starts on."""
    path = Path(path)
    text = read_text(path, missing)
    start = len(text) - len(text.lstrip())
    if not text[start:start + 1] == "{":
        raise DataError(path, None, None, "expected one JSON object whose values are the records")
    pos, line, counted, out = start + 1, 1, 0, []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            raise DataError(path, None, None, "not valid JSON: the top-level object is not closed")
        line += text.count("\n", counted, pos)
        counted = pos
        if text[pos] == "}":
            rest = text[pos + 1:]
            if rest.strip():
                after = line + text.count("\n", pos, pos + 1 + len(rest) - len(rest.lstrip()))
                raise DataError(path, after, None, "text after the object that holds the records (JSON lines, or "
                                "two objects?); this file must be one JSON object: set data.format: jsonl for "
                                "JSON lines")
            break
        try:
            key, pos = strict_json.raw_decode(path, line, text, pos)
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
            if text[pos:pos + 1] != ":" or not isinstance(key, str):
                raise DataError(path, line, None, "not valid JSON: expected \"key\": value")
            pos += 1
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
            line += text.count("\n", counted, pos)
            counted = pos
            value, end = strict_json.raw_decode(path, line, text, pos)
        except json.JSONDecodeError as exc:
            raise DataError(path, exc.lineno, None, f"not valid JSON ({exc.msg})") from None
        _check_size(path, line, end - pos)
        if not isinstance(value, dict):
            raise DataError(path, line, key, f"expected a JSON object, found {type(value).__name__}")
        if key_field in value:
            raise DataError(path, line, key_field, "the record has a field of this name already")
        out.append(Record({key_field: key, **value}, line, path))
        pos = end
    if not out:
        raise DataError(path, None, None, "no records (empty object?)")
    return out


def check_unique_ids(records: Iterable[Record], ids: Iterable[str], field: str,
                     only: Callable[[str], bool] | None = None) -> None:
    """Sample ids must be unique (answers are stored and compared by id): the first id seen before
    is a DataError at its record, naming the line of the first. ``only`` limits the ids remembered
    to those it accepts (the suspects of :class:`UniqueIds`), so a second pass over a long file
    holds a handful of ids, not all of them."""
    seen: dict[str, int | None] = {}
    for record, value in zip(records, ids):
        if only is not None and not only(value):
            continue
        if value in seen:
            raise record.error(field, f"duplicate id {value!r} (first on line {seen[value]})")
        seen[value] = record.line


class UniqueIds:
    """Whether the ids of a stream are unique, without holding the ids: each id is kept as a 64-bit
    BLAKE2b digest (8 bytes, where a short id string costs ~60), and :meth:`suspects` are the
    digests seen more than once. Digests can collide (about 1 in 10^10 for 47,000 ids), so a
    suspect is only a reason to look again: the caller re-reads the ids and runs
    :func:`check_unique_ids` with ``only=ids.suspected`` to raise the exact error, or nothing."""

    def __init__(self) -> None:
        self._digests = array("Q")
        self._suspects: frozenset[int] = frozenset()

    @staticmethod
    def digest(value: str) -> int:
        return int.from_bytes(hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8).digest(),
                              "little")

    def add(self, value: str) -> None:
        self._digests.append(self.digest(value))

    def suspects(self) -> frozenset[int]:
        """The digests added more than once (empty: every id is unique, for certain)."""
        import numpy as np

        ordered = np.sort(np.frombuffer(self._digests, dtype=np.uint64)) if self._digests else None
        if ordered is None:
            return frozenset()
        repeated = ordered[1:][ordered[1:] == ordered[:-1]]
        self._suspects = frozenset(int(d) for d in repeated)
        return self._suspects

    def suspected(self, value: str) -> bool:
        """Whether ``value``'s digest is one of the last :meth:`suspects`."""
        return self.digest(value) in self._suspects
