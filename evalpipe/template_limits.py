"""Bounds on what one template render may cost: time, loop iterations, string sizes.

Jinja's sandbox stops a template from *escaping* (no attribute of ``__class__``, no file access),
not from *spending*: ``{{ 9 ** (9 ** 9) }}``, nested ``range`` loops, ``lipsum(10 ** 9)`` or
``'%999999999s' % x`` ran for minutes or built a gigabyte prompt. Task templates may come from
users, so :class:`BoundedSandbox` adds, per render (one macro call, see :func:`render_budget`):

* **time** — :data:`MAX_RENDER_SECONDS`, checked cheaply in the sandbox's hooks (every call,
  attribute and item lookup, intercepted operator, printed value) and every 1,024 loop items of a
  ``range``;
* **loops** — ``range`` items summed over the render at most :data:`MAX_LOOP_ITEMS` (Jinja bounds one
  ``range`` at 100,000, not ``range`` inside ``range``);
* **arithmetic** — ``**`` with a result over :data:`MAX_INT_BITS` bits, ``*`` of a text or list
  past :data:`MAX_PROMPT_CHARS` items, are refused before they are computed;
* **formatting** — a width or precision over :data:`MAX_FORMAT_WIDTH` in ``%``-formatting, ``.format``,
  the ``format``/``center``/``indent`` filters and ``ljust``/``rjust``/``center``/``zfill``; a ``join``
  or ``replace`` whose result would pass :data:`MAX_PROMPT_CHARS`;
* **size** — a rendered prompt of more than :data:`MAX_PROMPT_CHARS` characters;
* ``lipsum`` (random text of any size) is not available.

Each breach raises :class:`TemplateLimit`, which the renderer reports as one line naming the
template and the example.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jinja2
from jinja2.runtime import LoopContext, Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range

#: the longest prompt a render may produce (characters): far above any task (a LongHealth prompt
#: is ~100,000), far below what would stall the store
MAX_PROMPT_CHARS = 4_000_000
#: the longest one render may take (seconds): the shipped templates render in well under 1 ms
MAX_RENDER_SECONDS = 5.0
#: ``range`` items one render may iterate, summed over every ``range`` it calls
MAX_LOOP_ITEMS = 1_000_000
#: the widest field (or precision) a format may ask for
MAX_FORMAT_WIDTH = 10_000
#: the largest integer ``**`` may produce, in bits (2**4096 has 1,234 digits)
MAX_INT_BITS = 4096
#: how many range items pass between two clock checks
_CHECK_EVERY = 1024


class TemplateLimit(jinja2.TemplateError):
    """A render that went past one of the module's bounds."""


class _Budget:
    def __init__(self) -> None:
        self.deadline = time.monotonic() + MAX_RENDER_SECONDS
        self.loop_items = 0


_current = threading.local()


@contextlib.contextmanager
def render_budget(memo: MacroMemo | None = None) -> Iterator[None]:
    """The bounds of one render: time and loop items count from here to the end of the block;
    ``memo``: the renderer's macros over its fixed values (:class:`MacroMemo`)."""
    previous = getattr(_current, "budget", None), getattr(_current, "memo", None)
    _current.budget, _current.memo = _Budget(), memo
    try:
        yield
    finally:
        _current.budget, _current.memo = previous


class MacroMemo:
    """A renderer's memo of its template's own macros called on nothing but its fixed values.

    Why: a few-shot prompt renders its shots again for every example — with 5 NCBI shots, 44 of a
    prompt's 61 µs (issue 28); with the memo an NCBI 5-shot prompt renders in x0.65 of the time
    (33.4-34.5 → 21.3-22.7 µs, two rounds side by side, load 0.7), its staged rows byte-identical. A template's macro is a function of its arguments and of the
    template's module (its variables are set once, from the task): called again with the very same
    objects, it gives the same text. So a macro call whose every argument is one of ``fixed`` (the
    shots, their inputs and whatever those hold, reached from the objects given; identity, not
    equality) — or that has no argument — is rendered once per renderer and its text reused; a call
    with any other argument (the example), with keywords, or with a ``caller`` block is rendered every
    time. This relies on what the prompts' cache keys rely on already: a template renders the same
    example to the same prompt (``random`` or a counter kept across calls would break both). The
    render's bounds still hold: the first call is rendered within them, and every prompt is
    size-checked whole."""

    def __init__(self, fixed: Iterable[Any]) -> None:
        self._fixed: dict[int, Any] = {}
        for value in fixed:
            self._hold(value)
        self._texts: dict[tuple[int, ...], tuple[Macro, Any]] = {}

    def _hold(self, value: Any) -> None:
        if id(value) in self._fixed:
            return
        self._fixed[id(value)] = value  # held: an id is only unique while its object lives
        if isinstance(value, Mapping):
            for item in value.values():
                self._hold(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                self._hold(item)

    def call(self, context: jinja2.runtime.Context, macro: Macro, args: tuple[Any, ...]) -> Any:
        fixed = self._fixed
        if not all(id(a) in fixed for a in args):
            return context.call(macro, *args)
        key = (id(macro), *map(id, args))
        found = self._texts.get(key)
        if found is None:
            found = self._texts[key] = (macro, context.call(macro, *args))
        return found[1]


def _tick() -> None:
    budget = getattr(_current, "budget", None)
    if budget is not None and time.monotonic() > budget.deadline:
        raise TemplateLimit(f"rendering took more than {MAX_RENDER_SECONDS:g} s (a loop without end?)")


def check_size(text: str) -> str:
    if len(text) > MAX_PROMPT_CHARS:
        raise TemplateLimit(f"the rendered prompt has {len(text):,} characters, over the limit of "
                            f"{MAX_PROMPT_CHARS:,}")
    return text


class _CountedRange:
    """A ``range`` whose iteration counts against the render's loop items and checks the clock."""

    def __init__(self, items: range) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[int]:
        budget = getattr(_current, "budget", None)
        for i, value in enumerate(self._items):
            if i % _CHECK_EVERY == 0:
                if budget is not None:
                    budget.loop_items += min(_CHECK_EVERY, len(self._items) - i)
                    if budget.loop_items > MAX_LOOP_ITEMS:
                        raise TemplateLimit(f"loops of more than {MAX_LOOP_ITEMS:,} range items in one render")
                _tick()
            yield value

    def __getitem__(self, index: Any) -> Any:
        return self._items[index]

    def __repr__(self) -> str:
        return repr(self._items)


def _range(*args: int) -> _CountedRange:
    return _CountedRange(safe_range(*args))


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d+|\*)?(?:\.(\d+|\*))?[a-zA-Z%]")
_BRACE_SPEC = re.compile(r"\{[^{}]*?:([^{}]*)\}")


def _check_width(value: Any, what: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_FORMAT_WIDTH:
        raise TemplateLimit(f"{what}: a width of {value:,}, over the limit of {MAX_FORMAT_WIDTH:,}")


def _check_format(fmt: str, style: str) -> None:
    """Widths and precisions written in a ``%`` or ``{}`` format string."""
    if style == "%":
        numbers = [n for m in _PERCENT_SPEC.finditer(fmt) for n in m.groups() if n and n != "*"]
    else:
        numbers = [n for m in _BRACE_SPEC.finditer(fmt) for n in re.findall(r"\d+", m.group(1))]
    for number in numbers:
        _check_width(int(number), "format")


def _estimate_join(items: Any, separator: str) -> None:
    if not isinstance(items, (list, tuple, str, _CountedRange, range)):
        return
    count = len(items)
    total = len(separator) * max(count - 1, 0)
    if total <= MAX_PROMPT_CHARS:
        total += sum(len(str(item)) for item in items) if isinstance(items, (list, tuple)) else count * 7
    if total > MAX_PROMPT_CHARS:
        raise TemplateLimit(f"join: a text of about {total:,} characters, over the limit of {MAX_PROMPT_CHARS:,}")


def _estimate_replace(text: str, old: str, new: str, count: int = -1) -> None:
    times = (len(text) + 1 if not old else text.count(old))
    if count is not None and count >= 0:
        times = min(times, count)
    total = len(text) + times * len(new)
    if total > MAX_PROMPT_CHARS:
        raise TemplateLimit(f"replace: a text of about {total:,} characters, over the limit of {MAX_PROMPT_CHARS:,}")


_WIDTH_METHODS = {"ljust", "rjust", "center", "zfill", "expandtabs"}


def _bounded_filters(environment: jinja2.Environment) -> None:
    """The amplifying filters, wrapped with their bounds."""
    filters = environment.filters
    fmt, center, indent, join, replace = (filters[n] for n in ("format", "center", "indent", "join", "replace"))

    def format_filter(value: Any, *args: Any, **kwargs: Any) -> Any:
        _check_format(str(value), "%")
        for arg in (*args, *kwargs.values()):
            _check_width(arg, "format")
        return fmt(value, *args, **kwargs)

    def center_filter(value: Any, width: int = 80) -> Any:
        _check_width(width, "center")
        return center(value, width)

    def indent_filter(value: Any, width: Any = 4, *args: Any, **kwargs: Any) -> Any:
        _check_width(width, "indent")
        if isinstance(width, str) and len(width) > MAX_FORMAT_WIDTH:
            raise TemplateLimit(f"indent: an indentation of {len(width):,} characters")
        return indent(value, width, *args, **kwargs)

    @jinja2.pass_eval_context
    def join_filter(eval_ctx: Any, value: Any, d: str = "", attribute: Any = None) -> Any:
        if attribute is None:
            _estimate_join(value, str(d))
        return join(eval_ctx, value, d, attribute)

    @jinja2.pass_eval_context
    def replace_filter(eval_ctx: Any, s: str, old: str, new: str, count: int | None = None) -> Any:
        _estimate_replace(str(s), str(old), str(new), -1 if count is None else count)
        return replace(eval_ctx, s, old, new, count)

    filters.update({"format": format_filter, "center": center_filter, "indent": indent_filter,
                    "join": join_filter, "replace": replace_filter})


def _finalize(value: Any) -> Any:
    _tick()
    return value


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """The immutable sandbox with the module's bounds (see the module docstring)."""

    intercepted_binops = frozenset({"**", "*", "%"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("finalize", _finalize)
        super().__init__(*args, **kwargs)
        self.globals["range"] = _range
        self.globals.pop("lipsum", None)
        _bounded_filters(self)

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        _tick()
        if operator == "**" and _is_int(left) and _is_int(right):
            if right > 0 and abs(left) > 1 and right * max(abs(left).bit_length() - 1, 1) > MAX_INT_BITS:
                raise TemplateLimit(f"{left} ** {right}: a number of more than {MAX_INT_BITS:,} bits")
        elif operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and _is_int(times) and len(seq) * times > MAX_PROMPT_CHARS:
                    raise TemplateLimit(f"repeating {len(seq):,} items {times:,} times: over the limit of "
                                        f"{MAX_PROMPT_CHARS:,}")
        elif operator == "%" and isinstance(left, str):
            _check_format(left, "%")
            for arg in right if isinstance(right, tuple) else (right,):
                _check_width(arg, "format")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        _tick()
        if type(__obj) is Macro:  # a template's own macro: no bound to check, and always safely callable
            memo = getattr(_current, "memo", None)
            # a macro takes no context: Jinja drops the loop's and block's variables it passes along
            if memo is not None and all(k in _CONTEXT_ONLY for k in kwargs):
                return memo.call(__context, __obj, args)
            return __context.call(__obj, *args, **kwargs)
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            name = getattr(__obj, "__name__", "")
            if name in _WIDTH_METHODS:
                for arg in (*args, *kwargs.values()):
                    _check_width(arg, name)
            elif name == "join" and args:
                _estimate_join(args[0], owner)
            elif name == "replace" and len(args) >= 2:
                _estimate_replace(owner, str(args[0]), str(args[1]), args[2] if len(args) > 2 else -1)
        return super().call(__context, __obj, *args, **kwargs)

    def getattr(self, obj: Any, attribute: str) -> Any:
        """The sandbox's lookup, two cases answered directly (issue 28: lookups were ~40 % of a render).

        ``shot.inputs.text`` on a plain ``dict`` first costs the sandbox a raised and caught
        ``AttributeError`` before it looks the key up: for an exact ``dict`` and a name that is not
        one of its attributes ``getattr`` always raises, so the answer is the key's value or the
        undefined value the sandbox would give. ``loop.last`` and the other counters of an exact
        ``LoopContext`` are ints and bools: the sandbox's checks (no underscore, not internal, not
        a mutating method, not ``str.format``) all pass, so the value is what it would return.
        Every other object and name takes the sandbox's own path; the clock is checked either way."""
        _tick()
        if type(attribute) is str:
            if type(obj) is dict and attribute not in _DICT_ATTRIBUTES:
                return obj[attribute] if attribute in obj else self.undefined(obj=obj, name=attribute)
            if type(obj) is LoopContext and attribute in _LOOP_NUMBERS:
                return getattr(obj, attribute)
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _tick()
        return super().getitem(obj, argument)

    def wrap_str_format(self, value: Any) -> Any:
        owner = getattr(value, "__self__", None)
        if isinstance(owner, str) and getattr(value, "__name__", "") in ("format", "format_map"):
            _check_format(owner, "{}")
        return super().wrap_str_format(value)


#: what Jinja's generated code passes to every call inside a loop or block, used only by a callable
#: that takes the context (``Context.call`` drops them for any other, a macro among them)
_CONTEXT_ONLY = frozenset({"_loop_vars", "_block_vars"})
#: every attribute a plain dict has (its methods and ``object``'s): any other name is a key lookup
_DICT_ATTRIBUTES = frozenset(dir(dict))
#: a loop's counters and flags: public, ints and bools, never a mutating or internal attribute
_LOOP_NUMBERS = frozenset({"index", "index0", "revindex", "revindex0", "first", "last", "length",
                           "depth", "depth0"})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
