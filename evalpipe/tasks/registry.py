"""Task and suite registry.

Tasks come from two places, both picked up without touching any list here:

* **task files** (:mod:`evalpipe.tasks.taskfile`): every shipped ``prompts/**/*.task.yaml``, the
  user's tasks folder (``$EVALPIPE_TASKS_DIR``), and files registered on demand
  (``run --task-file PATH``, ``--tasks-dir DIR``: :func:`register_task_file`);
* **Python task modules**, which register themselves on import: :func:`load_builtin_tasks` imports
  every module of every task family package once.

Two tasks may not share a name: the error names both origins.

A broken file in a user's tasks folder (bad YAML, an alias bomb, a path out of its folder) does not
block the others: it is kept in :func:`broken_task_files` with its one-line error, ``evalpipe tasks``
lists it, and asking for a task that is not registered names the broken files (one may be the task
asked for). A file given by itself (``--task-file``) is still an error at once.
"""

from __future__ import annotations

from typing import Any

import importlib
import pkgutil
from collections.abc import Sequence
from pathlib import Path

from evalpipe.rundir.boards import ReferenceBoard
from evalpipe.rundir.suite_aggregates import SuiteAggregate
from evalpipe.rundir.suites import SuiteRecord
from evalpipe.tasks.base import SuiteSpec, TaskSpec
from evalpipe.errors import InputError, UnknownName

_TASKS: dict[str, TaskSpec] = {}
_SUITES: dict[str, SuiteSpec] = {}
_BOARDS: dict[str, ReferenceBoard] = {}
#: task files of a tasks folder that could not be read: path → their error
_BROKEN: dict[Path, str] = {}
_loaded = False


def broken_task_files() -> dict[Path, str]:
    """The tasks-folder files skipped because they could not be read (path → the one-line error)."""
    return dict(_BROKEN)


def _register_folder_file(path: Path) -> TaskSpec | None:
    """A tasks-folder file registered, or (when it cannot be read) remembered as broken."""
    from evalpipe.data.errors import DataError
    from evalpipe.tasks.taskfile.build import load_task_file

    resolved = Path(path).resolve()
    for spec in _TASKS.values():
        if spec.task_file == resolved:
            return spec
    try:
        spec = load_task_file(resolved)
    except DataError as exc:
        _BROKEN[resolved] = " ".join(str(exc).split("\n")[0].split())
        return None
    _BROKEN.pop(resolved, None)
    return register(spec)


def _origin(spec: TaskSpec) -> str:
    return str(spec.task_file) if spec.task_file is not None else f"Python module {spec.load.__module__}"


def register(spec: TaskSpec) -> TaskSpec:
    existing = _TASKS.get(spec.name)
    if existing is not None and existing is not spec:
        if existing.task_file is not None and existing.task_file == spec.task_file:
            return existing  # the same file registered again (--task-file of a task in the tasks folder)
        raise InputError(f"task {spec.name!r} is defined twice: by {_origin(existing)} and by {_origin(spec)}; "
                         "rename one (the `name` key of a task file)")
    _TASKS[spec.name] = spec
    return spec


def register_task_file(path: str | Path) -> TaskSpec:
    """Build and register a task file (``run --task-file``); the same file twice is one task."""
    from evalpipe.tasks.taskfile.build import load_task_file

    load_builtin_tasks()
    resolved = Path(path).resolve()
    for spec in _TASKS.values():
        if spec.task_file == resolved:
            return spec
    return register(load_task_file(resolved))


def task_of_run(name: str, recorded: dict[str, Any]) -> tuple[TaskSpec, str | None]:
    """The task a run recorded as ``name`` (its ``config.json`` entry is ``recorded``), for
    re-scoring; and a note when its task file changed since.

    A registered task (shipped, from ``$EVALPIPE_TASKS_DIR``, or registered by ``--task-file`` /
    ``--tasks-dir``) is used as it is now. A task defined by a user's task file that is not
    registered is built from the path the run recorded; if that file is gone (moved, renamed,
    deleted) the error says so and how to point at it.
    """
    from evalpipe.tasks.taskfile.build import task_file_sha256

    path = recorded.get("task_file")
    digest = recorded.get("task_file_sha256")
    tasks = all_tasks()
    if name in tasks:
        spec = tasks[name]
    elif path:
        if not Path(path).is_file():
            raise UnknownName(f"task {name!r} was defined by the task file {path} (sha256 {str(digest)[:12]}…), which "
                           "is not there any more (moved or deleted?); pass its new path: "
                           "evalpipe score RUN --task-file PATH (or --tasks-dir DIR)")
        spec = register_task_file(path)
    else:
        spec = get_task(name)
    note = None
    if digest and spec.task_file is not None and spec.task_file.is_file():
        now = task_file_sha256(spec.task_file)
        if now != digest:
            note = (f"{name}: the task file {spec.task_file} changed since the run (sha256 {digest[:12]}… then, "
                    f"{now[:12]}… now); scored with its current definition")
    return spec, note


def register_tasks_dir(folder: str | Path) -> list[TaskSpec]:
    """Register every task file of a user's tasks folder (``--tasks-dir``)."""
    from evalpipe.tasks.taskfile.discover import folder_task_files

    registered = (_register_folder_file(path) for path in folder_task_files(folder))
    return [spec for spec in registered if spec is not None]


def register_suite(suite: SuiteSpec) -> SuiteSpec:
    """Register a suite explicitly (needed only for an aggregate or a fixed member order).

    The aggregate must be a declaration (evalpipe.rundir.suite_aggregates), because the run records
    it in config.json and the report recomputes it from there; a Python function cannot be recorded."""
    if suite.aggregate is not None and not isinstance(suite.aggregate, SuiteAggregate):
        raise TypeError(f"suite {suite.name!r}: the aggregate must be a SuiteAggregate declaration "
                        f"(evalpipe.rundir.suite_aggregates), not {type(suite.aggregate).__name__}")
    if suite.name in _SUITES and _SUITES[suite.name] is not suite:
        raise ValueError(f"suite {suite.name!r} registered twice")
    _SUITES[suite.name] = suite
    return suite


def register_board(board: ReferenceBoard) -> ReferenceBoard:
    """Register a family's reference board (published rows beside runs; :mod:`evalpipe.rundir.boards`).
    The runner records the boards of a run's tasks in its config.json; the report renders them."""
    if board.name in _BOARDS and _BOARDS[board.name] is not board:
        raise ValueError(f"reference board {board.name!r} registered twice")
    _BOARDS[board.name] = board
    return board


def boards() -> list[ReferenceBoard]:
    """Every registered reference board (task families loaded first)."""
    load_builtin_tasks()
    return list(_BOARDS.values())


def load_builtin_tasks() -> None:
    global _loaded
    if _loaded:
        return
    import evalpipe.tasks as package

    # every module of every task family package (``tasks/clue/…``): a new family or task module is
    # picked up without touching any list here
    for module in pkgutil.walk_packages(package.__path__, prefix="evalpipe.tasks."):
        if module.name not in ("evalpipe.tasks.base", "evalpipe.tasks.registry"):
            importlib.import_module(module.name)
    from evalpipe.tasks.taskfile.build import load_task_file
    from evalpipe.tasks.taskfile.discover import env_tasks_dir, folder_task_files, shipped_task_files

    for path in shipped_task_files():
        register(load_task_file(path))
    user_dir = env_tasks_dir()
    if user_dir is not None:
        for path in folder_task_files(user_dir):
            _register_folder_file(path)
    _loaded = True


def all_tasks() -> dict[str, TaskSpec]:
    load_builtin_tasks()
    return dict(sorted(_TASKS.items()))


def get_task(name: str) -> TaskSpec:
    tasks = all_tasks()
    try:
        return tasks[name]
    except KeyError:
        broken = "".join(f"; {path} could not be read: {error}" for path, error in _BROKEN.items())
        raise UnknownName(f"unknown task {name!r}; known tasks: {', '.join(tasks)}{broken}") from None


def suites() -> dict[str, SuiteSpec]:
    """Every suite: those registered explicitly, plus those named in task specs' ``suites``."""
    members: dict[str, list[str]] = {}
    for spec in all_tasks().values():
        for suite in spec.suites:
            members.setdefault(suite, []).append(spec.name)
    out = {name: SuiteSpec(name=name, tasks=tuple(tasks)) for name, tasks in members.items()}
    out.update(_SUITES)
    return dict(sorted(out.items()))


def resolve(tasks: list[str], suite_names: list[str]) -> list[TaskSpec]:
    """Task specs for ``--task`` and ``--suite`` options, in order, without duplicates."""
    known_suites = suites()
    names: list[str] = []
    for suite in suite_names:
        if suite not in known_suites:
            raise UnknownName(f"unknown suite {suite!r}; known suites: {', '.join(known_suites)}")
        names.extend(known_suites[suite].tasks)
    names.extend(tasks)
    seen: dict[str, TaskSpec] = {}
    for name in names:
        if name not in seen:
            seen[name] = get_task(name)
    return list(seen.values())


def suite_records(tasks: Sequence[str]) -> dict[str, SuiteRecord]:
    """The suites with a member among ``tasks``, as a run directory records them (config.json ``suites``)."""
    return {name: SuiteRecord(name, suite.tasks, suite.description, suite.aggregate is not None, suite.aggregate)
            for name, suite in suites().items() if any(t in suite.tasks for t in tasks)}
