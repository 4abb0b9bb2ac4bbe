"""Where task files live.

* **Shipped** tasks: every ``*.task.yaml`` under ``prompts/``, beside its template
  (``prompts/clue/mednli.task.yaml`` next to ``prompts/clue/mednli.j2``). The ``.task.yaml`` suffix
  keeps other YAML under ``prompts/`` (judge rubrics, prompt variants) from being read as tasks.
* **User** tasks: every ``*.yaml``/``*.yml`` directly in a tasks folder — ``--tasks-dir DIR``, or the
  folder named by ``EVALPIPE_TASKS_DIR`` (loaded by every command, so ``evalpipe tasks`` lists them
  and ``--task NAME`` runs them) — and any file given as ``--task-file PATH``.
"""

from __future__ import annotations

import os
from pathlib import Path

from evalpipe.data.errors import DataError
from evalpipe.paths import REPO_ROOT

PROMPTS_DIR = REPO_ROOT / "prompts"
SHIPPED_SUFFIX = ".task.yaml"
USER_SUFFIXES = (".yaml", ".yml")
#: the environment variable naming the user's tasks folder
TASKS_DIR_ENV = "EVALPIPE_TASKS_DIR"


def shipped_task_files(prompts_dir: Path = PROMPTS_DIR) -> list[Path]:
    return sorted(prompts_dir.rglob(f"*{SHIPPED_SUFFIX}"))


def folder_task_files(folder: str | Path) -> list[Path]:
    """The task files of a user's tasks folder (not its sub-folders)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise DataError(folder, None, None, "tasks folder not found (given as --tasks-dir or $" + TASKS_DIR_ENV + ")")
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in USER_SUFFIXES)


def env_tasks_dir() -> Path | None:
    value = os.environ.get(TASKS_DIR_ENV, "").strip()
    return Path(value).expanduser() if value else None


def user_tasks_dir() -> Path:
    """Where ``new-task`` writes by default: ``$EVALPIPE_TASKS_DIR``, else ``./tasks``."""
    return env_tasks_dir() or Path("tasks")
