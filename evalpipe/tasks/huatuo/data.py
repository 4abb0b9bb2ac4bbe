"""Huatuo-26M's test set as evalpipe reads it: one JSON object per line, ``questions`` and ``answers``.

The file is ``test_datasets.jsonl`` from the Hugging Face hub (``FreedomIntelligence/huatuo26M-testdatasets``;
hub-only, not shipped), found at ``--data TASK=FILE``, or under ``--data-dir`` (or ``data/huatuo/`` in the
checkout). A field may be a string or, as in the other Huatuo releases, a list whose first non-empty
string is used. The retrieval task reads it here; the generation task is a task file
(``prompts/huatuo/generation.task.yaml``) whose hook (:func:`hook`) applies the same list rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalpipe.data.errors import DataError
from evalpipe.data.records import Record, read_values
from evalpipe.paths import REPO_ROOT
from evalpipe.records import Example
from evalpipe.tasks.base import LoadOptions, TaskData, TaskSpec

FILE_NAME = "test_datasets.jsonl"
SOURCE = ("Huatuo-26M's test set is published on the Hugging Face hub as FreedomIntelligence/huatuo26M-testdatasets "
          "(file test_datasets.jsonl; no credentialed access) and is not shipped with evalpipe")
CITATION = ("Li J, Wang X, Wu X, et al. Huatuo-26M, a Large-scale Chinese Medical QA Dataset. arXiv:2305.01526, "
            "2023. Data: Hugging Face hub, not shipped.")


def _text(path: Path, line: int, record: dict[str, Any], name: str) -> str:
    if name not in record:
        raise DataError(path, line, name, f"missing (fields found: {', '.join(sorted(record)) or 'none'}; "
                        "expected questions and answers)")
    value = record[name]
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str) and v.strip()), None)
    if not isinstance(value, str) or not value.strip():
        raise DataError(path, line, name, f"expected a non-empty string (or list of strings), got {str(record[name])[:60]!r}")
    return value.strip()


def read_huatuo(path: Path) -> list[tuple[int, str, str]]:
    """``(line, question, answer)`` for every record of a Huatuo JSON-lines file."""
    out = []
    for number, record in read_values(
        path, f"file not found: expected {FILE_NAME} ({SOURCE}; see docs/cblue.md)"
    ):
        if not isinstance(record, dict):
            raise DataError(path, number, None, "expected a JSON object")
        out.append((number, _text(path, number, record, "questions"), _text(path, number, record, "answers")))
    if not out:
        raise DataError(path, None, None, "no record in the file")
    return out


def _path(options: LoadOptions) -> Path:
    if "eval" in options.paths:
        return Path(options.paths["eval"])
    root = Path(options.data_dir) if options.data_dir else REPO_ROOT / "data" / "huatuo"
    places = [root / FILE_NAME, root / "huatuo26M-testdatasets" / FILE_NAME]
    return next((p for p in places if p.is_file()), places[0])


def load(options: LoadOptions) -> TaskData:
    split = options.split or "test"
    if split != "test":
        raise DataError(_path(options), None, "split", f"unknown split {split!r}: Huatuo-26M publishes only its test set")
    path = _path(options)
    examples = tuple(
        Example(id=f"test-{i}", inputs={"question": q}, gold=a, meta={"file": str(path), "line": line})
        for i, (line, q, a) in enumerate(read_huatuo(path))
    )
    pool: tuple[Example, ...] = ()
    files: tuple[Path, ...] = (path,)
    if "shots" in options.paths:
        shot_path = Path(options.paths["shots"])
        pool = tuple(Example(id=f"shot-{i}", inputs={"question": q}, gold=a, meta={"file": str(shot_path), "line": line})
                     for i, (line, q, a) in enumerate(read_huatuo(shot_path)))
        files += (shot_path,)
    return TaskData(examples=examples, shot_pool=pool, files=files, split=split)




def first_texts(record: Record) -> Record:
    """A record whose ``questions``/``answers`` lists are replaced by their first non-empty string (as
    the other Huatuo releases store them); anything else is left for the task file's checks."""
    fields = dict(record.fields)
    for name in ("questions", "answers"):
        value = fields.get(name)
        if isinstance(value, list):
            fields[name] = next((v for v in value if isinstance(v, str) and v.strip()), "")
    return Record(fields, record.line, record.path)


def hook(spec: TaskSpec, task: object) -> TaskSpec:
    """The generation task file's hook: its fields may hold a string or a list (:func:`first_texts`)."""
    from evalpipe.tasks.taskfile.build import with_prepared_records

    return with_prepared_records(spec, task, first_texts)  # type: ignore[arg-type]
