"""Finding a task file's data files: the user's explicit file, their data folder, the task's own folder.

One rule for every task file, in order, first hit wins:

1. ``--data TASK=PATH`` (the evaluated file) or ``--data TASK:shots=PATH`` (the shot file): that file,
   which must exist;
2. under ``--data-dir DIR``: ``DIR/NAME``, then ``DIR/<data.dir>/NAME`` for each name of the file;
3. under ``data.default_dir`` (relative to the task file: shipped data, or a conventional place);
4. for the shot file only: beside the evaluated file (``PARENT/NAME``, ``PARENT/<data.dir>/NAME``),
   so a train file next to the test file a user pointed at is found.

Every candidate must resolve beneath the folders a task file may read
(:mod:`evalpipe.tasks.taskfile.confine`): one outside them is skipped, and when the only file found
lies outside, that is an :class:`OutsideError` (the caller names the task file's line), never a read.

A file found nowhere is a :class:`DataError` that names the file, the places looked in, where the
data set is published and under which access terms (credentialed or not), and how to point at it —
a user should never have to read code to find out what to download.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from evalpipe.data.errors import DataError
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.taskfile import confine
from evalpipe.tasks.taskfile.schema import TaskFile

CREDENTIALED_ACCESS = "credentialed access (PhysioNet account, CITI training, signed data use agreement)"


def _folders(task: TaskFile, base: Path, options: LoadOptions, beside: Path | None) -> list[Path]:
    roots: list[Path] = []
    if options.data_dir is not None:
        roots.append(Path(options.data_dir))
    if task.data.default_dir is not None:
        roots.append((base / task.data.default_dir).resolve())
    if beside is not None:
        roots.append(beside)
    folders: list[Path] = []
    for root in roots:
        folders.append(root)
        if task.data.dir:
            folders.append(root / task.data.dir)
    return list(dict.fromkeys(folders))


def candidates(task: TaskFile, base: Path, options: LoadOptions, names: Sequence[str],
               beside: Path | None = None) -> list[Path]:
    """Every place a file may be, in the order they are tried."""
    out: list[Path] = []
    for name in names:
        if Path(name).is_absolute():
            out.append(Path(name))
    for folder in _folders(task, base, options, beside):
        out.extend(folder / name for name in names if not Path(name).is_absolute())
    return out


def access(task: TaskFile) -> str:
    if task.credentialed:
        return CREDENTIALED_ACCESS
    return "public" + (f"; {task.licence}" if task.licence else "")


def missing_message(task: TaskFile, names: Sequence[str], looked: Sequence[Path], role: str) -> str:
    where = ", ".join(str(p) for p in looked) if looked else "nowhere (no --data-dir or --data given)"
    dataset = task.data.dataset or task.name
    published = f" {dataset} is published at {task.data.published} ({access(task)})." if task.data.published else ""
    how = f" To obtain it: {task.data.how}." if task.data.how else ""
    key = task.name if role == "eval" else f"{task.name}:{role}"
    purpose = " (the file the few-shot examples come from; or --shots 0)" if role == "shots" else ""
    return (f"{names[0]} not found{purpose} (looked in: {where}).{published}{how} Pass --data-dir DIR with the "
            f"file under its distributed name, or --data {key}=PATH.")


class OutsideError(DataError):
    """A data file a task file names that resolves outside the folders it may read (or is not a
    regular file): ``name`` as written, ``path`` where it led."""

    def __init__(self, name: str, path: Path, problem: str) -> None:
        super().__init__(path, None, None, problem)
        self.name = name


def _written_name(path: Path, names: Sequence[str]) -> str:
    return next((n for n in names if str(path).endswith(n)), names[0])


def find(task: TaskFile, base: Path, options: LoadOptions, role: str, names: Sequence[str],
         beside: Path | None = None) -> Path | None:
    """The file for ``role`` (see the module docstring), or None when it is nowhere."""
    explicit = options.paths.get(role)
    if explicit is not None:
        if not Path(explicit).exists():
            raise DataError(explicit, None, None, f"file not found (given as --data for role {role} of task "
                            f"{task.name}; expected {task.data.dataset or task.name}: {names[0]})")
        return confine.check_user_file(Path(explicit), f"--data for role {role} of task {task.name}")
    roots = confine.allowed_roots(base, (options.data_dir, beside))
    shipped = confine.is_shipped(base)
    refused: OutsideError | None = None
    for path in candidates(task, base, options, names, beside):
        if not os.path.lexists(path):
            continue
        name = _written_name(path, names)
        if not shipped and not confine.inside(path, roots):
            refused = refused or OutsideError(name, path, confine.outside_message(name, path, roots))
            continue
        problem = confine.regular_file_problem(path)
        if problem == "not found":  # a dangling symlink
            continue
        if problem is not None:
            raise OutsideError(name, path, f"{name!r}: {path} {problem}")
        return path
    if refused is not None:
        raise refused
    return None


def require(task: TaskFile, base: Path, options: LoadOptions, role: str, names: Sequence[str],
            beside: Path | None = None) -> Path:
    """:func:`find`, or the DataError saying what is missing and where it is published."""
    found = find(task, base, options, role, names, beside)
    if found is None:
        looked = candidates(task, base, options, names, beside)
        raise DataError(looked[0] if looked else names[0], None, None, missing_message(task, names, looked, role))
    return found
