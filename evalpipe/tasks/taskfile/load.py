"""A task file's data as examples: read the files, map the fields, let the kind read the gold.

* **Reading** goes through :mod:`evalpipe.data.file_records` (JSON lines or array, a JSON object of
  records keyed by id, CSV/TSV with or without a header row, parquet) or :mod:`evalpipe.data.conll`
  (CoNLL: one record per sentence, fields ``tokens`` and ``tags``), so every error reads
  ``FILE:LINE: FIELD: what is wrong``, before any request is sent.
* **Inputs**: each template variable of ``fields.inputs`` is taken from its field (the first present
  of alternative names). Text must not be blank unless the input is ``optional``; numbers become
  their text; lists and objects are kept for templates to loop over. For a table every input's
  column is checked against the header first (one error at line 1, not one per row).
* **Ids**: from ``fields.id`` written by ``id_format``, else (or where a record lacks it) by
  ``row_id`` from the split and the 0-based row; ids must be unique in a file.
* **Shots** never come from the evaluated rows: from another split's file (``shots.source``), or
  ``held_out`` — ``shots.count`` rows of the evaluated file chosen by a shuffle of the row indices
  with ``random.Random(shots.seed or 0)`` (the first ``count`` positions, in shuffle order, are the
  shot pool; the other rows are scored in file order). CLUE's reference does exactly this with seed 1.
* **Meta** of every example: ``file``, ``line``, ``row`` (and ``shuffle_position`` when held out).
* **Streaming** (memory flat in N, issue 15): the evaluated examples are an
  :class:`~evalpipe.data.stream.ExampleStream` that reads the file again on each pass — records a
  block at a time (CoNLL and JSON lines line by line, CSV/TSV row by row; a JSON array, a JSON
  object of records and parquet are read whole), the kind reading :data:`CHUNK` records at a time.
  Every error is the one the whole-file reading gives, raised when the pass reaches the bad record
  (ids: a digest per id, the duplicate found exactly by a second pass). Examples are held in memory
  (a tuple) where that is needed: a kind that reads the file as a whole (``Kind.whole_file``),
  held-out shots (a shuffle of all rows), and every shot pool (small).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

from evalpipe.data.conll import iter_conll
from evalpipe.data.errors import DataError
from evalpipe.data.file_records import Record, UniqueIds, check_unique_ids, iter_records, read_keyed_records
from evalpipe.data.stream import Examples, ExampleStream, materialize
from evalpipe.records import Example
from evalpipe.tasks.base import LoadOptions, TaskData
from evalpipe.tasks.kinds.base import Drafted, FileReading, Kind
from evalpipe.tasks.taskfile import locate
from evalpipe.tasks.taskfile.schema import TaskFile

#: extension → format for ``data.format: auto``
EXTENSIONS = {".jsonl": "jsonl", ".json": "json", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv", ".tab": "tsv",
              ".parquet": "parquet", ".conll": "conll", ".bio": "conll", ".iob": "conll", ".iob2": "conll"}
#: the field that holds a record's key in a ``json_object`` file
KEY_FIELD = "_key"
#: records a kind reads at a time when a file is streamed: enough that the per-chunk work stays
#: small next to the reading, few enough (~2 MB of examples) that a chunk is nothing next to a file
CHUNK = 1024


def file_format(task: TaskFile, path: Path) -> str:
    if task.data.format != "auto":
        return cast("str", task.data.format)
    fmt = EXTENSIONS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(path, None, None, f"cannot tell the format from the extension {path.suffix or '(none)'!r}; "
                        "set data.format in the task file (jsonl, json, json_object, csv, tsv, parquet, conll)")
    return fmt


def read_file(task: TaskFile, path: Path) -> list[Record]:
    """Every record of ``path`` in the task's format."""
    return list(iter_file(task, path))


def iter_file(task: TaskFile, path: Path) -> Iterator[Record]:
    """The records of ``path`` in the task's format, one at a time (read a block at a time where the
    format allows: :func:`~evalpipe.data.file_records.iter_records`, :func:`~evalpipe.data.conll.iter_conll`)."""
    fmt = file_format(task, path)
    if fmt == "conll":
        return (Record({"tokens": s.tokens, "tags": s.tags}, s.line, path) for s in iter_conll(path))
    if fmt == "json_object":
        return iter(read_keyed_records(path, KEY_FIELD))
    suffix = {"jsonl": ".jsonl", "json": ".json", "csv": ".csv", "tsv": ".tsv", "parquet": ".parquet"}[fmt]
    return iter_records(path, header=task.data.columns, suffix=suffix)


def _check_header(task: TaskFile, records: Sequence[Record], path: Path) -> None:
    """For a table: every input has a column, optional or not (a table's columns are fixed, so a missing
    one is a misconfiguration, not an empty value); one error naming the header."""
    if file_format(task, path) not in ("csv", "tsv") or not records:
        return
    header = list(records[0].fields)
    for fields in task.fields.inputs.values():
        names = fields if isinstance(fields, list) else [fields]
        if not any(f in header for f in names):
            line = None if task.data.columns else 1
            raise DataError(path, line, names[0], f"missing column (header has: {', '.join(header)})")


def _value(record: Record, name: str, fields: str | list[str], optional: bool) -> Any:
    names = fields if isinstance(fields, list) else [fields]
    found = next((f for f in names if f in record.fields), None)
    if found is None:
        if optional:
            return ""
        record.get(names[0])  # raises "missing field (fields found: …)"
        raise AssertionError(f"{names[0]!r} is not a field, yet Record.get found it")
    value = record.fields[found]
    if value is None or (isinstance(value, str) and not value.strip()):
        if optional:
            return "" if value is None else value
        raise record.error(found, "empty" if value is not None else "null")
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    return value


def _input(task: TaskFile, record: Record, name: str, fields: str | list[str]) -> Any:
    """An input's value (:func:`_value`); one of ``fields.lists`` is a list (a text: a one-item list)."""
    value = _value(record, name, fields, name in task.fields.optional)
    if name not in task.fields.lists:
        return value
    if isinstance(value, str):
        return [value] if value else []
    if not isinstance(value, list):
        found = next((f for f in (fields if isinstance(fields, list) else [fields]) if f in record.fields), name)
        raise record.error(found, f"expected a list (or one text), found {type(value).__name__}")
    return value


def _sample_id(task: TaskFile, record: Record, split: str, row: int) -> str:
    fields = task.fields
    value = record.fields.get(fields.id) if fields.id is not None else None
    if value is not None and str(value).strip():
        return fields.id_format.format(id=str(value).strip(), split=split, row=row)
    if fields.id is not None and fields.row_id is None:
        raise record.error(fields.id, "missing (every record needs an id)")
    return (fields.row_id or "{split}-{row}").format(split=split, row=row)


#: a hook's record preparation (see :func:`load_task_data`)
Prepare = Callable[[Record], Record]


def read_examples(task: TaskFile, kind: Kind, path: Path, split: str,
                  prepare: Prepare | None = None, args: Mapping[str, Any] | None = None,
                  facts: dict[str, Any] | None = None) -> tuple[Example, ...]:
    """The examples of one file (ids unique), in file order, in memory; an error carries the split's
    note. The kind reads every record at once (what a ``whole_file`` kind needs); what it decided
    about the file (:class:`~evalpipe.tasks.kinds.base.FileReading`) goes into ``facts``."""
    return tuple(_noted(task, split, _examples(task, kind, path, split, prepare, chunk=None, args=args,
                                               facts=facts)))


def stream_examples(task: TaskFile, kind: Kind, path: Path, split: str,
                    prepare: Prepare | None = None, args: Mapping[str, Any] | None = None) -> ExampleStream:
    """:func:`read_examples` as a stream: the file is read again on each pass, :data:`CHUNK` records
    at a time, and every error is raised when the pass reaches it."""
    return ExampleStream(partial(_streamed, task, kind, path, split, prepare, args))


def _streamed(task: TaskFile, kind: Kind, path: Path, split: str, prepare: Prepare | None,
              args: Mapping[str, Any] | None = None) -> Iterator[Example]:
    return _noted(task, split, _examples(task, kind, path, split, prepare, chunk=CHUNK, args=args))


def _noted(task: TaskFile, split: str, examples: Iterator[Example]) -> Iterator[Example]:
    """The examples, a DataError at a line carrying the split's note (``data.notes``)."""
    try:
        yield from examples
    except DataError as exc:
        note = task.data.notes.get(split)
        if note is None or exc.line is None:
            raise
        raise DataError(exc.path, exc.line, exc.field, f"{exc.problem}; {note}") from None


def _records(task: TaskFile, path: Path, prepare: Prepare | None) -> Iterator[Record]:
    records = iter_file(task, path)
    return records if prepare is None else map(prepare, records)


def _chunks(records: Iterator[Record], size: int | None) -> Iterator[list[Record]]:
    if size is None:
        yield list(records)
        return
    while chunk := list(itertools.islice(records, size)):
        yield chunk


def _read(kind: Kind, task: TaskFile, records: list[Record], args: Mapping[str, Any] | None,
          facts: dict[str, Any] | None) -> list[Drafted]:
    """The kind's drafts for ``records``; a :class:`FileReading`'s facts and note go into ``facts``."""
    read = kind.read(task, records, dict(args or {})) if kind.reads_args else kind.read(task, records)
    if isinstance(read, FileReading):
        if facts is not None:
            facts.update(read.facts)
            if read.note:
                facts["_note"] = read.note
        return read.drafts
    return read


def _examples(task: TaskFile, kind: Kind, path: Path, split: str, prepare: Prepare | None,
              chunk: int | None, args: Mapping[str, Any] | None = None,
              facts: dict[str, Any] | None = None) -> Iterator[Example]:
    """The examples of one file, the kind reading ``chunk`` records at a time (None: all at once).

    Per chunk the order of checks is the whole-file reading's: records (and ``prepare``), the table
    header (first chunk), every input, the kind's gold; then, once the file is read, unique ids."""
    ids = UniqueIds()
    file = str(path)  # one string for every example's meta, not one each
    row = 0
    for records in _chunks(_records(task, path, prepare), chunk):
        if row == 0:
            _check_header(task, records, path)
        inputs = [{name: _input(task, record, name, fields) for name, fields in task.fields.inputs.items()}
                  for record in records]
        drafts = _read(kind, task, records, args, facts)
        for record, mapped, draft in zip(records, inputs, drafts):
            example = Example(id=_sample_id(task, record, split, row), inputs={**mapped, **draft.inputs},
                              gold=draft.gold, meta={"file": file, "line": record.line, "row": row})
            ids.add(example.id)
            row += 1
            yield example
    if ids.suspects():  # a repeated digest: find the exact pair (if any) by reading the ids again
        check_unique_ids(*_ids_again(task, path, split, prepare), task.fields.id or "id", only=ids.suspected)


def _ids_again(task: TaskFile, path: Path, split: str,
               prepare: Prepare | None) -> tuple[Iterable[Record], Iterable[str]]:
    """The records of a file again, with their ids (the first pass found every record good)."""
    first, second = itertools.tee(_records(task, path, prepare))
    return first, (_sample_id(task, record, split, row) for row, record in enumerate(second))


@dataclass(frozen=True)
class HeldOut:
    scored: tuple[Example, ...]
    shots: tuple[Example, ...]


def hold_out(examples: Sequence[Example], k: int, seed: int, path: Path) -> HeldOut:
    """``k`` rows chosen by a seeded shuffle of the row indices become the shot pool (in shuffle
    order); the others are scored, in file order (see the module docstring)."""
    if len(examples) <= k:
        raise DataError(path, None, None, f"{len(examples)} record(s): need more than the {k} held out as "
                        "few-shot examples")
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    position = {row: i for i, row in enumerate(order)}

    def placed(row: int) -> Example:
        ex = examples[row]
        return Example(ex.id, ex.inputs, ex.gold, {**ex.meta, "shuffle_position": position[row]})

    return HeldOut(scored=tuple(placed(r) for r in range(len(examples)) if position[r] >= k),
                   shots=tuple(placed(r) for r in order[:k]))


def evaluated_split(task: TaskFile, options: LoadOptions) -> str:
    split = options.split or task.data.default_split()
    if split not in task.data.files:
        raise DataError(task.data.names(task.data.default_split())[0], None, "split",
                        f"unknown split {split!r} for task {task.name} (it has: {', '.join(task.data.files)})")
    return split


def shot_split(task: TaskFile, split: str) -> str | None:
    """The split shots come from: the first source that is not the evaluated split (None: none)."""
    return next((s for s in task.shots.sources() if s != split), None)


def wants_shots(task: TaskFile, options: LoadOptions) -> bool:
    return (task.shots.count if options.shots is None else options.shots) > 0


def eval_path(task: TaskFile, base: Path, options: LoadOptions) -> tuple[str, Path]:
    split = evaluated_split(task, options)
    return split, locate.require(task, base, options, "eval", task.data.names(split))


def shot_path(task: TaskFile, base: Path, options: LoadOptions, split: str, evaluated: Path) -> Path | None:
    """The shot file (an explicit ``shots`` file also replaces held-out rows), None when there is none
    and none is needed; a missing file that is needed is a DataError."""
    if "shots" in options.paths:
        return locate.require(task, base, options, "shots", (str(options.paths["shots"]),))
    source = None if task.shots.held_out else shot_split(task, split)
    if source is None:
        return None
    if source not in task.data.files:  # a shot file only the user can give (--data TASK:shots=PATH)
        if wants_shots(task, options):
            raise DataError(task.name, None, "shots", f"task {task.name} has no shot file of its own: pass "
                            f"--data {task.name}:shots=PATH, or --shots 0")
        return None
    names = task.data.names(source)
    found = locate.find(task, base, options, "shots", names, beside=evaluated.parent)
    if found is not None and found.resolve() == evaluated.resolve():
        found = None
    if found is None and wants_shots(task, options):
        looked = locate.candidates(task, base, options, names, evaluated.parent)
        raise DataError(looked[0] if looked else names[0], None, None,
                        locate.missing_message(task, names, looked, "shots"))
    return found


def confined(task: TaskFile, task_file: Path | None, exc: locate.OutsideError) -> DataError:
    """A data file outside the task's folders as the task file's error: its line and field
    (``data.files.test``); without the task file, the error as it is."""
    if task_file is None:
        return exc
    from evalpipe.tasks.taskfile.source import TaskFileError, read_task_source

    split = next((s for s in task.data.files if exc.name in task.data.names(s)), None)
    where: tuple[str, ...] = ("data", "files", split) if split is not None else ("data",)
    try:
        line = read_task_source(task_file).line_of(where)
    except DataError:
        line = None
    return TaskFileError(task_file, line, ".".join(str(w) for w in where), exc.problem)


def load_task_data(task: TaskFile, kind: Kind, base: Path, options: LoadOptions,
                   prepare: Prepare | None = None, task_file: Path | None = None) -> TaskData:
    """:func:`_load_task_data`, a data file outside the task's folders named by the task file's line."""
    try:
        return _load_task_data(task, kind, base, options, prepare)
    except locate.OutsideError as exc:
        raise confined(task, task_file, exc) from None


def _load_task_data(task: TaskFile, kind: Kind, base: Path, options: LoadOptions,
                    prepare: Prepare | None = None) -> TaskData:
    """Read the evaluated file and the shot pool of a task file (see the module docstring): the
    evaluated examples are a stream unless the kind reads whole files or shots are held out.

    ``prepare`` (for a hook: :func:`evalpipe.tasks.taskfile.build.with_prepared_records`) rewrites
    each record before its fields are mapped, for a data quirk no key expresses."""
    split, evaluated = eval_path(task, base, options)
    facts: dict[str, Any] = {}
    examples: Examples = (read_examples(task, kind, evaluated, split, prepare, options.args, facts)
                          if kind.whole_file else stream_examples(task, kind, evaluated, split, prepare, options.args))
    try:
        shots_file = shot_path(task, base, options, split, evaluated)
    except DataError:
        for _ in examples:  # the evaluated file's own errors come first, as when it was read at once
            pass
        raise
    files: tuple[Path, ...] = (evaluated,)
    if shots_file is not None:
        pool_split = shot_split(task, split) or "shots"
        pool = read_examples(task, kind, shots_file, pool_split, prepare, options.args)
        files += (shots_file,)
    elif task.shots.held_out:
        held = hold_out(materialize(examples), task.shots.count, task.shots.seed or 0, evaluated)
        examples, pool = held.scored, held.shots
    else:
        pool = ()
    note = facts.pop("_note", None)
    return TaskData(examples=examples, shot_pool=pool, files=files, split=split, facts=facts, note=note)


def data_problem(task: TaskFile, base: Path, options: LoadOptions, task_file: Path | None = None) -> str | None:
    """Why :func:`load_task_data` would fail for want of a file (cheap: nothing is parsed)."""
    try:
        split, evaluated = eval_path(task, base, options)
        shot_path(task, base, options, split, evaluated)
    except locate.OutsideError as exc:
        return str(confined(task, task_file, exc))
    except DataError as exc:
        return str(exc)
    return None
