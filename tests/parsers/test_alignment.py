"""evalpipe.parsers.key_alignment's ``Alignment`` (the XML-tag parser's answer → source key map)
against the plain loops it was first written as (issue 28).

The tables are now built by slices and ``itertools`` (and the equal-keys case is the identity
outright); the reference below is the original one-loop-per-table construction, so any difference
in a table, or in any entity mapping, fails here.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

import pytest

from evalpipe.parsers.key_alignment import Alignment, align_blocks, align_search


class ReferenceAlignment:
    def __init__(self, a_len: int, s_len: int, blocks: Iterable[tuple[int, int, int]]) -> None:
        a2s = [-1] * a_len
        s_used = bytearray(s_len)
        for i, j, n in blocks:
            for d in range(n):
                if a2s[i + d] < 0 and not s_used[j + d]:
                    a2s[i + d] = j + d
                    s_used[j + d] = 1
        self.a2s = a2s
        self.s_len = s_len
        count = [0] * (a_len + 1)
        prev_hit = [-1] * (a_len + 1)
        for k, target in enumerate(a2s):
            count[k + 1] = count[k] + (target >= 0)
            prev_hit[k + 1] = k if target >= 0 else prev_hit[k]
        next_hit = [a_len] * (a_len + 1)
        for k in range(a_len - 1, -1, -1):
            next_hit[k] = k if a2s[k] >= 0 else next_hit[k + 1]
        prev_used = [-1] * (s_len + 1)
        for x in range(s_len):
            prev_used[x + 1] = x if s_used[x] else prev_used[x]
        next_used = [s_len] * (s_len + 1)
        for x in range(s_len - 1, -1, -1):
            next_used[x] = x if s_used[x] else next_used[x + 1]
        self.count, self.prev_hit, self.next_hit = count, prev_hit, next_hit
        self.prev_used, self.next_used = prev_used, next_used


_TABLES = ("a2s", "count", "prev_hit", "next_hit", "prev_used", "next_used")


def _check(a_len: int, s_len: int, blocks: list[tuple[int, int, int]]) -> None:
    new, ref = Alignment(a_len, s_len, iter(blocks)), ReferenceAlignment(a_len, s_len, blocks)
    assert new.s_len == ref.s_len
    for name in _TABLES:
        assert getattr(new, name) == getattr(ref, name), (name, a_len, s_len, blocks)
        assert all(type(v) is int for v in getattr(new, name)), name
    ranges = [(k0, k1) for k0 in range(a_len + 1) for k1 in range(k0, a_len + 1)] if a_len <= 40 else \
        [(k, k + w) for k in range(0, a_len, 7) for w in (1, 3, 10) if k + w <= a_len]
    for k0, k1 in ranges:
        if k1 > k0:
            # the rule's arithmetic over the reference tables (the same function: the tables are what changed)
            assert new.map_entity(k0, k1) == Alignment.map_entity(ref, k0, k1), (k0, k1, blocks)  # type: ignore[arg-type]


def _mutated(rng: random.Random, s: str) -> str:
    chars = list(s)
    for _ in range(rng.randint(0, max(1, len(chars) // 4))):
        op, at = rng.random(), rng.randint(0, len(chars))
        if op < 0.4:
            chars.insert(at, rng.choice("abcxyz"))
        elif op < 0.8 and at < len(chars):
            del chars[at]
        elif at < len(chars):
            chars[at] = rng.choice("abcxyz")
    return "".join(chars)


@pytest.mark.parametrize("n", [0, 1, 2, 5, 30, 500])
def test_identity(n):
    _check(n, n, [(0, 0, n)])


def test_edges():
    _check(0, 0, [])
    _check(0, 5, [])
    _check(5, 0, [])
    _check(5, 5, [(0, 0, 0)])
    _check(3, 5, [(0, 0, 3)])  # the whole answer, not the whole source: not the identity
    _check(5, 3, [(0, 0, 3)])


@pytest.mark.parametrize("seed", range(30))
def test_sequence_matcher_blocks(seed):
    rng = random.Random(seed)
    for _ in range(20):
        s = "".join(rng.choice("abcdefgh") for _ in range(rng.choice([1, 5, 20, 60, 300])))
        a = _mutated(rng, s)
        _check(len(a), len(s), align_blocks(a, s))


@pytest.mark.parametrize("seed", range(30))
def test_search_and_overlapping_blocks(seed):
    """The search fallback's blocks, and arbitrary (overlapping, repeated) ones."""
    rng = random.Random(seed)
    for _ in range(20):
        s = "".join(rng.choice("abcd") for _ in range(rng.choice([5, 30, 200])))
        a = _mutated(rng, s)
        ranges = [(k0, min(len(a), k0 + rng.randint(0, 12))) for k0 in sorted(rng.sample(range(len(a) + 1), 5))]
        _check(len(a), len(s), align_search(a, s, ranges))
        blocks = []
        for _ in range(rng.randint(0, 8)):
            n = rng.randint(0, min(len(a), len(s)))
            blocks.append((rng.randint(0, len(a) - n), rng.randint(0, len(s) - n), n))
        _check(len(a), len(s), blocks)


def test_an_exact_copy_reuses_the_source_keys_only_where_the_answer_would_read_them_all():
    """The answer's keys are read with a smaller limit than the source's (2·|source keys| + 1000),
    so its scan bound (SCAN_FACTOR times that) can stop short of a blank-padded source's last
    keys: there the copy must still miss them, as it did when it was read afresh."""
    from evalpipe.parsers.xml_tags import parse_tagged_answer

    blanks = " " * 20_000  # past SCAN_FACTOR * (2 * 12 + 1000) characters
    source = f"a b c {blanks}tail words"
    late = parse_tagged_answer(f"<response>a b c {blanks}<disease>tail</disease> words</response>", source,
                               {"disease": "Disease"})
    assert late.spans == () and late.diagnostics["unaligned_entities"] == 1
    assert late.diagnostics["source_coverage"] == 0.25 and late.diagnostics["answer_coverage"] == 1.0
    early = parse_tagged_answer(f"<response><disease>a b</disease> c {blanks}tail words</response>", source,
                                {"disease": "Disease"})
    assert [source[s.start:s.end] for s in early.spans] == ["a b"] and early.diagnostics["source_coverage"] == 0.25
    near = f"a b c {' ' * 100}tail words"  # within the bound: the copy is the identity
    whole = parse_tagged_answer(f"<response>a b c {' ' * 100}<disease>tail</disease> words</response>", near,
                                {"disease": "Disease"})
    assert [near[s.start:s.end] for s in whole.spans] == ["tail"] and whole.diagnostics["source_coverage"] == 1.0
