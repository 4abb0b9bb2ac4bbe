"""What can be evaluated: ``evalpipe tasks`` (and one task whole) and ``evalpipe new-task``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from evalpipe.results import os_problem
from evalpipe.prompting import TemplateError, variant_templates
from evalpipe.tasks.registry import all_tasks, broken_task_files, resolve, suites

from evalpipe.cli.common import TasksDirOption, USER_ERRORS, _fail, _user_tasks, app, console


@app.command()
def tasks(
    names: Annotated[list[str], typer.Argument(help="Show everything about these tasks (default: list all).")] = [],
    schema: Annotated[bool, typer.Option("--schema", help="Print the JSON schema of task files and exit.")] = False,
    kinds: Annotated[bool, typer.Option("--kinds", help="List the task kinds a task file can use and exit.")] = False,
    tasks_dir: TasksDirOption = [],
) -> None:
    """List tasks and suites (`tasks NAME`: one task whole).

    One task shows its data roles, settings, prompt variants and scorings.
    """
    from evalpipe.tasks.kinds.base import all_kinds
    from evalpipe.tasks.taskfile.build import schema_text

    if schema:
        sys.stdout.write(schema_text())
        return
    if kinds:
        kind_table = Table(title="task kinds (the `kind` of a task file; docs/tasks.md)")
        kind_table.add_column("kind")
        kind_table.add_column("what it scores")
        for name, kind in all_kinds().items():
            kind_table.add_row(name, kind.description)
        console.print(kind_table)
        return
    try:
        _user_tasks([], tasks_dir)
        registered = all_tasks()
        chosen = [registered[n] if n in registered else resolve([n], [])[0] for n in names]
    except USER_ERRORS as exc:
        raise _fail(exc) from None
    if chosen:
        for spec in chosen:
            _print_task(spec)
        return
    table = Table(title="tasks  (evalpipe tasks NAME: data roles, settings, prompt variants, scorings)")
    for column in ("task", "answered by", "shots", "metrics", "suites", "defined by", "description"):
        table.add_column(column)
    for spec in registered.values():
        table.add_row(
            spec.name, "embedding ranker" if spec.ranking else "model", str(spec.default_shots),
            ", ".join(spec.metrics), ", ".join(spec.suites), _defined_by(spec.task_file),
            spec.description + (" [credentialed data]" if spec.credentialed else ""),
        )
    console.print(table)
    suite_table = Table(title="suites")
    suite_table.add_column("suite")
    suite_table.add_column("tasks")
    for name, suite in suites().items():
        suite_table.add_row(name, ", ".join(suite.tasks))
    console.print(suite_table)
    for error in broken_task_files().values():
        console.print(Text(f"skipped a task file that cannot be read: {error}"), soft_wrap=True)


def _print_task(spec: Any) -> None:
    """One task, whole: everything a user needs to run it with their files and settings."""
    try:
        variants = ", ".join(variant_templates(spec)) if spec.ranking is None else "–"
    except TemplateError as exc:
        variants = f"error: {exc}"
    rows = [
        ("description", spec.description + (" [credentialed data]" if spec.credentialed else "")),
        ("answered by", "an embedding ranker (--embeddings-url/--embeddings-path)" if spec.ranking else "the model"),
        ("defined by", _defined_by(spec.task_file)),
        ("data roles (--data TASK:ROLE=PATH)", "; ".join(f"{r.name}: {r.description}" for r in spec.data_roles)),
        ("settings (--task-arg TASK:NAME=VALUE)", "; ".join(f"{a.name}: {a.description}" for a in spec.args) or "–"),
        ("shots", str(spec.default_shots)),
        ("max tokens", str(spec.max_tokens)),
        ("metrics", ", ".join(spec.metrics) + (f" (headline: {spec.primary_metric})" if spec.primary_metric else "")),
        ("scorings (--compat)", ", ".join(k for k in spec.scorings if k != "default") or "default only"),
        ("prompt variants (--prompt-variants)", variants),
        ("suites", ", ".join(spec.suites) or "–"),
        ("judged (evalpipe judge)", "yes: free-text answers" if spec.answer_kind else "no"),
        ("citation", spec.citation or "–"),
    ]
    table = Table(title=Text(spec.name), show_header=False, title_justify="left")
    table.add_column("key", style="bold")
    table.add_column("value")
    for key, value in rows:
        table.add_row(key, Text(value))
    console.print(table)


def _defined_by(task_file: Path | None) -> str:
    if task_file is None:
        return "Python"
    try:
        return str(task_file.relative_to(Path.cwd()))
    except ValueError:
        return str(task_file)


@app.command("new-task")
def new_task(
    name: Annotated[str, typer.Argument(help="The task's name (lower case, digits, _ - .).")],
    kind: Annotated[str, typer.Option(help="classification, multiple_choice or generation.")] = "classification",
    data: Annotated[Path, typer.Option(help="Your data file: JSON lines, a JSON array, CSV/TSV with a header, parquet.")] = Path(),
    input_field: Annotated[list[str], typer.Option("--input-field", help="A field the model reads (repeatable).")] = [],
    label_field: Annotated[Optional[str], typer.Option(help="The field holding the gold answer (label, option, reference text).")] = None,
    id_field: Annotated[Optional[str], typer.Option(help="A field holding unique sample ids (default: the row).")] = None,
    option_field: Annotated[list[str], typer.Option("--option-field", help="multiple_choice: one field with the options, or one per option column (repeatable).")] = [],
    out: Annotated[Optional[Path], typer.Option(help="Folder for NAME.yaml and NAME.j2 (default: $EVALPIPE_TASKS_DIR, else ./tasks).")] = None,
    description: Annotated[Optional[str], typer.Option(help="One line describing the task.")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing task file and template.")] = False,
) -> None:
    """Write a task file and template from your own data file, and print the command that runs it."""
    from evalpipe.tasks.taskfile.discover import user_tasks_dir
    from evalpipe.tasks.taskfile.scaffold import ScaffoldError, new_task as scaffold

    if data == Path():
        raise typer.BadParameter("--data FILE is required (your data file)", param_hint="--data")
    folder = out or user_tasks_dir()
    if folder.exists() and not folder.is_dir():
        raise _fail(ValueError(f"{folder}: is a file, not a folder (given as --out); name a folder"))
    try:
        made = scaffold(name, kind, data, input_field, label_field, folder, id_field=id_field,
                        option_fields=option_field, force=force, description=description)
    except (ScaffoldError, *USER_ERRORS) as exc:
        raise _fail(exc) from None
    except OSError as exc:  # a read-only place, a file in the way of a parent folder
        raise _fail(ValueError(f"{os_problem(exc)} (given as --out)")) from None
    console.print(f"wrote {made.task_file} and {made.template} ({made.summary})", highlight=False, soft_wrap=True)
    console.print(f"run it:  {made.command}", highlight=False, soft_wrap=True)
