"""Judge rubrics: sandboxed Jinja templates that declare their criteria and render a judge's request.

A rubric (``prompts/judge/*.j2``, or any file given with ``--judge-rubric``) renders in the same
sandboxed, ``StrictUndefined`` environment as task templates (:func:`evalpipe.prompting.sandboxed_environment`)
and exports (contract in ``prompts/judge/README.md``):

``criteria``               ``{% set criteria = {"accuracy": "what it means", …} %}`` — names and what
                           each means, in the order the judge is asked
``scale``                  ``{% set scale = [1, 5] %}`` — the whole-number rating scale (ordinal)
``prompt(sample, task)``   the user message; ``sample`` holds ``inputs`` (what the evaluated model
                           saw), ``reference`` (the gold answer as text, None when the task has none),
                           ``gold`` (the gold as recorded) and ``answer`` (the judged text);
                           ``task`` holds ``name`` and ``description``
``system()``               optional: a system message

The evaluated model's name is never given to a rubric: a judge cannot favour a model it is not told.

Which rubric a task gets: ``--judge-rubric TASK=FILE``, else ``--judge-rubric FILE``, else the rubric
the task declares (``TaskSpec.judge_rubric``), else the default of its answer kind
(``prompts/judge/<answer_kind>.j2``). Its sha256 is part of every judgement's key: an edited rubric
asks the judges again instead of mixing ratings of two rubrics.

**The one retry** (:meth:`Rubric.retry`): when a reply cannot be used, the judge is asked once more in
the same conversation — its reply, then a user turn saying what was wrong and the exact JSON shape
wanted. Python writes that turn (not the rubric), so every rubric retries the same way.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from evalpipe.judging.items import JudgedItem, TaskToJudge
from evalpipe.prompting import PROMPTS_DIR, TemplateError, sandboxed_environment
from evalpipe.records import GenerationParams, Message, Prompt

__all__ = ["Rubric", "default_rubric", "load_rubric", "rubric_for"]

_CRITERION = re.compile(r"[a-z][a-z0-9_]*\Z")
#: criterion names that would collide with the judge metrics' own names
_RESERVED = {"failures", "n"}
#: the widest scale accepted (an ordinal rating, not a percentage)
MAX_SCALE_POINTS = 21


def default_rubric(answer_kind: str) -> str:
    """The default rubric of an answer kind, as a name under ``prompts/``."""
    return f"judge/{answer_kind}.j2"


def _resolve(source: str | Path) -> tuple[Path, str]:
    """The rubric file and how it is shown: a user's file by its path, a rubric under prompts/ by its
    name there (``judge/free_text.j2``)."""
    path = Path(source)
    if path.is_absolute() or path.is_file() or not (PROMPTS_DIR / path).is_file():
        return path.resolve(), str(source)
    return PROMPTS_DIR / path, str(source)


def _describe(exc: jinja2.TemplateError) -> str:
    line = getattr(exc, "lineno", None)
    message = getattr(exc, "message", None) or str(exc)
    return f"line {line}: {message}" if line else message


@dataclass(frozen=True)
class Rubric:
    """A loaded rubric: what it asks (criteria, scale) and how it renders a request."""

    #: as recorded and shown: ``judge/free_text.j2`` (under prompts/) or the user's file path
    name: str
    path: Path
    sha256: str
    #: criterion → what it means, in asking order
    criteria: Mapping[str, str]
    scale: tuple[int, int]
    _module: Any = field(repr=False, compare=False, default=None)

    @property
    def values(self) -> tuple[int, ...]:
        """Every rating the scale allows, in order."""
        return tuple(range(self.scale[0], self.scale[1] + 1))

    def _call(self, macro: str, *args: Any) -> str:
        try:
            return str(getattr(self._module, macro)(*args))
        except jinja2.TemplateError as exc:
            raise TemplateError(f"{self.path}: macro {macro}: {_describe(exc)}") from exc

    def render(self, task: TaskToJudge, item: JudgedItem, params: GenerationParams) -> Prompt:
        """The judge's request for one answer (chat form)."""
        gold = item.gold
        reference = gold if isinstance(gold, str) else (
            None if gold is None else json.dumps(gold, ensure_ascii=False))
        sample = {"inputs": dict(item.inputs), "gold": gold, "reference": reference, "answer": item.answer}
        messages: list[Message] = []
        if hasattr(self._module, "system"):
            system = self._call("system")
            if system.strip():
                messages.append(Message("system", system))
        messages.append(Message("user", self._call("prompt", sample, {"name": task.name,
                                                                      "description": task.description})))
        return Prompt(params=params, messages=tuple(messages))

    def json_shape(self) -> str:
        """The reply wanted, as shown to a judge: ``{"accuracy": <1-5>, …}``."""
        low, high = self.scale
        return "{" + ", ".join(f'"{name}": <{low}-{high}>' for name in self.criteria) + "}"

    def retry(self, prompt: Prompt, reply: str, problem: str) -> Prompt:
        """The same conversation, the unusable reply, and one user turn asking again (see module docstring)."""
        low, high = self.scale
        ask = (f"Your reply could not be used ({problem}). Reply again with only one JSON object that rates "
               f"every criterion with a whole number from {low} to {high}: {self.json_shape()}")
        messages = (*(prompt.messages or ()), Message("assistant", reply), Message("user", ask))
        return Prompt(params=prompt.params, messages=messages)


def _criteria(value: Any, path: Path) -> dict[str, str]:
    if isinstance(value, Mapping):
        pairs = [(str(k), str(v)) for k, v in value.items()]
    elif isinstance(value, Sequence) and not isinstance(value, str):
        pairs = [(str(k), "") for k in value]
    else:
        raise TemplateError(f"{path}: `criteria` must be a mapping of criterion name → description "
                            '(e.g. {% set criteria = {"accuracy": "…"} %})')
    if not pairs:
        raise TemplateError(f"{path}: `criteria` is empty")
    for name, _ in pairs:
        if not _CRITERION.match(name) or name in _RESERVED or name.startswith("alpha_"):
            raise TemplateError(f"{path}: criterion {name!r}: names are lower-case letters, digits and _ "
                                "(starting with a letter), not 'n', 'failures' or 'alpha_…' (metric names use them)")
    if len({name for name, _ in pairs}) != len(pairs):
        raise TemplateError(f"{path}: a criterion is named twice")
    return dict(pairs)


def _scale(value: Any, path: Path) -> tuple[int, int]:
    try:
        low, high = (int(v) for v in value)
        exact = all(float(v) == int(v) for v in value)
    except (TypeError, ValueError):
        raise TemplateError(f"{path}: `scale` must be two whole numbers, e.g. {{% set scale = [1, 5] %}}") from None
    if not exact or not low < high or high - low + 1 > MAX_SCALE_POINTS:
        raise TemplateError(f"{path}: `scale` must be [low, high] with low < high and at most "
                            f"{MAX_SCALE_POINTS} points (got {list(value)})")
    return low, high


def load_rubric(source: str | Path) -> Rubric:
    """Load and check a rubric (a name under ``prompts/`` or a file); TemplateError names the file."""
    path, name = _resolve(source)
    if not path.is_file():
        raise TemplateError(f"{path}: judge rubric not found")
    try:
        template = sandboxed_environment(path.parent).get_template(path.name)
        # the module's attributes are the template's exported variables and macros: checked below
        module: Any = template.make_module({})
    except jinja2.TemplateError as exc:
        raise TemplateError(f"{path}: {_describe(exc)}") from exc
    for needed in ("criteria", "scale", "prompt"):
        if not hasattr(module, needed):
            what = "macro" if needed == "prompt" else "variable"
            raise TemplateError(f"{path}: the rubric has no `{needed}` {what} (see prompts/judge/README.md)")
    return Rubric(name=name, path=path, sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
                  criteria=_criteria(module.criteria, path), scale=_scale(module.scale, path), _module=module)


def rubric_for(task: TaskToJudge, overrides: Mapping[str | None, str | Path]) -> Rubric:
    """The task's rubric: ``overrides[task]``, else ``overrides[None]`` (every task), else the task's own,
    else the default of its answer kind."""
    source = overrides.get(task.name) or overrides.get(None) or task.rubric or default_rubric(task.answer_kind)
    return load_rubric(source)
