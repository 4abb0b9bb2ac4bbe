"""A run's samples file written with the report's extract of it beside it (issue 28).

Every writer of ``samples.jsonl`` — a run and ``evalpipe score`` (:func:`evalpipe.outcome.write_outcome`),
the judges' merge (:func:`evalpipe.judging.attach.attach_to_files`) — goes through :func:`write_samples`,
so the extract (:mod:`evalpipe.report.extract`) never describes another file than the one written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evalpipe.results import RunDir
from evalpipe.scoring.records import TakerFactory, record_lines

__all__ = ["extract_taker", "write_samples"]


def write_samples(run: RunDir, pieces: Sequence[tuple[Iterable[Mapping[str, Any]], Any]], compat: str | None,
                  config: Mapping[str, Any] | None, variants: Mapping[str, Mapping[str, Any]]) -> None:
    """Records into the run's samples file, piece by piece, with the report's extract of them beside it
    (:mod:`evalpipe.report.extract`; ``config``: the run's config.json, None where it has none, and
    ``variants``: each task with prompt conditions and its ``variants.json`` entry). A piece's extract
    is either taken already (its second member) or taken here as its lines are written."""
    from evalpipe.report import extract  # the report's code: imported only where samples are written
    from evalpipe.report.taking import references

    writer = extract.writer(run.samples_path(compat), config, references(variants))
    if writer is None:
        run.write_sample_lines((line for records, _ in pieces for line in record_lines(records)), compat)
        return
    try:
        run.write_sample_lines(writer.lines((record_lines(records), taken) for records, taken in pieces), compat)
    except BaseException:
        writer.abandon()
        raise
    writer.commit()


def extract_taker(task: str, kind: str | None, conditioned: bool) -> TakerFactory | None:
    """What takes the report's extract of a task's lines as scoring spills them (beside the sending, in
    the scoring child; else as the task is scored): a task without prompt conditions, whose spilled
    lines are its lines of the samples file (``conditioned``: the task has some, and its records are
    made again when written). None where extracts are not wanted."""
    from evalpipe.report import extract  # the report's code: imported only where samples are written

    return None if conditioned else extract.taker(task, kind)
