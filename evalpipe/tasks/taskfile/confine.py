"""What a task file may read: files beneath its own folder and the folders the user named.

A task file is written by someone other than the person running it (a shared tasks folder, a file
from a colleague), and what it reads is sent to the model endpoint and stored in the results. So a
path a task file names — a data file, ``data.dir``, ``data.default_dir``, ``template``, a hook
file — must stay inside the **allowed folders**:

* the task file's own folder (and below);
* the folders the user named: ``--data-dir``, ``--tasks-dir`` / ``$EVALPIPE_TASKS_DIR``;
* what the checkout ships: ``data/`` and ``prompts/`` (and ``$EVALPIPE_PROMPTS_DIR``).

"Inside" is decided on the *resolved* path (symlinks followed, ``..`` collapsed), so a symlink in
the task's folder that points at ``/etc/passwd`` is refused like ``../../../../etc/passwd``. An
absolute path in a task file is refused outright, and what is read must be a regular file (never
``/proc/self/environ``'s kin, a device, a FIFO). The task files evalpipe ships (the checkout's ``prompts/``) are part of evalpipe's own code, so
their data names may climb out of the user's folders the way a published layout needs (MMLU's
shot file ``../dev/NAME`` beside an explicit ``--data`` test file); they still read regular files
only. Paths the user gives on the command line (``--data TASK=PATH``, ``--task-file``) are trusted — the user chose them — but must still be
regular files. Every refusal is one :class:`~evalpipe.tasks.taskfile.source.TaskFileError` naming
the task file, the line and the field, raised while the task is built or its data located, before
any request is sent.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePath

from evalpipe.data.errors import DataError
from evalpipe.paths import REPO_ROOT, SHIPPED_DATA

#: the environment variables that name folders a user chose (tasks, prompts)
_FOLDER_ENVS = ("EVALPIPE_TASKS_DIR", "EVALPIPE_PROMPTS_DIR")


def shipped_roots() -> tuple[Path, ...]:
    """The checkout's ``data/`` and ``prompts/`` and the folders named by the environment."""
    roots = [SHIPPED_DATA, REPO_ROOT / "prompts"]
    for name in _FOLDER_ENVS:
        value = os.environ.get(name, "").strip()
        if value:
            roots.append(Path(value).expanduser())
    return tuple(roots)


def is_shipped(task_folder: Path) -> bool:
    """Whether a task file in ``task_folder`` ships with evalpipe (lies under the checkout's ``prompts/``)."""
    return _resolved(task_folder).is_relative_to(_resolved(REPO_ROOT / "prompts"))


def allowed_roots(task_folder: Path, extra: Iterable[Path | str | None] = ()) -> tuple[Path, ...]:
    """The resolved folders a task file in ``task_folder`` may read beneath (``extra``: the user's
    ``--data-dir`` and the like; None entries are ignored)."""
    roots = [task_folder, *shipped_roots(), *(Path(p) for p in extra if p is not None)]
    return tuple(dict.fromkeys(_resolved(p) for p in roots))


def _resolved(path: Path) -> Path:
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return Path(os.path.abspath(path))


def inside(path: Path, roots: Sequence[Path]) -> bool:
    """Whether ``path``, resolved, lies beneath one of ``roots`` (already resolved)."""
    real = _resolved(path)
    return any(real == root or real.is_relative_to(root) for root in roots)


def regular_file_problem(path: Path) -> str | None:
    """Why ``path`` (symlinks followed) is not a regular file to read, or None when it is one."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "not found"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a device, pipe or socket)"
    real = _resolved(path)
    if real.parts[:2] in (("/", "proc"), ("/", "sys"), ("/", "dev")):
        return f"resolves to {real}, a system file"
    return None


def relative_problem(name: str) -> str | None:
    """Why a path written in a task file may not be used as written (absolute), or None."""
    pure = PurePath(name)
    if pure.is_absolute() or name.startswith("~") or (len(name) > 1 and name[1] == ":"):
        return (f"{name!r} is an absolute path; a task file may only name files beneath its own folder "
                "(or pass the file on the command line: --data TASK=PATH, --data-dir DIR)")
    return None


def outside_message(name: str, path: Path, roots: Sequence[Path]) -> str:
    return (f"{name!r} resolves to {_resolved(path)}, outside the folders a task file may read "
            f"({', '.join(str(r) for r in roots)}); put the file beneath the task file's folder or pass it "
            "on the command line (--data TASK=PATH, --data-dir DIR)")


def check_user_file(path: Path, what: str) -> Path:
    """A path the user gave on the command line: trusted, but it must be a regular file."""
    problem = regular_file_problem(path)
    if problem is not None:
        raise DataError(path, None, None, f"{problem} (given as {what})")
    return path
