"""What a run directory's name says about the definitions of its tasks.

A run's default name (:meth:`~evalpipe.config.RunConfig.default_run_name`) holds the task *names*,
the model and the answer-changing options. Two different task files may carry one ``name`` (a copy
edited in another folder, a colleague's file): without more, both runs would share one run
directory, and the second would replace the first's results. So a run of a user's task file adds
:func:`definitions_tag` — a digest of every such file's content — to the name: two different
definitions never share a run directory, and the same file run again resumes its own. Shipped tasks
(``prompts/``) and Python tasks add nothing, so their run names stay what they always were.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from evalpipe.data.digest import file_sha256
from evalpipe.paths import REPO_ROOT
from evalpipe.tasks.base import TaskSpec

SHIPPED_PROMPTS = REPO_ROOT / "prompts"


def user_task_file(spec: TaskSpec) -> Path | None:
    """The task file of a user's task (None for shipped and Python tasks)."""
    if spec.task_file is None or spec.task_file.resolve().is_relative_to(SHIPPED_PROMPTS.resolve()):
        return None
    return spec.task_file


def definitions_tag(specs: Iterable[TaskSpec]) -> str:
    """``def-`` and 10 hex digits of the contents of the user task files among ``specs`` ("" if none)."""
    files = sorted((spec.name, file_sha256(path)) for spec in specs if (path := user_task_file(spec)) is not None)
    if not files:
        return ""
    return "def-" + hashlib.sha256(repr(files).encode()).hexdigest()[:10]
