"""Alignment keys of a text: what :mod:`evalpipe.parsers.xml_tags` compares answer and source on.

A text's key drops whitespace and replaces each remaining character by its NFKC form, lower-cased,
without whitespace or format (``Cf``) characters — so ``，`` ≡ ``,``, ``Ａ`` ≡ ``a``, ``ﬁ`` → ``fi``,
a zero-width space → nothing. Each key character remembers the offset of the character it came
from, which is how an entity found in the key is carried back to the text.

Why a module of its own: this is the parser's hot loop (profiled at 94 s of a 94,000-sentence
NCBI Disease run, issue 28), so it is written for speed, and that needs care to stay *exactly*
the per-character rule above. The rule is applied per character, never to a whole string: a
string's NFKC composes across characters (``e`` + combining acute → ``é``) and ``str.lower`` of a
string is context dependent (a final ``Σ`` becomes ``ς``), and either would change the key. So
each distinct character's key is worked out once (:func:`char_key`) and kept in a translation
table; a text's key is then one ``str.translate`` call, and its offsets are built by
``itertools`` over per-character key lengths — both loops run in C, not per character in Python.
``tests/parsers/test_text_keys.py`` checks the result against the plain per-character loop.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_right
from itertools import chain, compress, repeat

__all__ = ["SCAN_FACTOR", "WHITESPACE", "char_key", "text_keys"]

#: characters scanned per key character wanted, at most, when reading keys (whitespace-only junk)
SCAN_FACTOR = 8
#: every character for which str.isspace() is True (tests check the list is complete)
WHITESPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + (
    "\u2028\u2029\u202f\u205f\u3000")
_NON_BLANK = re.compile(r"\S")
_MIN_CHUNK = 4096  # characters read at least per chunk, so blank-heavy junk takes few chunks


def char_key(ch: str) -> str:
    """Key of one non-blank character: NFKC, lower-cased, less whitespace and ``Cf`` characters.

    NFKC can yield blanks (``¨`` → space + combining diaeresis) and several characters (``ﬁ``),
    hence the filter and a string result.
    """
    folded = unicodedata.normalize("NFKC", ch).lower()
    return "".join(c for c in folded if not c.isspace() and unicodedata.category(c) != "Cf")


class _KeyTable(dict[int, str]):
    """Code point → key (``""`` for whitespace), filled on first sight, for ``str.translate``.

    ``str.translate`` looks each code point up with ``__getitem__``, so ``__missing__`` fills the
    table for a new character during the call; :attr:`lengths` (character → key length) is
    filled alongside, for the offsets. Both stay small: one entry per distinct character seen.
    """

    def __init__(self) -> None:
        super().__init__()
        self.lengths: dict[str, int] = {}
        self.single: set[str] = set()  # characters whose key is exactly one character
        for code in range(128):  # warm the ASCII range: most texts need nothing else
            self[code]  # noqa: B018 - fills the entry

    def __missing__(self, code: int) -> str:
        ch = chr(code)
        key = "" if ch.isspace() else char_key(ch)
        self[code] = key
        self.lengths[ch] = len(key)
        if len(key) == 1:
            self.single.add(ch)
        return key


_TABLE = _KeyTable()


def _offsets(chunk: str, keys: str, base: int) -> list[int]:
    """Offset (from ``base``) of the character each of ``keys`` — ``chunk``'s key — came from."""
    positions = range(base, base + len(chunk))
    if len(keys) <= len(chunk):
        # the usual case: no character has a key longer than one character, so the offsets are
        # the positions of the characters with a one-character key (the others have none)
        offsets = list(compress(positions, map(_TABLE.single.__contains__, chunk)))
        if len(offsets) == len(keys):
            return offsets
    # some character (``ﬁ``, ``…``) has a longer key: repeat each position as often
    return list(chain.from_iterable(map(repeat, positions, map(_TABLE.lengths.__getitem__, chunk))))


def text_keys(text: str, limit: int) -> tuple[str, list[int], bool]:
    """Whitespace-free key of ``text``, each key character's offset in ``text``, and whether
    reading stopped before the end of the text's non-blank content.

    Reading stops at the character whose key reaches ``limit`` key characters (all of that
    character's key is kept), or after ``SCAN_FACTOR * limit`` characters (so a megabyte of
    blanks costs no more than a short text). The text is read in chunks of about the keys still
    wanted, so an absurdly long text costs memory for ``limit`` characters, not for the scan.
    """
    stop = max(0, min(len(text), SCAN_FACTOR * limit))
    parts: list[str] = []
    offsets: list[int] = []
    count = pos = 0
    while pos < stop:
        end = min(stop, pos + max(limit - count, _MIN_CHUNK))
        chunk = text[pos:end]
        keys = chunk.translate(_TABLE)  # fills the table for every new character first
        parts.append(keys)
        offsets += _offsets(chunk, keys, pos)
        count += len(keys)
        if count >= limit:
            last = offsets[limit - 1]  # the character whose key reached the limit
            cut = bisect_right(offsets, last)
            del offsets[cut:]
            return "".join(parts)[:cut], offsets, _NON_BLANK.search(text, last + 1) is not None
        pos = end
    return "".join(parts), offsets, _NON_BLANK.search(text, stop) is not None
