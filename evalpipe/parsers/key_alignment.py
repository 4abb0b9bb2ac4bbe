"""How the XML-tag parser lines an answer's key up with the source's (rules 6, 7 and 9 of
:mod:`evalpipe.parsers.xml_tags`): matching blocks, the search fallback for big texts, the
chunk coverage that stands in for aligned characters there, and the O(1)-per-entity map.

A module of its own because it is the numeric half of the parser: it sees only the two key
strings (:mod:`evalpipe.parsers.text_keys`) and key offsets, never tags or the original texts.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable
from itertools import accumulate, repeat
from operator import add, mul

__all__ = ["MIN_BLOCK", "SEARCH_WORK_FACTOR", "Alignment", "align_blocks", "align_search", "ngram_coverage"]

MIN_BLOCK = 3  # shorter matching blocks are treated as coincidence
#: the search fallback scans at most this many characters per key character of both texts
SEARCH_WORK_FACTOR = 64


def ngram_coverage(x: str, y: str, n: int = 16) -> float:
    """Share of ``x``'s n-character chunks (every n-th position) found anywhere in ``y``.

    A cheap coverage for big texts: O(|x| + |y|) time, and memory for ``x``'s chunks only.
    """
    if len(x) < n or len(y) < n:
        return 1.0 if x and x in y else 0.0
    chunks = Counter(x[i:i + n] for i in range(0, len(x) - n + 1, n))
    total = sum(chunks.values())
    found = 0
    for i in range(len(y) - n + 1):
        count = chunks.pop(y[i:i + n], 0)
        if count:
            found += count
            if not chunks:
                break
    return found / total


def align_blocks(a: str, s: str) -> list[tuple[int, int, int]]:
    matcher = difflib.SequenceMatcher(None, a, s, autojunk=False)
    return [(i, j, n) for i, j, n in matcher.get_matching_blocks()
            if n >= MIN_BLOCK or (n and n in (len(a), len(s)))]


class _Grams:
    """The source's substrings of up to ``Q`` characters, to rule out most absent entity texts
    without scanning the source: a text of at most ``Q`` characters occurs iff it is in the set
    of its length; a longer one can occur only if each of its ``Q``-grams does."""

    Q = 4

    def __init__(self, s: str) -> None:
        self.s = s
        self._sets: dict[int, set[str]] = {}

    def _grams(self, q: int) -> set[str]:
        if q not in self._sets:
            self._sets[q] = {self.s[i:i + q] for i in range(len(self.s) - q + 1)}
        return self._sets[q]

    def may_occur(self, needle: str) -> tuple[bool, int]:
        """(False if ``needle`` surely does not occur, characters examined)."""
        if len(needle) <= self.Q:
            return needle in self._grams(len(needle)), len(needle)
        grams = self._grams(self.Q)
        for i in range(len(needle) - self.Q + 1):
            if needle[i:i + self.Q] not in grams:
                return False, i + self.Q
        return True, len(needle)


def align_search(a: str, s: str, ranges: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Fallback for big texts: find each entity's key in the source, in answer order.

    Each search starts where the previous hit started. An entity inside one already found (a
    nested tag) is placed by it, not searched again. Successful searches cost O(|a| + |s|) in
    all (each scans from the last hit to the next). A text that cannot occur is mostly ruled
    out by the source's 4-grams (:class:`_Grams`) without a scan; the rest of the failed
    searches scan to the end, so they are remembered per text, and the whole search stops after
    ``SEARCH_WORK_FACTOR * (|a| + |s|)`` characters of work: entities it did not reach stay
    unaligned (and are counted so).
    """
    blocks: list[tuple[int, int, int]] = []
    cursor = covered = 0
    budget = SEARCH_WORK_FACTOR * (len(a) + len(s))
    grams = _Grams(s)
    absent: dict[str, int] = {}  # text -> cursor from which it was not found (cursors only grow)
    for k0, k1 in sorted(set(ranges), key=lambda r: (r[0], -r[1])):
        if k1 <= k0 or k1 <= covered:
            continue
        if budget <= 0:
            break
        needle = a[k0:k1]
        if absent.get(needle, len(s) + 1) <= cursor:
            continue
        possible, examined = grams.may_occur(needle)
        budget -= examined
        if not possible:
            continue
        j = s.find(needle, cursor)
        if j < 0:
            budget -= len(s) - cursor + len(needle)
            if len(needle) <= 256:
                absent[needle] = cursor
            continue
        budget -= j - cursor + len(needle)
        blocks.append((k0, j, k1 - k0))
        cursor, covered = j, k1
    return blocks


def _last_marked_before(marked: bytes | bytearray) -> list[int]:
    """``out[k]`` (k = 0…n) = the last index < k where ``marked`` is 1, else -1.

    Built with ``itertools`` in C: index ``k`` contributes ``(k + 1)·m − 1`` (``k`` if marked,
    −1 if not) to a running maximum.
    """
    n = len(marked)
    return list(accumulate(map(add, map(mul, range(1, n + 1), marked), repeat(-1)), max, initial=-1))


def _first_marked_from(marked: bytes | bytearray) -> list[int]:
    """``out[k]`` (k = 0…n) = the first index ≥ k where ``marked`` is 1, else n.

    Index ``k`` contributes ``n + (k − n)·m`` (``k`` if marked, ``n`` if not) to a running
    minimum taken from the end.
    """
    n = len(marked)
    out = list(accumulate(reversed(list(map(add, map(mul, range(-n, 0), marked), repeat(n)))), min, initial=n))
    out.reverse()
    return out


class Alignment:
    """Answer key → source key map built from matching blocks, with the running counts that let
    each entity be mapped in O(1) (rule 7), however many entities nest over the same text."""

    def __init__(self, a_len: int, s_len: int, blocks: Iterable[tuple[int, int, int]]) -> None:
        blocks = list(blocks)
        self.s_len = s_len
        if blocks == [(0, 0, a_len)] and a_len == s_len:  # equal keys, the usual case: the identity
            self.a2s = list(range(a_len))
            self.count = self.next_hit = list(range(a_len + 1))  # never written to after this
            self.prev_hit = list(range(-1, a_len))
            self.prev_used, self.next_used = self.prev_hit, self.next_hit
            return
        a2s = [-1] * a_len
        s_used = bytearray(s_len)
        for i, j, n in blocks:
            if n > 0 and a2s[i:i + n].count(-1) == n and s_used.find(1, j, j + n) < 0:
                a2s[i:i + n] = range(j, j + n)  # all free: the one-by-one loop below would do this
                s_used[j:j + n] = b"\x01" * n
                continue
            for d in range(n):  # a block overlapping earlier ones (the search fallback's)
                if a2s[i + d] < 0 and not s_used[j + d]:
                    a2s[i + d] = j + d
                    s_used[j + d] = 1
        self.a2s = a2s
        hit = bytes(map((-1).__lt__, a2s))  # 1 where the answer key is aligned
        self.count = list(accumulate(hit, initial=0))  # aligned answer keys before k
        self.prev_hit = _last_marked_before(hit)  # last aligned answer key < k
        self.next_hit = _first_marked_from(hit)  # first aligned answer key >= k
        self.prev_used = _last_marked_before(s_used)  # last used source key < x
        self.next_used = _first_marked_from(s_used)  # first used source key >= x

    def map_entity(self, k0: int, k1: int) -> tuple[int, int] | None:
        """Key range of an entity in the answer → inclusive key range in the source (rule 7)."""
        hits = self.count[k1] - self.count[k0]
        if not hits or 2 * hits < k1 - k0:
            return None
        first, last = self.next_hit[k0], self.prev_hit[k1]
        lo, hi = self.a2s[first], self.a2s[last]
        # extend over as many unaligned source keys as the entity had unaligned keys at each end
        if first > k0 and lo > 0:
            lo = max(lo - (first - k0), self.prev_used[lo] + 1)
        if k1 - 1 > last and hi + 1 < self.s_len:
            hi = min(hi + (k1 - 1 - last), self.next_used[hi + 1] - 1)
        return (lo, hi) if hi - lo + 1 <= 2 * (k1 - k0) + 2 else None
