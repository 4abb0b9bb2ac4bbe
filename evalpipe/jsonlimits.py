"""One nesting limit for every JSON document a server sends us (completions, model lists, judge replies).

Python's ``json`` module recurses once per nesting level, so ``[[[[…]]]]`` 50,000 deep ends in a
``RecursionError`` — not a ``ValueError`` — and code that walks the decoded value recurses again.
No reply evalpipe reads nests more than a handful of levels (a completion is four deep, a log-
probability reply five, a judge's ratings two or three), so anything deeper than
:data:`MAX_JSON_DEPTH` is refused before it is decoded, as :class:`TooDeep` (a ``ValueError``, so
every caller that already handles malformed JSON handles it too).

Why a pre-scan rather than catching ``RecursionError``: the interpreter's recursion limit is not a
limit we choose (it moves with the stack already in use), and a value that just fits still breaks
the next recursive walk. The scan is cheap where it matters: a body with fewer opening brackets
than the limit cannot nest deeper, which ``bytes.count`` settles in C for nearly every reply.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "TooDeep", "check_depth", "loads"]

#: the deepest nesting (objects and arrays) accepted in any JSON a server sends
MAX_JSON_DEPTH = 64

#: every byte but the quote and the brackets (deleted by ``bytes.translate``, in C)
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"[]{}')


class TooDeep(ValueError):
    """JSON nested deeper than the limit."""


def _depth_over(raw: bytes, limit: int) -> bool:
    """Whether brackets outside strings nest deeper than ``limit`` somewhere in ``raw``.

    Every step runs in C: escaped backslashes and quotes are dropped, then every byte but quotes and
    brackets; what lies between a pair of quotes was a string's content and goes too. Of the brackets
    left, innermost pairs are removed one level per round: brackets still left after ``limit`` rounds
    nest deeper. Brackets that stop pairing (the text is no JSON) count as deep when more than
    ``limit`` openers are left, since a decoder would recurse into them before it noticed.
    """
    kept = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    brackets = b"".join(kept.split(b'"')[::2])
    for _ in range(limit):
        reduced = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if reduced == brackets:
            return brackets.count(b"[") + brackets.count(b"{") > limit
        brackets = reduced
        if not brackets:
            return False
    return bool(brackets)


def check_depth(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise :class:`TooDeep` when ``text`` nests objects/arrays deeper than ``limit``."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if raw.count(b"[") + raw.count(b"{") > limit and _depth_over(raw, limit):
        raise TooDeep(f"JSON nested deeper than {limit} levels")


def loads(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` for JSON from a server: :class:`TooDeep` beyond ``limit`` levels, ``ValueError``
    for anything that is not JSON."""
    check_depth(text, limit)
    return json.loads(text)
