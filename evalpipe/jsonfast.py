"""Compact JSON written by orjson where its text is exactly the ``json`` module's, by ``json`` elsewhere.

Why: the report writes the sample browser's data into report.html (93 MB at 94,000 NCBI
samples); ``json`` takes ~1.7 s of the report's time for it, orjson about a quarter of that
(issue 28). The report's bytes must not move, so orjson's text is used only where it is the one
``json.dumps(ensure_ascii=False, separators=(",", ":"))`` writes:

* both write a float's shortest round-tripping digits and escape strings alike (``"``, ``\\``,
  control characters; non-ASCII as it is), but orjson spells a float below 1e-4 otherwise
  (``0.00001`` and ``1e-7`` where ``json`` writes ``1e-05`` and ``1e-07``): a text in which a
  digit is followed by ``e-``, or ``0.0000`` by a digit (such a float, or a string that only looks
  like one), is left to ``json``. The check is a ``bytes.translate`` and two substring searches,
  in C (a regular expression over the text cost more than orjson saves);
* orjson refuses (and ``json`` is used for) what it would not write as ``json`` does: a dict key
  that is not a string, an integer beyond 64 bits, a lone surrogate, nesting over 254 deep;
  dataclasses and dates go to ``default``, as ``json`` sends them;
* NaN and infinities: orjson writes ``null``, as :func:`evalpipe.report.browser.json_for_script`
  has them written (its ``json`` path replaces them by None).

What it is given is what the report made from decoded JSON (no ``enum.Enum``, which orjson would
write as its value where ``json`` hands it to ``default``).

Decoding ``samples.jsonl`` with orjson was tried and dropped: 0.93 -> 0.71 s for the 94,000
records, but orjson reads an integer beyond 64 bits as a float, and finding such integers before
decoding cost as much as was saved; its dicts are also presized (632 B a record dict, not 464).
Tried again on 2026-12-06 with a cheaper check (19 digits in a row where a number may start:
``:``, ``,``, ``[``, white space or ``-``; a request key's hex digest has such runs after its
letters, so "19 digits anywhere" sent nearly every batch to ``json``): ~14-16 against ~17-20 µs a
record, but orjson's decoder holds ~12 times the text while it decodes (40 MB for a 3 MB batch of
512 lines, tracemalloc), which ``tests/report/test_report_memory.py`` caught. Dropped again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["compact"]

_OPTIONS = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _shape_table() -> bytes:
    """A ``bytes.translate`` table: ``0`` kept, every other digit to ``1``; ``e``, ``-``, ``.`` kept; the rest ``x``."""
    table = bytearray(b"x" * 256)
    for byte in b"123456789":
        table[byte] = ord("1")
    for byte in b"0e-.":
        table[byte] = byte
    return bytes(table)


_SHAPES = _shape_table()


def compact(data: Any, default: Callable[[Any], Any]) -> str | None:
    """``data`` as compact JSON, exactly as ``json`` writes it (non-ASCII as it is); None where orjson's
    text could differ: then encode it with ``json`` (see the module docstring). NaN and infinities: null."""
    try:
        raw = orjson.dumps(data, default=default, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return None
    shapes = raw.translate(_SHAPES)
    if b"e-" in shapes and (b"0e-" in shapes or b"1e-" in shapes):
        return None
    if b"0.0000" in shapes and (b"0.00000" in shapes or b"0.00001" in shapes):
        return None
    return raw.decode("utf-8")
