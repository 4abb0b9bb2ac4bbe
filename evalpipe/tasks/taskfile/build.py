"""A task file → a validated :class:`TaskFile` → a :class:`~evalpipe.tasks.base.TaskSpec`.

Validation errors read ``FILE:LINE: field.path: what is wrong`` (the line from
:mod:`evalpipe.tasks.taskfile.source`), all of them at once, before anything else happens. The spec
gets everything a task written in Python has: the kind's scorings, shot answers and metrics, the
loader of :mod:`evalpipe.tasks.taskfile.load`, the template (a file beside the task file, or inline),
generation settings, credentialed flag, citation — and, when the file names a ``hook``, whatever that
Python function changes (a compatibility scoring, a wrapped loader).

**The hook** (``hook: module:function`` or ``hook: file.py:function``, the file relative to the task
file) is called once, as ``function(spec, task)`` with the built TaskSpec and the validated task file,
and returns the TaskSpec to register (usually ``dataclasses.replace(spec, …)``). It must keep the
task's name. It is the one place for what no key expresses — never an edit to the runner.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Annotated, Any, Union, cast

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from evalpipe.paths import REPO_ROOT
from evalpipe.tasks.base import EVAL, QuickGeneration, SHOTS, TaskSpec
from evalpipe.tasks.kinds.base import all_kinds, get_kind, select_metrics
from evalpipe.tasks.taskfile import confine
from evalpipe.tasks.taskfile import load as data
from evalpipe.tasks.taskfile.schema import TaskFile
from evalpipe.tasks.taskfile.source import TaskFileError, TaskSource, dotted, locate, read_task_source

PROMPTS_DIR = REPO_ROOT / "prompts"
MAX_ERRORS_SHOWN = 8


class TaskFileErrors(TaskFileError):
    """Several problems in one task file, one ``FILE:LINE: field: problem`` per line."""

    def __init__(self, errors: list[TaskFileError]) -> None:
        first = errors[0]
        super().__init__(first.path, first.line, first.field, first.problem)
        self.errors = errors
        shown = [str(e) for e in errors[:MAX_ERRORS_SHOWN]]
        if len(errors) > MAX_ERRORS_SHOWN:
            shown.append(f"… and {len(errors) - MAX_ERRORS_SHOWN} more")
        self.args = ("\n".join(shown),)


def _field_names(model: type[BaseModel]) -> Iterator[str]:
    for name, info in model.model_fields.items():
        yield name
        for arg in _model_types(info.annotation):
            yield from _field_names(arg)


def _model_types(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        yield from _model_types(arg)


def _problem(error: Mapping[str, Any], model: type[BaseModel]) -> str:
    kind, message = error["type"], error["msg"]
    if kind == "extra_forbidden":
        key = str(error["loc"][-1])
        close = difflib.get_close_matches(key, sorted(set(_field_names(model))), n=1)
        return "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "missing":
        return "missing (required)"
    return cast("str", message.removeprefix("Value error, ").removeprefix("Assertion failed, "))


def validation_errors(source: TaskSource, exc: ValidationError, model: type[BaseModel]) -> TaskFileErrors:
    errors = []
    for error in exc.errors(include_url=False):
        where = locate(source.data, error["loc"])
        errors.append(TaskFileError(source.path, source.line_of(error["loc"]), dotted(where) or None,
                                    _problem(error, model)))
    return TaskFileErrors(errors)


def validate(source: TaskSource) -> TaskFile:
    """The task file as its kind's model; every problem at once, each with its line."""
    kind_name = source.data.get("kind")
    if not isinstance(kind_name, str):
        raise source.error(("kind",), f"missing or not text; one of: {', '.join(all_kinds())}")
    try:
        kind = get_kind(kind_name)
    except KeyError as exc:
        close = difflib.get_close_matches(kind_name, list(all_kinds()), n=1)
        raise source.error(("kind",), str(exc.args[0]) + (f" (did you mean {close[0]!r}?)" if close else "")) from None
    try:
        return kind.model.model_validate(source.data)
    except ValidationError as exc:
        raise validation_errors(source, exc, kind.model) from None


def _template(task: TaskFile, source: TaskSource) -> dict[str, Any]:
    """TaskSpec fields of the template: a file under ``prompts/`` keeps its prompts-relative name
    (as Python tasks record it), any other file is found in its own folder."""
    if task.template_text is not None:
        return {"template": f"{source.path.name}#template_text", "template_source": task.template_text}
    if task.template is None:  # a kind without prompts (retrieval)
        return {"template": ""}
    written = source.path.parent / (task.template or "")
    path = written.resolve()
    roots = confine.allowed_roots(source.path.parent)
    if not confine.inside(written, roots):
        raise source.error(("template",), confine.outside_message(task.template or "", written, roots))
    problem = confine.regular_file_problem(written)
    if problem == "not found":
        raise source.error(("template",), f"{path}: template not found")
    if problem is not None:
        raise source.error(("template",), f"{path}: {problem}")
    if path.is_relative_to(PROMPTS_DIR):
        return {"template": path.relative_to(PROMPTS_DIR).as_posix()}
    return {"template": path.name, "template_dir": path.parent}


def _written_paths(task: TaskFile) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Every path the task file names, with where it is written."""
    for split, names in task.data.files.items():
        for i, name in enumerate(names if isinstance(names, list) else [names]):
            yield (("data", "files", split, i) if isinstance(names, list) else ("data", "files", split)), name
    for key in ("dir", "default_dir"):
        if getattr(task.data, key) is not None:
            yield ("data", key), getattr(task.data, key)
    if task.template is not None:
        yield ("template",), task.template
    if task.hook is not None and task.hook.rpartition(":")[0].endswith(".py"):
        yield ("hook",), task.hook.rpartition(":")[0]


def check_confined(task: TaskFile, source: TaskSource) -> None:
    """Every path the task file names is relative, and a folder it names relative to itself
    (``default_dir``) lies beneath the folders it may read (:mod:`~evalpipe.tasks.taskfile.confine`);
    data files are checked again, resolved, where they are found (``--data-dir`` is known then)."""
    for where, name in _written_paths(task):
        problem = confine.relative_problem(name)
        if problem is not None:
            raise source.error(where, problem)
    if task.data.default_dir is not None:
        folder = source.path.parent / task.data.default_dir
        roots = confine.allowed_roots(source.path.parent)
        if not confine.inside(folder, roots):
            raise source.error(("data", "default_dir"), confine.outside_message(task.data.default_dir, folder, roots))


def resolve_hook(reference: str, base: Path) -> Callable[[TaskSpec, TaskFile], TaskSpec]:
    """``module:function`` (importable) or ``file.py:function`` (relative to ``base``)."""
    module_name, _, function = reference.rpartition(":")
    if module_name.endswith(".py"):
        path = (base / module_name).resolve()
        if not confine.inside(base / module_name, confine.allowed_roots(base)):
            raise FileNotFoundError(confine.outside_message(module_name, base / module_name,
                                                            confine.allowed_roots(base)))
        if not path.is_file():
            raise FileNotFoundError(f"{path}: hook file not found")
        name = "evalpipe_task_hook_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    hook = getattr(module, function, None)
    if not callable(hook):
        raise AttributeError(f"{module_name} has no function {function!r}")
    return cast("Callable[[TaskSpec, TaskFile], TaskSpec]", hook)


def build(source: TaskSource) -> TaskSpec:
    """The TaskSpec a task file describes (see the module docstring)."""
    task = validate(source)
    check_confined(task, source)
    kind = get_kind(task.kind)
    base = source.path.parent
    parts = kind.parts(task)
    try:
        metrics, primary = select_metrics(task, parts)
    except ValueError as exc:
        key = str(exc).partition(":")[0]
        raise source.error((key,), str(exc).partition(": ")[2]) from None
    citation = task.citation + (f" Licence: {task.licence}." if task.licence and task.licence not in task.citation
                                else "")
    spec = TaskSpec(
        kind=task.kind,
        name=task.name,
        description=task.description,
        **_template(task, source),
        load=partial(data.load_task_data, task, kind, base, task_file=source.path),
        data_problem=partial(data.data_problem, task, base, task_file=source.path),
        shot_target=parts.shot_target,
        scorings=dict(parts.scorings),
        metrics=metrics,
        primary_metric=primary,
        max_tokens=task.generation.max_tokens,
        chat_max_tokens=task.generation.chat_max_tokens or parts.chat_max_tokens,
        default_shots=task.shots.count,
        fewshot_seed=None if task.shots.held_out else task.shots.seed,
        template_vars={**parts.template_vars, **task.template_vars},
        long_field=task.long_field,
        completion_stop=tuple(task.generation.stop),
        completion_prefix=task.generation.completion_prefix,
        suites=tuple(task.suites),
        credentialed=task.credentialed,
        citation=citation.strip(),
        dataset=task.data.dataset,
        data_roles=(EVAL, SHOTS) if parts.ranking is None else (EVAL,),
        args=parts.args,
        ranking=parts.ranking,
        choice_scoring=parts.choice_scoring,
        structured=parts.structured,
        forms=dict(parts.forms),
        task_file=source.path.resolve(),
        answer_kind=task.answer_kind,
        judge_rubric=task.judge_rubric,
        metric_definitions={**parts.definitions, **task.metric_definitions},
        quick=QuickGeneration(task.quick.max_tokens, tuple(task.quick.stop)) if task.quick is not None else None,
    )
    if task.hook is not None:
        try:
            hook = resolve_hook(task.hook, base)
            changed = hook(spec, task)
        except (ImportError, AttributeError, FileNotFoundError) as exc:
            raise source.error(("hook",), f"cannot load {task.hook}: {exc}") from None
        if not isinstance(changed, TaskSpec) or changed.name != spec.name:
            raise source.error(("hook",), f"{task.hook} must return the task's TaskSpec (named {spec.name!r})")
        spec = changed
    return spec


def load_task_file(path: str | Path) -> TaskSpec:
    """Read, validate and build one task file."""
    return build(read_task_source(path))


def task_file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def json_schema() -> dict[str, Any]:
    """The JSON schema of a task file: one of the kinds' models, chosen by ``kind``."""
    models = tuple(kind.model for kind in all_kinds().values())
    union = Annotated[Union[models], Field(discriminator="kind")]  # type: ignore[valid-type]
    schema = TypeAdapter(union).json_schema()
    schema["title"] = "evalpipe task file"
    schema["description"] = ("A task file (YAML) for evalpipe: one of the task kinds below, chosen by `kind`. "
                             "See docs/tasks.md for every key with examples.")
    return schema


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def with_prepared_records(spec: TaskSpec, task: TaskFile, prepare: data.Prepare) -> TaskSpec:
    """A hook's helper: the spec whose loader rewrites each record with ``prepare`` before the task
    file's field mapping reads it (a data set whose fields hold a string *or* a list, say)."""
    assert spec.task_file is not None, "only a spec built from a task file"
    return replace(spec, load=partial(data.load_task_data, task, get_kind(task.kind), spec.task_file.parent,
                                      prepare=prepare, task_file=spec.task_file))

