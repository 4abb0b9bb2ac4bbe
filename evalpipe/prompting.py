"""Render task templates into prompts: sandboxed Jinja, strict variables, few-shot selection.

Templates live in ``prompts/`` and export macros (see ``prompts/README.md``):

``prompt(example, shots)``      the whole task as one user message (the default chat form)
``turn(example)``               optional: one example's user turn when shots are chat turns
``completion(example, shots)``  optional: plain text for base models (``--endpoint completions``)
``system()``                    optional: a system message

Why macros rather than one template with ``if mode == …`` branches: each form stays readable on
its own, and the Python side only assembles turns, so a new task never needs runner code.

The environment is sandboxed (templates may come from users) and uses ``StrictUndefined``: a
misspelt field is an error when the first prompt is rendered — all prompts are rendered before
any request is sent, so a template bug never costs a half-finished run.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from evalpipe.template_limits import BoundedSandbox, MacroMemo, TemplateLimit, check_size, render_budget

from evalpipe.records import Example, GenerationParams, Message, Prompt
from evalpipe.tasks.base import TaskSpec
from evalpipe.errors import InputError, UsageError

PROMPTS_DIR = Path(os.environ.get("EVALPIPE_PROMPTS_DIR", Path(__file__).resolve().parent.parent / "prompts"))


class TemplateError(InputError):
    """A template that is missing, does not compile, lacks a macro, or fails to render."""


@dataclass(frozen=True)
class PromptOptions:
    endpoint: Literal["chat", "completions"] = "chat"
    fewshot_as_turns: bool = False
    system_role: bool = True


class ConfinedLoader(jinja2.FileSystemLoader):
    """Jinja's file loader (which already refuses ``..`` in a template name) that also refuses a
    template that *resolves* outside its folder and the shipped prompts (a symlink to ``/etc/passwd``)
    or is not a regular file: a template's text is sent to the model endpoint."""

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Any]:
        from evalpipe.tasks.taskfile import confine

        source, filename, uptodate = super().get_source(environment, template)
        roots = confine.allowed_roots(Path(self.searchpath[0]))
        if not confine.inside(Path(filename), roots):
            raise jinja2.TemplateError(confine.outside_message(template, Path(filename), roots))
        problem = confine.regular_file_problem(Path(filename))
        if problem is not None:
            raise jinja2.TemplateError(f"{filename}: {problem}")
        return source, filename, uptodate


@cache
def _environment(prompts_dir: Path) -> ImmutableSandboxedEnvironment:
    return BoundedSandbox(
        loader=ConfinedLoader(str(prompts_dir)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )


def sandboxed_environment(folder: Path) -> ImmutableSandboxedEnvironment:
    """The sandboxed, ``StrictUndefined`` environment that renders the templates of ``folder`` (one
    per folder, cached): task templates and judge rubrics (:mod:`evalpipe.judging.rubric`) alike."""
    return _environment(folder)


def template_path(spec: TaskSpec, prompts_dir: Path = PROMPTS_DIR, template: str | None = None) -> Path:
    """The task's canonical template file (a task file's own folder, else ``prompts/``; for an inline
    template, the task file it is written in), or ``template`` (a prompt variant's, as
    :func:`variant_templates` names it: under ``prompts_dir``, or an absolute path beside a user's
    task file)."""
    if template is not None:
        return Path(template) if Path(template).is_absolute() else prompts_dir / template
    if spec.template_source is not None and spec.task_file is not None:
        return spec.task_file
    return (spec.template_dir or prompts_dir) / spec.template


def template_sha256(spec: TaskSpec, prompts_dir: Path = PROMPTS_DIR, template: str | None = None) -> str:
    if template is None and spec.template_source is not None:
        return hashlib.sha256(spec.template_source.encode("utf-8")).hexdigest()
    return hashlib.sha256(template_path(spec, prompts_dir, template).read_bytes()).hexdigest()


#: the canonical template's name among a task's prompt variants
DEFAULT_VARIANT = "default"
#: a variant's name is a file stem that also appears in plan names, sample records and report ids
VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
#: where a task's variant templates are found without being declared: prompts/<task>/variants/<name>.j2
VARIANTS_FOLDER = "variants"


def _own_folder(spec: TaskSpec, prompts_dir: Path) -> Path | None:
    """A user's task file's folder (its template beside it, or inline in it) when it lies outside
    ``prompts_dir``; None for shipped tasks, whose templates are named relative to ``prompts_dir``."""
    folder = spec.template_dir
    if folder is None and spec.template_source is not None and spec.task_file is not None:
        folder = spec.task_file.parent
    if folder is None or folder.resolve().is_relative_to(prompts_dir.resolve()):
        return None
    return folder.resolve()


def variant_templates(spec: TaskSpec, prompts_dir: Path = PROMPTS_DIR) -> dict[str, str | None]:
    """Every prompt variant of a task: name → its template for ``PromptRenderer(template=…)``,
    :func:`template_path` and :func:`template_sha256`.

    ``default`` is None: the canonical template wherever it lives (under ``prompts/``, beside a task
    file, inline in one), so a run without variants and the ``default`` variant render the very same
    prompts. Then the files ``prompts/<task>/variants/*.j2`` (paths under ``prompts_dir``); for a
    user's task file outside ``prompts_dir``, also ``<its folder>/<task>/variants/*.j2`` (absolute
    paths; they win over a file of the same name under ``prompts/``) — the same layout, rooted where
    its template is, so a variant imports the task's template by the name it has there; then
    ``spec.variants`` (a Python task's declared mapping, which wins over a file of the same name).
    A variant is a whole template with the same macro contract (``prompt``, and optionally
    ``system``, ``turn``, ``completion``): wording, answer-format cue and shot layout may all
    change, the shots' answers (``shot_target``) and the parser may not.
    """
    found: dict[str, str | None] = {DEFAULT_VARIANT: None}
    files: dict[str, str] = {}
    folder = prompts_dir / spec.name / VARIANTS_FOLDER
    if folder.is_dir():
        files.update((f.stem, f"{spec.name}/{VARIANTS_FOLDER}/{f.name}") for f in folder.glob("*.j2"))
    own = _own_folder(spec, prompts_dir)
    if own is not None and (own / spec.name / VARIANTS_FOLDER).is_dir():
        files.update((f.stem, str(f)) for f in (own / spec.name / VARIANTS_FOLDER).glob("*.j2"))
    declared = dict(spec.variants)
    for name, template in [*sorted(files.items()), *declared.items()]:
        where = f"{prompts_dir / template}" if name not in declared else f"task {spec.name}: variants"
        if name == DEFAULT_VARIANT:
            raise TemplateError(f"{where}: the variant name {DEFAULT_VARIANT!r} is reserved for the task's "
                                f"canonical template ({spec.template})")
        if not VARIANT_NAME.fullmatch(name):
            raise TemplateError(f"{where}: variant name {name!r} must be letters, digits, '_' or '-'")
        found[name] = template
    return found


def _variant_loader(spec: TaskSpec, prompts_dir: Path, template: str) -> tuple[Path, str]:
    """The folder whose environment loads a variant's template, and its name there: ``prompts_dir``
    for a prompts-relative name; for an absolute path, the task's own folder when the file is in it
    (so ``{% from "<task>.j2" import … %}`` finds the template beside the task file), else its folder."""
    path = Path(template)
    if not path.is_absolute():
        return prompts_dir, template
    own = _own_folder(spec, prompts_dir)
    root = own if own is not None and path.is_relative_to(own) else path.parent
    return root, path.relative_to(root).as_posix()


def inputs_fingerprint(example: Example) -> str:
    """What a template sees of an example, as one string: equal inputs mean the same item."""
    return json.dumps(dict(example.inputs), sort_keys=True, ensure_ascii=False, default=str)


def select_shots(
    pool: Sequence[Example],
    k: int,
    seed: int | None,
    evaluated_ids: set[str] | frozenset[str] = frozenset(),
    evaluated_inputs: set[str] | frozenset[str] = frozenset(),
) -> tuple[Example, ...]:
    """Pick ``k`` shots from ``pool``: the first ``k`` (seed None) or a seeded random sample.

    The pool is the task's train split; an example that is also evaluated — same id, or the same
    inputs (:func:`inputs_fingerprint`; e.g. one file passed as both test and shot file) — is never
    a shot: a shot that is also a test item leaks its answer.
    """
    candidates = [
        ex for ex in pool
        if ex.id not in evaluated_ids and (not evaluated_inputs or inputs_fingerprint(ex) not in evaluated_inputs)
    ]
    if k < 0:
        raise UsageError("the number of shots cannot be negative")
    if k > len(candidates):
        raise UsageError(f"asked for {k} shots but the shot pool has only {len(candidates)} examples")
    if seed is None:
        return tuple(candidates[:k])
    return tuple(random.Random(seed).sample(candidates, k))


class PromptRenderer:
    """Renders one task's examples with fixed shots into :class:`Prompt` records."""

    def __init__(
        self,
        spec: TaskSpec,
        shots: Sequence[Example],
        params: GenerationParams,
        options: PromptOptions = PromptOptions(),
        prompts_dir: Path = PROMPTS_DIR,
        template: str | None = None,
    ) -> None:
        """``template``: another template of the task (a prompt variant's, see
        :func:`variant_templates`) instead of its canonical one."""
        self.spec = spec
        self.params = params
        self.options = options
        path = template_path(spec, prompts_dir, template)
        if (template is not None or spec.template_source is None) and not path.is_file():
            raise TemplateError(f"{path}: template for task {spec.name!r} not found")
        try:
            if template is not None:  # a prompt variant (variant_templates)
                root, name = _variant_loader(spec, prompts_dir, template)
                compiled = _environment(root).get_template(name)
            else:
                environment = _environment(spec.template_dir or prompts_dir)
                compiled = (environment.from_string(spec.template_source) if spec.template_source is not None
                            else environment.get_template(spec.template))
            self._module = compiled.make_module({"task": dict(spec.template_vars)})
        except jinja2.TemplateError as exc:
            raise TemplateError(f"{path}: {_describe(exc)}") from exc
        self._path = path
        self._template = compiled
        needed = "completion" if options.endpoint == "completions" else "prompt"
        if not hasattr(self._module, needed):
            raise TemplateError(f"{path}: the template has no `{needed}` macro, needed for the {options.endpoint} form")
        self._shots: list[dict[str, Any]] = [{"inputs": dict(s.inputs), "target": spec.shot_target(s)} for s in shots]
        # the shots' macros rendered once, not for every example (evalpipe.template_limits.MacroMemo)
        self._memo = MacroMemo([self._shots])
        # what is the same for every example, rendered once: the system text, the shot turns, and
        # the completion form's parameters (the task's stop sequences unless the user gave some)
        self._turn = "turn" if hasattr(self._module, "turn") else None
        self._system = self._call("system") if hasattr(self._module, "system") else ""
        self._shot_turns: tuple[Message, ...] = ()
        if options.endpoint != "completions" and options.fewshot_as_turns:
            self._shot_turns = tuple(
                message for shot in self._shots
                for message in (Message("user", self._user_turn(shot["inputs"])), Message("assistant", shot["target"]))
            )
        self._completion_params = (
            replace(params, stop=spec.completion_stop) if spec.completion_stop and not params.stop else params)

    def _call(self, macro: str, *args: Any, example_id: str | None = None) -> str:
        """One macro rendered within the bounds of :mod:`evalpipe.template_limits` (a breach is one
        line naming the template, the macro and the example)."""
        which = f"example {example_id}: " if example_id is not None else ""
        try:
            with render_budget(self._memo):
                return check_size(str(getattr(self._module, macro)(*args)))
        except TemplateLimit as exc:
            line = self._template_line(exc)
            raise TemplateError(f"{self._path}: macro {macro}: {which}{f'line {line}: ' if line else ''}"
                                f"{exc.message}") from None
        except jinja2.TemplateError as exc:
            raise TemplateError(f"{self._path}: macro {macro}: {which}{_describe(exc)}") from None
        except RecursionError as exc:
            line = self._template_line(exc)
            raise TemplateError(f"{self._path}: macro {macro}: {which}{f'line {line}: ' if line else ''}infinite "
                                "recursion (a macro calls itself without end)") from None
        except Exception as exc:  # {{ 1/0 }}, 'a' + 1, the sandbox's range limit: the template's own fault
            line = self._template_line(exc)
            where = f"line {line}: " if line else ""
            message = " ".join(str(exc).split()) or type(exc).__name__
            raise TemplateError(f"{self._path}: macro {macro}: {which}{where}{type(exc).__name__}: {message}") from None

    def _template_line(self, exc: BaseException) -> int | None:
        """The template line where ``exc`` happened (Jinja compiles templates to Python; map back)."""
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if frame.filename == self._template.filename and frame.lineno is not None:
                return self._template.get_corresponding_lineno(frame.lineno)
        return None

    def _user_turn(self, inputs: dict[str, Any], example_id: str | None = None) -> str:
        """One example as a user turn: the ``turn`` macro, else ``prompt`` without shots."""
        return (self._call(self._turn, inputs, example_id=example_id) if self._turn
                else self._call("prompt", inputs, [], example_id=example_id))

    def render(self, example: Example) -> Prompt:
        inputs = dict(example.inputs)
        if self.options.endpoint == "completions":
            return Prompt(params=self._completion_params,
                          text=self._call("completion", inputs, self._shots, example_id=example.id))
        messages: list[Message]
        if self.options.fewshot_as_turns and self._shots:
            messages = [*self._shot_turns, Message("user", self._user_turn(inputs, example.id))]
        else:
            messages = [Message("user", self._call("prompt", inputs, self._shots, example_id=example.id))]
        system = self._system
        if system.strip():
            if self.options.system_role:
                messages.insert(0, Message("system", system))
            else:  # models whose chat template rejects a system role
                messages[0] = Message("user", f"{system}\n\n{messages[0].content}")
        return Prompt(params=self.params, messages=tuple(messages))


def _describe(exc: jinja2.TemplateError) -> str:
    line = getattr(exc, "lineno", None)
    return f"line {line}: {exc.message}" if line else str(exc.message or exc)
