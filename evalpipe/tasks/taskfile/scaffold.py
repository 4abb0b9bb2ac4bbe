"""``evalpipe new-task``: a task file and its template, written from a look at the user's data file.

The data file is read as a run would read it (:mod:`evalpipe.tasks.taskfile.load`, any format), then
checked for what the kind needs — every named field present, a non-empty file, and for a
classification task a label field that really is a label set (a field with hundreds of distinct
values is free text: the error suggests the ``generation`` kind). The task file records what was
found (records, fields, labels with their counts), points at the data file relative to itself when
the data lies beneath the task's folder (a task file reads nothing outside it:
:mod:`evalpipe.tasks.taskfile.confine`), else prints the command with ``--data-dir`` naming the data's
folder; it is built and loaded once before this returns, so the printed command runs.

Field names become template variable names (``Note text`` → ``note_text``) so templates can write
``example.note_text``.
"""

from __future__ import annotations

from typing import Any

import difflib
import os
import re
import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import yaml

from evalpipe.data.errors import DataError
from evalpipe.data.file_records import Record
from evalpipe.tasks.taskfile.load import read_file
from evalpipe.tasks.taskfile.schema import NAME_PATTERN, DataSpec
from evalpipe.errors import InputError

#: kinds new-task can scaffold from a data file alone
KINDS = ("classification", "multiple_choice", "generation")
#: more distinct labels than this is free text, not a label set
MAX_LABELS = 100
#: … and so is a field where nearly every record has its own value (for files of this size or more)
DISTINCT_SHARE = 0.5
MIN_RECORDS_FOR_SHARE = 40


@dataclass(frozen=True)
class Scaffold:
    task_file: Path
    template: Path
    records: int
    summary: str
    command: str


class ScaffoldError(InputError):
    """What is wrong with the request or the data, said in one line."""


def identifier(field: str, taken: set[str]) -> str:
    """A template variable name for a field: lower case, ``_`` for anything else, unique."""
    name = re.sub(r"\W+", "_", field.strip().lower()).strip("_") or "field"
    if name[0].isdigit():
        name = "f_" + name
    base, i = name, 2
    while name in taken or name in ("options", "task", "example", "shots"):
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def _fields(records: Sequence[Record]) -> list[str]:
    seen: dict[str, None] = {}
    for record in records:
        seen.update(dict.fromkeys(map(str, record.fields)))
    return list(seen)


def _require_field(field: str, fields: Sequence[str], path: Path, role: str) -> None:
    if field not in fields:
        close = difflib.get_close_matches(field, fields, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ScaffoldError(f"{path}: no field {field!r} for {role}{hint}; the file's fields: {', '.join(fields)}")


def _label_counts(records: Sequence[Record], field: str, path: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for record in records:
        value = record.fields.get(field)
        if value is None or not str(value).strip():
            raise DataError(path, record.line, field, "empty label (every record needs one)")
        counts[str(value).strip()] += 1
    return counts


def _check_label_set(counts: Counter[str], records: int, field: str, path: Path) -> None:
    distinct = len(counts)
    if distinct < 2:
        raise ScaffoldError(f"{path}: the label field {field!r} has a single value ({next(iter(counts))!r}); a "
                            "classification task needs at least two labels")
    too_many = distinct > MAX_LABELS or (records >= MIN_RECORDS_FOR_SHARE and distinct > DISTINCT_SHARE * records)
    if too_many:
        raise ScaffoldError(f"{path}: the label field {field!r} has {distinct} distinct values in {records} records: "
                            "that is free text, not a label set. If the model should write it, use --kind "
                            "generation (scored by ROUGE/BERTScore against it)")


def _relative(target: Path, start: Path) -> str:
    try:
        return Path(os.path.relpath(target.resolve(), start.resolve())).as_posix()
    except ValueError:  # another drive
        return target.resolve().as_posix()


def _template(kind: str, inputs: dict[str, str], labels: Sequence[str]) -> str:
    """A template with the four macros; the instruction line is meant to be edited."""
    lines = "\n".join(f"{field}: {{{{ example.{name} }}}}" for name, field in inputs.items())
    shot_lines = "\n".join(f"{field}: {{{{ shot.inputs.{name} }}}}" for name, field in inputs.items())
    if kind == "classification":
        instruction = ("Classify the following. Answer with exactly one of these labels and nothing else: "
                       "{{ task.label_set | join(\", \") }}.")
    elif kind == "multiple_choice":
        instruction = "Answer the question. Reply with the letter of the correct option only."
        lines += "\n{% for option in example.options %}{{ option.letter }}. {{ option.text }}\n{% endfor -%}"
        shot_lines += "\n{% for option in shot.inputs.options %}{{ option.letter }}. {{ option.text }}\n{% endfor -%}"
    else:
        instruction = "Write the answer to the following. (Edit this instruction: say what the answer should be.)"
    return f"""{{#- Written by `evalpipe new-task`; edit freely. Macros: prompt (chat), turn (one example when shots are
    chat turns), completion (base models). Contract: prompts/README.md. Variables: example.<input>,
    shot.inputs.<input>, shot.target (the answer a shot demonstrates), task.* (template_vars). -#}}

{{%- macro instruction() -%}}
{instruction}
{{%- endmacro -%}}

{{%- macro block(example) -%}}
{lines}
{{%- endmacro -%}}

{{%- macro prompt(example, shots) -%}}
{{{{ instruction() }}}}

{{% for shot in shots -%}}
{shot_lines}
Answer: {{{{ shot.target }}}}

{{% endfor -%}}
{{{{ block(example) }}}}
Answer:
{{%- endmacro -%}}

{{%- macro turn(example) -%}}
{{{{ instruction() }}}}

{{{{ block(example) }}}}
Answer:
{{%- endmacro -%}}

{{%- macro completion(example, shots) -%}}
{{{{ prompt(example, shots) }}}}
{{%- endmacro -%}}
"""


def new_task(name: str, kind: str, data: Path, input_fields: Sequence[str], label_field: str | None,
             out: Path, id_field: str | None = None, option_fields: Sequence[str] = (), force: bool = False,
             description: str | None = None) -> Scaffold:
    """Inspect ``data``, write ``out/NAME.yaml`` and ``out/NAME.j2`` (see the module docstring)."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise ScaffoldError(f"task name {name!r}: use lower-case letters, digits, _, - and . (e.g. {name.lower()!r})")
    if kind not in KINDS:
        raise ScaffoldError(f"new-task writes {', '.join(KINDS)} tasks; for kind {kind!r} write the task file "
                            "by hand (docs/tasks.md has an example of every kind)")
    if not input_fields:
        raise ScaffoldError("name at least one --input-field (the text the model reads)")
    if label_field is None:
        raise ScaffoldError("--label-field is required: the field holding the gold answer")
    data = Path(data)
    if not data.is_file():
        raise ScaffoldError(f"{data}: data file not found")
    # only data.format and data.columns matter to the reader
    records = read_file(SimpleNamespace(data=DataSpec(files={"test": data.name})), data)  # type: ignore[arg-type]
    if not records:
        raise ScaffoldError(f"{data}: no records (empty file?)")
    fields = _fields(records)
    for field in input_fields:
        _require_field(field, fields, data, "--input-field")
    _require_field(label_field, fields, data, "--label-field")
    if id_field is not None:
        _require_field(id_field, fields, data, "--id-field")
    for field in option_fields:
        _require_field(field, fields, data, "--option-field")
    if kind == "multiple_choice" and not option_fields:
        raise ScaffoldError("multiple_choice needs the options: --option-field F (one field holding {letter: text} "
                            "or a list), or --option-field once per option column (opa, opb, …)")
    taken: set[str] = set()
    inputs = {identifier(field, taken): field for field in input_fields}
    doc: dict[str, Any] = {"name": name, "kind": kind,
                 "description": description or f"{name}: {kind} on {data.name} ({len(records)} records)."}
    summary = f"{len(records)} records; fields: {', '.join(fields)}"
    labels: list[str] = []
    if kind == "classification":
        counts = _label_counts(records, label_field, data)
        _check_label_set(counts, len(records), label_field, data)
        labels = sorted(counts)
        summary += "; labels: " + ", ".join(f"{label} ({counts[label]})" for label in labels)
    out = Path(out)
    # a task file reads only beneath its own folder (evalpipe.tasks.taskfile.confine): data elsewhere
    # is named on the command line (--data-dir), never by a path that climbs out of the tasks folder
    beside = data.parent.resolve().is_relative_to(out.resolve())
    doc["data"] = {"files": {"test": data.name}, **({"default_dir": _relative(data.parent, out)} if beside else {})}
    data_dir = None if beside else data.parent.resolve()
    doc["fields"] = {"inputs": inputs, "answer" if kind != "classification" else "label": label_field}
    if id_field is not None:
        doc["fields"]["id"] = id_field
    if kind == "classification":
        doc["labels"] = labels
    if kind == "multiple_choice":
        doc["options"] = ({"field": option_fields[0]} if len(option_fields) == 1 else {"columns": list(option_fields)})
        doc["answer_format"] = _answer_format(records, label_field)
        if doc["answer_format"] == "index":
            doc["index_base"] = 0
    doc["shots"] = {"count": 0, "source": "held_out", "seed": 0}
    doc["template"] = f"{name}.j2"
    doc["generation"] = {"max_tokens": 16 if kind != "generation" else 256}
    task_path, template_path = out / f"{name}.yaml", out / f"{name}.j2"
    for path in (task_path, template_path):
        if path.exists() and not force:
            raise ScaffoldError(f"{path} exists; choose another name or pass --force to overwrite it")
    out.mkdir(parents=True, exist_ok=True)
    header = (f"# Written by `evalpipe new-task` from {data} — {summary}.\n"
              "# Every key is explained in docs/tasks.md. Shots: set shots.count to k to hold k rows out of the\n"
              "# scored set as few-shot examples (or add a train split under data.files and set shots.source).\n"
              "# Data under a credentialed licence (e.g. PhysioNet)? Add `credentialed: true`.\n")
    task_path.write_text(header + yaml.safe_dump(doc, allow_unicode=True, sort_keys=False, width=110), encoding="utf-8")
    template_path.write_text(_template(kind, inputs, labels), encoding="utf-8")
    _check_it_runs(task_path, data_dir)
    where = f" --data-dir {shlex.quote(str(data_dir))}" if data_dir is not None else ""
    command = f"./run.sh run --task-file {task_path}{where} --base-url URL --model MODEL"
    return Scaffold(task_path, template_path, len(records), summary, command)


def _answer_format(records: Sequence[Record], field: str) -> str:
    values = [str(r.fields.get(field, "")).strip() for r in records]
    if all(re.fullmatch(r"\(?[A-Za-z]\)?\.?", v) for v in values):
        return "letter"
    if all(re.fullmatch(r"\d+", v) for v in values):
        return "index"
    return "text"


def _check_it_runs(task_path: Path, data_dir: Path | None) -> None:
    """Build the new task and render its first prompt: a scaffold that does not run is a bug here."""
    from evalpipe.prompting import PromptRenderer
    from evalpipe.records import GenerationParams
    from evalpipe.tasks.base import LoadOptions
    from evalpipe.tasks.taskfile.build import load_task_file

    spec = load_task_file(task_path)
    data = spec.load(LoadOptions(shots=0, data_dir=data_dir))
    PromptRenderer(spec, (), GenerationParams(max_tokens=spec.max_tokens)).render(next(iter(data.examples)))
