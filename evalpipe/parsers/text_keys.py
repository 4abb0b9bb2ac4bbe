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
_MAX_INSERTS = 64  # extra key characters patched into a chunk's offsets one by one, at most
#: per ASCII byte, 1 if the character has a key (is not blank), for the offsets of ASCII text
_ASCII_KEPT = bytes(0 if chr(code).isspace() else 1 for code in range(128)) + bytes(128)


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
    filled alongside, for the offsets. One entry per distinct character seen (at most one per code
    point, as the per-character cache before it).
    """

    def __init__(self) -> None:
        super().__init__()
        self.lengths: dict[str, int] = {}
        self.multi: set[str] = set()  # characters whose key is longer than one character
        for code in range(128):  # warm the ASCII range: most texts need nothing else
            self[code]  # noqa: B018 - fills the entry

    def __missing__(self, code: int) -> str:
        ch = chr(code)
        key = "" if ch.isspace() else char_key(ch)
        # the length first: another thread that finds the table entry then needs the length
        self.lengths[ch] = len(key)
        if len(key) > 1:
            self.multi.add(ch)
        self[code] = key
        return key


_TABLE = _KeyTable()


def _chunk_keys(chunk: str, base: int) -> tuple[str, list[int]]:
    """``chunk``'s key, and the offset (from ``base``) of the character each key character came from."""
    positions = range(base, base + len(chunk))
    if chunk.isascii():
        # ASCII: NFKC is the identity, nothing is Cf, and lower() is per character, so the key
        # is the text less blanks, lower-cased (checked for all 128 by the tests); ``split()``
        # drops exactly the ASCII characters for which isspace() is True
        return "".join(chunk.split()).lower(), list(compress(positions, chunk.encode("ascii").translate(_ASCII_KEPT)))
    keys = chunk.translate(_TABLE)  # fills the table for every new character first
    lengths = _TABLE.lengths
    offsets = list(compress(positions, map(lengths.__getitem__, chunk)))  # each keyed character once
    extra = len(keys) - len(offsets)  # key characters beyond the first of each character
    if extra > _MAX_INSERTS:  # many ``ﬁ``/``…``-like characters: repeat each position as often
        return keys, list(chain.from_iterable(map(repeat, positions, map(lengths.__getitem__, chunk))))
    if extra:  # a few: repeat their positions in place, from the end so earlier indices hold
        for pos in reversed(list(compress(positions, map(_TABLE.multi.__contains__, chunk)))):
            at = bisect_right(offsets, pos)
            offsets[at:at] = [pos] * (lengths[chunk[pos - base]] - 1)
    return keys, offsets


def _cut(keys: str, offsets: list[int], limit: int) -> tuple[str, list[int], int]:
    """Keys up to the character whose key reaches ``limit`` key characters (all of its key), and
    where reading stopped (just after that character)."""
    last = offsets[limit - 1]
    cut = bisect_right(offsets, last)
    del offsets[cut:]
    return keys[:cut], offsets, last + 1


def text_keys(text: str, limit: int) -> tuple[str, list[int], bool]:
    """Whitespace-free key of ``text``, each key character's offset in ``text``, and whether
    reading stopped before the end of the text's non-blank content.

    Reading stops at the character whose key reaches ``limit`` key characters (all of that
    character's key is kept), or after ``SCAN_FACTOR * limit`` characters (so a megabyte of
    blanks costs no more than a short text). A long text is read in chunks of about the keys
    still wanted, so an absurdly long one costs memory for ``limit`` characters, not for the scan.
    """
    stop = max(0, min(len(text), SCAN_FACTOR * limit))
    if stop <= max(limit, _MIN_CHUNK):  # one chunk: every text of a normal size
        keys, offsets = _chunk_keys(text if stop == len(text) else text[:stop], 0)
        if 0 < limit <= len(keys):
            keys, offsets, stop = _cut(keys, offsets, limit)
        return keys, offsets, stop < len(text) and _NON_BLANK.search(text, stop) is not None
    parts: list[str] = []
    offsets = []
    count = pos = 0
    while pos < stop:
        end = min(stop, pos + max(limit - count, _MIN_CHUNK))
        keys, chunk_offsets = _chunk_keys(text[pos:end], pos)
        parts.append(keys)
        offsets += chunk_offsets
        count += len(keys)
        if count >= limit:
            keys, offsets, stop = _cut("".join(parts), offsets, limit)
            return keys, offsets, _NON_BLANK.search(text, stop) is not None
        pos = end
    return "".join(parts), offsets, _NON_BLANK.search(text, stop) is not None
