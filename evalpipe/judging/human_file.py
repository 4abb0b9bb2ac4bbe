"""Reading a human ratings CSV for ``judge --human-ratings FILE``, checked whole before any request.

The format and every check are described in :mod:`evalpipe.judging.humans`; this module is apart
from it because it raises :class:`~evalpipe.outcome.RunError`, and ``evalpipe.outcome`` imports the
judging's attach step, which needs the metrics of :mod:`evalpipe.judging.humans`.
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from evalpipe.judging.humans import COLUMNS, HumanRatings, Table
from evalpipe.judging.items import TaskToJudge
from evalpipe.outcome import RunError

__all__ = ["read_human_ratings"]


def _fail(path: Path, line: int, field_name: str, problem: str) -> RunError:
    return RunError(f"{path}:{line}: {field_name}: {problem}")


def read_human_ratings(path: Path, tasks: Sequence[TaskToJudge], criteria: Mapping[str, Sequence[str]],
                       scales: Mapping[str, tuple[int, int]], judges: Sequence[str] = ()) -> HumanRatings:
    """The file checked against the run's judged samples and the tasks' rubrics (module docstring);
    ``criteria`` and ``scales`` are per task. The first problem raises :class:`RunError`."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise RunError(f"{path}: cannot read the human ratings: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise RunError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    rows = csv.reader(text.splitlines())
    try:
        header = [h.strip() for h in next(rows)]
    except StopIteration:
        raise RunError(f"{path}: empty file; expected a header {','.join(COLUMNS)}") from None
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise _fail(path, 1, missing[0], f"missing column (the header must name {', '.join(COLUMNS)}; "
                                         f"optionally task); got {', '.join(header) or 'nothing'}")
    where = {name: header.index(name) for name in (*COLUMNS, "task") if name in header}
    owners: dict[str, list[str]] = {}
    for task in tasks:
        for item in task.items:
            owners.setdefault(item.sample_id, []).append(task.name)
    unanswered = {sid: t.name for t in tasks for sid in t.unanswered}
    judged_names = {t.name for t in tasks}
    table: Table = {}
    raters: list[str] = []
    for line, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise _fail(path, line, "row", f"{len(row)} fields, the header has {len(header)}")
        value = {name: row[i].strip() for name, i in where.items()}
        sample, rater, criterion = value["sample_id"], value["rater"], value["criterion"]
        if not sample:
            raise _fail(path, line, "sample_id", "empty")
        if not rater:
            raise _fail(path, line, "rater", "empty")
        if rater in judges:
            raise _fail(path, line, "rater", f"{rater!r} is also the name of a judge; name human raters apart")
        task_name = value.get("task") or ""
        if task_name:
            if task_name not in judged_names:
                raise _fail(path, line, "task", f"{task_name!r} is not a judged task of the run "
                                                f"(judged: {', '.join(sorted(judged_names))})")
            if task_name not in owners.get(sample, []):
                raise _fail(path, line, "sample_id", f"{sample!r} is not a judged sample of task {task_name}")
        else:
            found = owners.get(sample, [])
            if not found:
                why = ("its answer is missing in the run (request failed), so it is not judged"
                       if sample in unanswered else "not a judged sample of the run")
                raise _fail(path, line, "sample_id", f"{sample!r}: {why}")
            if len(found) > 1:
                raise _fail(path, line, "sample_id", f"{sample!r} is a sample of several judged tasks "
                                                     f"({', '.join(found)}): add a task column")
            task_name = found[0]
        if criterion not in criteria[task_name]:
            raise _fail(path, line, "criterion", f"{criterion!r} is not a criterion of the rubric of {task_name} "
                                                 f"({', '.join(criteria[task_name])})")
        low, high = scales[task_name]
        text_rating = value["rating"]
        try:
            number = float(text_rating)
        except ValueError:
            raise _fail(path, line, "rating", f"{text_rating!r} is not a number") from None
        if not math.isfinite(number) or not number.is_integer():
            raise _fail(path, line, "rating", f"{text_rating!r} is not a whole number (the scale is {low}–{high})")
        if not low <= number <= high:
            raise _fail(path, line, "rating", f"{text_rating} is outside the rubric's scale {low}–{high}")
        by_rater = table.setdefault(task_name, {}).setdefault(sample, {}).setdefault(criterion, {})
        if rater in by_rater:
            raise _fail(path, line, "rating", f"rater {rater!r} rated {criterion} of {sample!r} twice")
        by_rater[rater] = int(number)
        if rater not in raters:
            raters.append(rater)
    if not table:
        raise RunError(f"{path}: no ratings (only a header)")
    shas = {t.name: {item.sample_id: item.answer_sha256 for item in t.items} for t in tasks}
    answers = {name: {sid: shas[name][sid] for sid in samples} for name, samples in table.items()}
    return HumanRatings(table, str(path), hashlib.sha256(raw).hexdigest(), tuple(raters), answers)
