"""A judge's reply → ratings, or why it cannot be used. Pure; never raises; never invents a rating.

What is accepted, in order:

1. A reasoning block is dropped (everything up to the last ``</think>``).
2. Every JSON object in the reply is a candidate — inside a code fence or not, with prose around
   it: each ``{`` is tried with a strict JSON decoder; where that fails, the brace-balanced text
   from it is tried with trailing commas removed, and as a Python literal (single quotes), which
   small judges often write. Ratings nested one level down (``{"ratings": {…}}``) count too.
3. A candidate is usable when it rates *every* criterion of the rubric (keys compared in lower
   case, spaces and hyphens as ``_``) with a whole number on the rubric's scale: an integer, a
   float equal to one (``4.0``), a numeric string (``"4"``, ``"4/5"``), or an object holding one
   under ``score``/``rating``/``value``. Fractions (``3.5``) and out-of-scale numbers are refused:
   the scale is ordinal and the rubric asked for whole numbers.
4. The **last** usable candidate wins (a judge that corrects itself ends with its answer).

A reply without a usable candidate is a :class:`Judgement` with ``ratings=None`` and a ``problem``
(``empty reply``, ``no JSON object in the reply``, ``no rating for clarity``, ``accuracy: 7 is
outside 1–5`` …). The judge run retries it once; if the retry is unusable too, it is counted as a
judge failure — never as a rating of 0 or of the scale's minimum.

A hostile or broken judge cannot stop judging: ``NaN`` and ``Infinity`` ratings are "not a number",
and a reply nesting brackets deeper than :data:`evalpipe.jsonlimits.MAX_JSON_DEPTH` (the one limit
for JSON from servers) is unusable as a whole (``JSON nested deeper than 64 levels``) before any
decoder recurses into it. Either is a counted unusable judgement, stored as received.

A ``rationale`` (or ``reason``/``reasoning``/``explanation``/``justification``) string in the
object is kept for readers; it never changes a rating.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalpipe.judging.items import judged_text
from evalpipe.jsonlimits import TooDeep, check_depth

__all__ = ["Judgement", "parse_judgement"]

_NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*(?:/\s*\d+(?:\.\d+)?)?\s*\Z")
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_RATING_KEYS = ("score", "rating", "value")
_RATIONALE_KEYS = ("rationale", "reason", "reasoning", "explanation", "justification")


@dataclass(frozen=True)
class Judgement:
    """One reply, read: the ratings (criterion → whole number) or the problem that made it unusable."""

    ratings: Mapping[str, int] | None
    problem: str | None = None
    rationale: str | None = None
    #: how many JSON objects the reply held (diagnostics)
    objects: int = field(default=0, compare=False)

    @property
    def usable(self) -> bool:
        return self.ratings is not None


def _key(name: Any) -> str:
    return re.sub(r"[\s\-]+", "_", str(name).strip().lower())


def _balanced(text: str, start: int) -> str | None:
    """The text from ``text[start] == "{"`` to its matching ``}`` (strings respected), or None."""
    depth, quote, escaped = 0, "", False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
    return None


def _lenient_json(chunk: str) -> Any:
    """JSON with trailing commas tolerated (a common slip in judges' replies)."""
    return json.loads(_TRAILING_COMMA.sub(r"\1", chunk))


def _objects(text: str) -> list[dict[str, Any]]:
    """Every top-level object in the text, in order (see the module docstring, step 2)."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    i = text.find("{")
    while i >= 0:
        end = None
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            value = None
            chunk = _balanced(text, i)
            if chunk is not None:
                for attempt in (_lenient_json, ast.literal_eval):
                    try:
                        value = attempt(chunk)
                        end = i + len(chunk)
                        break
                    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                        continue
        if isinstance(value, dict) and end is not None:
            found.append(value)
            i = text.find("{", end)
        else:
            i = text.find("{", i + 1)
    return found


def _rating(value: Any) -> int | float | None:
    """A number from a rating value (see module docstring, step 3); None if it holds none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        match = _NUMBER.match(value)
        return float(match.group(1)) if match else None
    if isinstance(value, Mapping):
        for key in _RATING_KEYS:
            for k, v in value.items():
                if _key(k) == key:
                    return _rating(v)
    return None


def _read(obj: Mapping[str, Any], criteria: Sequence[str], scale: tuple[int, int]) -> tuple[dict[str, int] | None, str | None, int]:
    """(ratings, problem, how many criteria the object names) for one candidate object."""
    flat = {_key(k): v for k, v in obj.items()}
    named = sum(c in flat for c in criteria)
    if named == 0:  # ratings one level down: {"ratings": {...}}
        for value in obj.values():
            if isinstance(value, Mapping):
                inner = {_key(k): v for k, v in value.items()}
                if any(c in inner for c in criteria):
                    flat, named = inner, sum(c in inner for c in criteria)
                    break
    low, high = scale
    ratings: dict[str, int] = {}
    for criterion in criteria:
        if criterion not in flat:
            return None, f"no rating for {criterion}", named
        number = _rating(flat[criterion])
        if number is None or not math.isfinite(number):
            return None, f"{criterion}: {flat[criterion]!r} is not a number", named
        if float(number) != int(number):
            return None, f"{criterion}: {number} is not a whole number", named
        if not low <= int(number) <= high:
            return None, f"{criterion}: {int(number)} is outside {low}–{high}", named
        ratings[criterion] = int(number)
    return ratings, None, named


def _rationale(obj: Mapping[str, Any]) -> str | None:
    for k, v in obj.items():
        if _key(k) in _RATIONALE_KEYS and isinstance(v, str) and v.strip():
            return v.strip()
    return None


def parse_judgement(text: str | None, criteria: Sequence[str], scale: tuple[int, int]) -> Judgement:
    """Read one judge reply against a rubric's criteria and scale (see the module docstring)."""
    body = judged_text(text or "")
    if not body:
        return Judgement(None, "empty reply")
    try:
        check_depth(body)
    except TooDeep as deep:
        return Judgement(None, str(deep))
    objects = _objects(body)
    if not objects:
        return Judgement(None, "no JSON object in the reply")
    usable: Judgement | None = None
    problem, best = "no JSON object rates the criteria", 0
    for obj in objects:
        ratings, why, named = _read(obj, criteria, scale)
        if ratings is not None:
            usable = Judgement(ratings, None, _rationale(obj), len(objects))
        elif why is not None and named > 0 and named >= best:
            problem, best = why, named
    return usable if usable is not None else Judgement(None, problem, None, len(objects))
