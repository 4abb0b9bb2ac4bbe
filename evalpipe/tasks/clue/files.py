"""Finding and reading the CLUE data files: JSON lines, JSON arrays and CSV, validated.

Most CLUE data cannot ship with the project (PhysioNet credentialed access, or a licence that
forbids redistribution), so the user points at it with ``--data-dir DIR`` (files under their
distributed names, directly in DIR or in the sub-folder CLUE's own scripts use, e.g.
``DIR/MedNLI/mli_test_v1.jsonl``) or ``--data TASK=PATH``. A file that cannot be found is a
:class:`DataError` that says which file is expected, where it is published, and whether it needs
credentialed access — the user should never have to read code to find out what to download.

Readers validate as they go and name file, line and field, because a silently mis-read gold file
makes every number wrong.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.data.errors import DataError
from evalpipe.data.jsonl import read_json_lines


@dataclass(frozen=True)
class DataFile:
    """Where one data file of a task comes from.

    ``name`` is the distributed file name; ``also`` are accepted alternative names (e.g. the
    JSON-lines form of a JSON array); ``subdir`` is the folder CLUE's scripts keep it in.
    """

    name: str
    dataset: str
    published: str
    credentialed: bool
    subdir: str | None = None
    also: tuple[str, ...] = ()
    #: how to obtain it when it is not a plain download (e.g. generated from MIMIC-IV)
    how: str = ""

    def names(self) -> tuple[str, ...]:
        return (self.name, *self.also)

    def access(self) -> str:
        if self.credentialed:
            return "credentialed access (PhysioNet account, CITI training, signed data use agreement)"
        return "public, but not redistributed with evalpipe"

    def missing_message(self, looked: Sequence[Path]) -> str:
        where = ", ".join(str(p) for p in looked) if looked else "nowhere (no --data-dir or --data given)"
        how = f"; {self.how}" if self.how else ""
        return (
            f"{self.name} not found (looked in: {where}). {self.dataset} is published at {self.published} "
            f"({self.access()}){how}. Pass --data-dir DIR with the file under its distributed name, "
            "or --data TASK=PATH."
        )


def candidate_paths(spec: DataFile, data_dir: Path | None) -> list[Path]:
    """Every place a file may be under ``data_dir``, in the order they are tried."""
    if data_dir is None:
        return []
    folders = [Path(data_dir)] + ([Path(data_dir) / spec.subdir] if spec.subdir else [])
    return [folder / name for folder in folders for name in spec.names()]


def locate(spec: DataFile, explicit: Path | None, data_dir: Path | None, shipped: Path | None = None) -> Path:
    """The file to read: the explicit path, else the first candidate under ``data_dir``, else ``shipped``.

    Raises DataError (naming the file, where it is published and its access terms) if none exists.
    """
    if explicit is not None:
        if not Path(explicit).is_file():
            raise DataError(explicit, None, None, f"file not found (expected {spec.dataset}: {spec.name}; "
                            f"published at {spec.published}, {spec.access()})")
        return Path(explicit)
    looked = candidate_paths(spec, data_dir)
    for path in looked:
        if path.is_file():
            return path
    if shipped is not None and shipped.is_file():
        return shipped
    raise DataError(looked[0] if looked else spec.name, None, None, spec.missing_message(looked))


def problem_locating(spec: DataFile, explicit: Path | None, data_dir: Path | None,
                     shipped: Path | None = None) -> str | None:
    """The DataError message :func:`locate` would raise, or None when the file is there (cheap)."""
    try:
        locate(spec, explicit, data_dir, shipped)
    except DataError as exc:
        return str(exc)
    return None


# ---- records ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Record:
    """One JSON object or CSV row, with the 1-based line it starts on (for error messages)."""

    fields: Mapping[str, Any]
    line: int | None
    path: Path

    def text(self, name: str, *, allow_empty: bool = False) -> str:
        """A required string field; a missing, non-string or (unless allowed) blank one is a DataError."""
        if name not in self.fields:
            raise DataError(self.path, self.line, name, "missing field")
        value = self.fields[name]
        if not isinstance(value, str):
            raise DataError(self.path, self.line, name, f"expected a string, found {type(value).__name__}")
        if not allow_empty and not value.strip():
            raise DataError(self.path, self.line, name, "empty")
        return value

    def error(self, name: str | None, problem: str) -> DataError:
        return DataError(self.path, self.line, name, problem)


def _object(path: Path, line: int, value: Any) -> Record:
    if not isinstance(value, dict):
        raise DataError(path, line, None, f"expected a JSON object, found {type(value).__name__}")
    return Record(value, line, path)


def read_jsonl(path: str | Path) -> list[Record]:
    """JSON lines: one object per non-blank line."""
    path = Path(path)
    out = [_object(path, line_no, value) for line_no, value in read_json_lines(path)]
    if not out:
        raise DataError(path, None, None, "no records (empty file?)")
    return out


def read_json_or_jsonl(path: str | Path) -> list[Record]:
    """A JSON array of objects, or JSON lines (CLUE's generators write lines, its scorers read arrays).

    For an array, ``line`` is the line on which each object starts.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, None, "file not found")
    if _first_character(path) != "[":
        return read_jsonl(path)  # JSON lines: read once, line by line
    text = path.read_text(encoding="utf-8-sig")
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(path, exc.lineno, None, f"not valid JSON ({exc.msg})") from None
    if not isinstance(items, list):
        raise DataError(path, None, None, "expected a JSON array of objects")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise DataError(path, None, f"[{index}]", f"expected a JSON object, found {type(item).__name__}")
    starts = list(_array_item_lines(text))  # one per object, since every item is an object
    out = [Record(item, starts[i] if i < len(starts) else None, path) for i, item in enumerate(items)]
    if not out:
        raise DataError(path, None, None, "no records (empty array)")
    return out


def _first_character(path: Path) -> str:
    """The first non-whitespace character of a text file ("" if none), without reading it all."""
    with path.open(encoding="utf-8-sig") as handle:
        while chunk := handle.read(4096):
            stripped = chunk.lstrip()
            if stripped:
                return stripped[0]
    return ""


def _array_item_lines(text: str) -> Iterator[int]:
    """Line numbers where the top-level array's objects start (a light scan, strings respected)."""
    depth = 0
    line = 1
    in_string = escaped = False
    for ch in text:
        if ch == "\n":
            line += 1
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            if ch == "{" and depth == 1:
                yield line
            depth += 1
        elif ch in "]}":
            depth -= 1


def read_json_object(path: str | Path) -> Mapping[str, Any]:
    """A file holding one JSON object (LongHealth's benchmark)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, None, "file not found")
    try:
        value = json.loads(path.read_text(encoding="utf-8-sig"))
    except json.JSONDecodeError as exc:
        raise DataError(path, exc.lineno, None, f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise DataError(path, None, None, f"expected a JSON object at the top level, found {type(value).__name__}")
    return value


def read_csv(path: str | Path, required: Sequence[Sequence[str]]) -> tuple[list[Record], dict[str, str]]:
    """A comma-separated file with a header row.

    ``required`` lists, per needed column, the accepted header names (first found wins); returns
    the rows and a map from the first accepted name to the header actually present. ``line`` is
    the physical line a row starts on (quoted fields may span lines).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(path, None, None, "file not found")
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise DataError(path, None, None, "empty file (expected a header row)") from None
        columns: dict[str, str] = {}
        for names in required:
            found = next((n for n in names if n in header), None)
            if found is None:
                raise DataError(path, 1, names[0], f"missing column (header has: {', '.join(header)})")
            columns[names[0]] = found
        rows = []
        start = reader.line_num + 1
        for row in reader:
            if not any(cell.strip() for cell in row):
                start = reader.line_num + 1
                continue
            if len(row) != len(header):
                raise DataError(path, start, None, f"{len(row)} columns, the header has {len(header)}")
            rows.append(Record(dict(zip(header, row)), start, path))
            start = reader.line_num + 1
    if not rows:
        raise DataError(path, None, None, "no rows after the header")
    return rows, columns


def check_unique_ids(records: Sequence[Record], ids: Sequence[str], field: str) -> None:
    seen: dict[str, int] = {}
    for record, value in zip(records, ids):
        if value in seen:
            raise record.error(field, f"duplicate id {value!r} (first on line {seen[value]})")
        seen[value] = record.line
