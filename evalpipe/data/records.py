"""Data files read one way everywhere: records with the file and line they come from.

Every loader — shipped tasks, a user's task file, the CLUE, CBLUE, PromptCBLUE and Huatuo readers —
reads its files through here, so a broken file is always reported the same way, ``FILE:LINE:
FIELD: what is wrong``, before any request is sent:

* :func:`read_records` — a top-level JSON array of objects *or* JSON lines (detected from the
  first character; either container works for every file), CSV / TSV with a header row (by the
  file's extension), or parquet. Each :class:`Record` knows its 1-based line (for an array, the
  line its object starts on; for parquet, its row number).
* :func:`read_values` — JSON lines whose values need not be objects.
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
import io
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.data.errors import DataError

__all__ = [
    "MAX_RECORD_CHARS",
    "Record",
    "check_unique_ids",
    "read_json_object",
    "read_keyed_records",
    "read_records",
    "read_table",
    "read_text",
    "read_values",
]

#: the longest record (one JSON line, one CSV row, one array item) accepted, in characters: far
#: above any clinical note or LongHealth letter set (a few hundred thousand characters), far below
#: what would stall a run (a 50 MB line took minutes and gigabytes to align)
MAX_RECORD_CHARS = 5_000_000
TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t", ".tab": "\t"}


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
        return value

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
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DataError(path, line, None, f"not valid UTF-8: byte 0x{raw[exc.start]:02x} at column {column} "
                        "(save the file as UTF-8)") from None


def _check_size(path: Path, line: int, size: int) -> None:
    if size > MAX_RECORD_CHARS:
        raise DataError(path, line, None, f"a record of {size:,} characters, over evalpipe's limit of "
                        f"{MAX_RECORD_CHARS:,} per record (is this really one sample?)")


def _json_lines(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        _check_size(path, number, len(line))
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(path, number, None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None


def _json_array(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    """Items of a top-level JSON array with the line each starts on (decoded one item at a time)."""
    decoder = json.JSONDecoder()
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
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise DataError(path, exc.lineno, None, f"not valid JSON ({exc.msg})") from None
        _check_size(path, line, end - pos)
        yield line, value
        pos = end


def read_values(path: str | Path, missing: str = "file not found") -> list[tuple[int, Any]]:
    """``(line, value)`` for every item of a JSON array or every non-blank JSON line."""
    path = Path(path)
    text = read_text(path, missing)
    stripped = text.lstrip()
    values = list(_json_array(path, text) if stripped.startswith("[") else _json_lines(path, text))
    return values


def _objects(path: Path, values: Sequence[tuple[int, Any]]) -> list[Record]:
    out = []
    for line, value in values:
        if not isinstance(value, dict):
            raise DataError(path, line, None, f"expected a JSON object, found {type(value).__name__}")
        out.append(Record(value, line, path))
    return out


def read_table(path: str | Path, delimiter: str | None = None, missing: str = "file not found",
               header: Sequence[str] | None = None) -> list[Record]:
    """CSV/TSV with a header row (or, for a file without one, the column names in ``header``);
    ``line`` is the physical line a row starts on (quoted fields may span lines). A row with another
    number of columns than the header is an error."""
    path = Path(path)
    delimiter = delimiter or TABLE_SUFFIXES.get(path.suffix.lower(), ",")
    text = read_text(path, missing)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    if header is None:
        try:
            header = next(reader)
        except StopIteration:
            raise DataError(path, None, None, "empty file (expected a header row)") from None
        except csv.Error as exc:
            raise DataError(path, 1, None, f"not a valid table ({exc})") from None
    header = [h.strip() for h in header]
    rows = []
    start = reader.line_num + 1
    try:
        for row in reader:
            if not any(cell.strip() for cell in row):
                start = reader.line_num + 1
                continue
            if len(row) != len(header):
                raise DataError(path, start, None, f"{len(row)} columns, the header has {len(header)}")
            _check_size(path, start, sum(map(len, row)))
            rows.append(Record(dict(zip(header, row)), start, path))
            start = reader.line_num + 1
    except csv.Error as exc:
        raise DataError(path, reader.line_num, None, f"not a valid table ({exc})") from None
    return rows


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
    path = Path(path)
    suffix = (suffix or path.suffix).lower()
    if suffix == ".parquet":
        out = _parquet(path, missing)
    elif suffix in TABLE_SUFFIXES:
        out = read_table(path, TABLE_SUFFIXES[suffix], missing=missing, header=header)
    else:
        out = _objects(path, read_values(path, missing))
    if not out:
        raise DataError(path, None, None, "no records (empty file?)")
    return out


def read_json_object(path: str | Path, missing: str = "file not found") -> Mapping[str, Any]:
    """A file holding one JSON object (LongHealth's benchmark)."""
    path = Path(path)
    text = read_text(path, missing)
    try:
        value = json.loads(text)
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
    decoder = json.JSONDecoder()
    pos, line, counted, out = start + 1, 1, 0, []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text):
            raise DataError(path, None, None, "not valid JSON: the top-level object is not closed")
        line += text.count("\n", counted, pos)
        counted = pos
        if text[pos] == "}":
            break
        try:
            key, pos = decoder.raw_decode(text, pos)
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
            if text[pos:pos + 1] != ":" or not isinstance(key, str):
                raise DataError(path, line, None, "not valid JSON: expected \"key\": value")
            pos += 1
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
            line += text.count("\n", counted, pos)
            counted = pos
            value, end = decoder.raw_decode(text, pos)
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


def check_unique_ids(records: Sequence[Record], ids: Sequence[str], field: str) -> None:
    """Sample ids must be unique (answers are stored and compared by id)."""
    seen: dict[str, int | None] = {}
    for record, value in zip(records, ids):
        if value in seen:
            raise record.error(field, f"duplicate id {value!r} (first on line {seen[value]})")
        seen[value] = record.line
