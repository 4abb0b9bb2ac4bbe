"""JSON read strictly: no ``NaN``/``Infinity``, bounded nesting, every error a :class:`DataError`.

Python's ``json`` accepts ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON) and turns them into
floats that a template then writes as ``nan``/``inf`` — a MedQA option sent to the model as "nan".
Here they are an error naming the file, the line and the field that holds them. A document nested
deeper than Python's recursion limit (a record nested 100,000 deep) raised ``RecursionError`` from
the decoder: here it is one line naming the file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalpipe.data.errors import DataError


class _NonFinite(Exception):
    """A ``NaN``/``Infinity`` constant met while decoding."""


def _refuse(name: str) -> Any:
    raise _NonFinite(name)


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name


_STRICT = json.JSONDecoder(parse_constant=_refuse)
_MARKING = json.JSONDecoder(parse_constant=_Marker)


def _marked_field(value: Any, path: str = "") -> str | None:
    """The dotted path of the first :class:`_Marker` in ``value`` (``options.B``, ``CONTEXTS[2]``)."""
    if isinstance(value, _Marker):
        return path or None
    if isinstance(value, dict):
        items = ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{i}]", v) for i, v in enumerate(value))
    else:
        return None
    for where, item in items:
        found = _marked_field(item, where)
        if found is not None or isinstance(item, _Marker):
            return found
    return None


def raw_decode(path: Path, line: int | None, text: str, pos: int = 0) -> tuple[Any, int]:
    """``json.JSONDecoder.raw_decode`` at ``pos``, strictly (see the module docstring); ``line`` is
    where the value starts, for errors. A ``json.JSONDecodeError`` is left to the caller (it knows
    how to tell the line of a position)."""
    try:
        return _STRICT.raw_decode(text, pos)
    except _NonFinite as exc:
        try:
            field = _marked_field(_MARKING.raw_decode(text, pos)[0])
        except (ValueError, RecursionError):
            field = None
        raise DataError(path, line, field, f"{exc.args[0]} is not a JSON value (a number must be finite); "
                        "write null, a number or text") from None
    except RecursionError:
        raise DataError(path, line, None, "nested too deeply (deeper than a JSON reader can follow); "
                        "no sample is nested like this") from None


def loads(path: Path, line: int | None, text: str) -> Any:
    """``json.loads``, strictly: the whole of ``text`` is one value (whitespace around it)."""
    value, end = raw_decode(path, line, text, len(text) - len(text.lstrip()))
    if text[end:].strip():
        raise json.JSONDecodeError("Extra data", text, end + len(text[end:]) - len(text[end:].lstrip()))
    return value
