"""The bounded sandbox's direct lookups (plain dicts, a loop's counters, macro calls) against the
sandbox's own path, kept here as the reference: every shipped template renders byte for byte the
same, and odd names (a dict method's name, an underscore, a missing key, a non-string name) give
the same value, undefined value or error."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jinja2
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedEnvironment

from evalpipe import prompting, template_limits
from evalpipe.prompting import PromptRenderer, select_shots
from evalpipe.records import GenerationParams
from evalpipe.tasks.registry import all_tasks
from evalpipe.template_limits import BoundedSandbox, _tick
from tests.test_every_task_renders import FORMS, _load, data_roots  # noqa: F401  (the fixture)


def reference_getattr(self: BoundedSandbox, obj: Any, attribute: str) -> Any:
    """The lookup before the direct cases: the clock, then the sandbox's own."""
    _tick()
    return ImmutableSandboxedEnvironment.getattr(self, obj, attribute)


def reference_call(__self: BoundedSandbox, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
    """The call hook before the macro case: every call through the width/size checks and the
    sandbox's own ``is_safe_callable``."""
    _tick()
    owner = getattr(__obj, "__self__", None)
    if isinstance(owner, str):
        name = getattr(__obj, "__name__", "")
        if name in template_limits._WIDTH_METHODS:
            for arg in (*args, *kwargs.values()):
                template_limits._check_width(arg, name)
        elif name == "join" and args:
            template_limits._estimate_join(args[0], owner)
        elif name == "replace" and len(args) >= 2:
            template_limits._estimate_replace(owner, str(args[0]), str(args[1]), args[2] if len(args) > 2 else -1)
    return SandboxedEnvironment.call(__self, __context, __obj, *args, **kwargs)


class ReferenceSandbox(BoundedSandbox):
    getattr = reference_getattr  # type: ignore[assignment]
    call = reference_call  # type: ignore[assignment]


@pytest.fixture
def reference(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Task templates rendered by the reference sandbox (its own environment cache)."""
    prompting._environment.cache_clear()
    monkeypatch.setattr(prompting, "BoundedSandbox", ReferenceSandbox)
    yield
    prompting._environment.cache_clear()


def _prompts(name: str, roots: dict[str, Any]) -> list[Any]:
    spec = all_tasks()[name]
    data = _load(name, spec, roots)
    shots = select_shots(data.shot_pool, min(spec.default_shots, len(data.shot_pool)), None,
                         {ex.id for ex in data.examples})
    return [PromptRenderer(spec, shots, GenerationParams(max_tokens=spec.max_tokens), options).render(example)
            for options in FORMS.values() for example in data.examples[:3]]


@pytest.mark.parametrize("name", sorted(n for n, s in all_tasks().items() if s.ranking is None))
def test_every_task_renders_as_under_the_reference_sandbox(name, data_roots, request):  # noqa: F811
    prompting._environment.cache_clear()
    new = _prompts(name, data_roots)
    request.getfixturevalue("reference")
    assert prompting.BoundedSandbox is ReferenceSandbox
    assert _prompts(name, data_roots) == new


NAMES = ["text", "items", "keys", "get", "update", "clear", "pop", "__class__", "_private", "missing",
         "index", "last", "length", "depth", "depth0", "revindex0", "previtem", "cycle", "changed", "nope"]
TEMPLATES = [
    *(f"{{{{ d.{n} }}}}" for n in NAMES),
    *(f"{{% for x in [1, 2] %}}{{{{ loop.{n} }}}}{{% endfor %}}" for n in NAMES),
    *(f"{{{{ d|attr({n!r}) }}}}" for n in NAMES),
    "{{ d|attr(1) }}", "{{ d.inner.text }}", "{{ d.inner.keys() | list }}", "{{ d.items() | list }}",
    "{% macro m(a) %}<{{ a }}>{% endmacro %}{{ m(d.text) }}{{ m(caller=1) }}",
    "{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}in{% endcall %}",
    "{{ sub.text }} {{ sub.keys }}", "{{ d.text.upper() }} {{ d.text.format(1) }}",
]


def _outcome(environment: jinja2.Environment, source: str, context: dict[str, Any]) -> str:
    try:
        return "ok: " + environment.from_string(source).render(context)
    except Exception as exc:  # the error, as the renderer would report it
        return f"{type(exc).__name__}: {exc}"


class Sub(dict):  # type: ignore[type-arg]
    """A dict subclass: the direct lookup is for exact dicts only."""

    keys = "shadowed"  # type: ignore[assignment]


@pytest.mark.parametrize("undefined", [jinja2.StrictUndefined, jinja2.Undefined, jinja2.ChainableUndefined])
@pytest.mark.parametrize("source", TEMPLATES)
def test_lookups_give_what_the_reference_gives(source, undefined):
    context = {"d": {"text": "{}-t", "items": "an item", "keys": 3, "_private": "p", "__class__": "c",
                     "inner": {"text": "deep"}}, "sub": Sub(text="s")}
    new = BoundedSandbox(undefined=undefined, autoescape=False)
    old = ReferenceSandbox(undefined=undefined, autoescape=False)
    assert _outcome(new, source, context) == _outcome(old, source, context)
