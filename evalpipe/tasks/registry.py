"""Task and suite registry.

Task modules register themselves on import; :func:`load_builtin_tasks` imports every module in
this package once, so a new task module is picked up without touching any list here.
"""

from __future__ import annotations

import importlib
import pkgutil

from evalpipe.tasks.base import SuiteSpec, TaskSpec

_TASKS: dict[str, TaskSpec] = {}
_SUITES: dict[str, SuiteSpec] = {}
_loaded = False


def register(spec: TaskSpec) -> TaskSpec:
    if spec.name in _TASKS and _TASKS[spec.name] is not spec:
        raise ValueError(f"task {spec.name!r} registered twice")
    _TASKS[spec.name] = spec
    return spec


def register_suite(suite: SuiteSpec) -> SuiteSpec:
    """Register a suite explicitly (needed only for an aggregate or a fixed member order)."""
    if suite.name in _SUITES and _SUITES[suite.name] is not suite:
        raise ValueError(f"suite {suite.name!r} registered twice")
    _SUITES[suite.name] = suite
    return suite


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
    _loaded = True


def all_tasks() -> dict[str, TaskSpec]:
    load_builtin_tasks()
    return dict(sorted(_TASKS.items()))


def get_task(name: str) -> TaskSpec:
    tasks = all_tasks()
    try:
        return tasks[name]
    except KeyError:
        raise KeyError(f"unknown task {name!r}; known tasks: {', '.join(tasks)}") from None


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
            raise KeyError(f"unknown suite {suite!r}; known suites: {', '.join(known_suites)}")
        names.extend(known_suites[suite].tasks)
    names.extend(tasks)
    seen: dict[str, TaskSpec] = {}
    for name in names:
        if name not in seen:
            seen[name] = get_task(name)
    return list(seen.values())
