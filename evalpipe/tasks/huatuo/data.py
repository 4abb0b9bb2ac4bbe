"""What Huatuo-26M's task files cannot say: a field may hold a string or a list.

Both Huatuo tasks are task files — ``prompts/huatuo/generation.task.yaml`` (kind ``generation``,
language ``zh``) and ``prompts/huatuo/retrieval.task.yaml`` (kind ``retrieval``) — reading the test set
``test_datasets.jsonl`` (Hugging Face hub ``FreedomIntelligence/huatuo26M-testdatasets``; hub-only, not
shipped) at ``--data TASK=FILE``, under ``--data-dir`` (or its ``huatuo26M-testdatasets`` folder), or in
``data/huatuo/`` of the checkout. In the test set ``questions`` and ``answers`` are strings; in the
other Huatuo releases they are lists, whose first non-empty string is used. That rule is the
one thing both files' ``hook`` adds (:func:`hook`), through the loader's record preparation.
"""

from __future__ import annotations

from evalpipe.data.file_records import Record
from evalpipe.tasks.base import TaskSpec

FIELDS = ("questions", "answers")


def first_texts(record: Record) -> Record:
    """The record with each list in ``questions``/``answers`` replaced by its first non-empty string
    (an empty text when it has none, which the task file's checks then report)."""
    fields = dict(record.fields)
    for name in FIELDS:
        value = fields.get(name)
        if isinstance(value, list):
            fields[name] = next((v for v in value if isinstance(v, str) and v.strip()), "")
    return Record(fields, record.line, record.path)


def hook(spec: TaskSpec, task: object) -> TaskSpec:
    """Both task files' hook: read ``questions``/``answers`` by :func:`first_texts`."""
    from evalpipe.tasks.taskfile.build import with_prepared_records

    return with_prepared_records(spec, task, first_texts)  # type: ignore[arg-type]
