"""Finding the CLUE data files that stay with Python code (LongHealth's benchmark file).

Most CLUE data cannot ship with the project (PhysioNet credentialed access, or a licence that
forbids redistribution), so the user points at it with ``--data-dir DIR`` (files under their
distributed names, directly in DIR or in the sub-folder CLUE's own scripts use, e.g.
``DIR/MedNLI/mli_test_v1.jsonl``) or ``--data TASK=PATH``. A file that cannot be found is a
:class:`DataError` that says which file is expected, where it is published, and whether it needs
credentialed access — the user should never have to read code to find out what to download.

(The CLUE task files locate their data by the task-file rule, :mod:`evalpipe.tasks.taskfile.locate`,
which follows the same conventions; LongHealth, which stays Python, uses this module.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evalpipe.data.errors import DataError


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
