"""evalpipe.parsers.text_keys against the plain per-character loop it replaced (issue 28).

The fast version works on whole strings (``str.translate``, ``itertools``); the reference below is
the straightforward loop the XML-tag parser used before, kept here verbatim in spirit so any
difference in key, offsets or the truncation flag — for any text and any limit — fails a test.
"""

from __future__ import annotations

import random
import re
import sys
import unicodedata

import pytest

from evalpipe.parsers import text_keys as text_keys_module
from evalpipe.parsers.text_keys import SCAN_FACTOR, WHITESPACE, char_key, text_keys

_NON_BLANK = re.compile(r"\S")


def reference_char_key(ch: str) -> str:
    folded = unicodedata.normalize("NFKC", ch).lower()
    return "".join(c for c in folded if not c.isspace() and unicodedata.category(c) != "Cf")


def reference_keys(text: str, limit: int) -> tuple[str, list[int], bool]:
    keys: list[str] = []
    offsets: list[int] = []
    stop = min(len(text), SCAN_FACTOR * limit)
    for i in range(stop):
        ch = text[i]
        if ch.isspace():
            continue
        for k in reference_char_key(ch):
            keys.append(k)
            offsets.append(i)
        if len(keys) >= limit:
            stop = i + 1
            break
    return "".join(keys), offsets, _NON_BLANK.search(text, stop) is not None


# characters that stress each part of the rule: ASCII (all 128, controls included), Latin-1,
# full-width forms, compatibility characters with multi-character keys (ligatures, ellipsis,
# fractions, ㎏, Roman numerals), characters whose NFKC holds a blank (¨, ´), format characters (Cf:
# zero-width space/joiners, soft hyphen, BOM, bidi marks), combining marks, Greek sigma (context-
# dependent in str.lower), Turkish dotted İ (lower-cases to two characters), CJK, Hangul jamo,
# emoji with variation selectors, every whitespace character, and lone surrogates
_POOL = (
    [chr(c) for c in range(128)]
    + list("àéîõüÿßÆøÐþ¡¿µªº²³¹¼½¾")
    + list("ＡＢＺａｚ０９，。；：！？（）［］＜＞／＆　")
    + list("ﬁﬂﬃﬄﬅ…‥㎏㎡℃℉№™℡ⅠⅣⅫⅰ½⅓⅞①⑳㈱㍻")
    + list("¨´¸˘˙˚˛˜˝")
    + list("\u200b\u200c\u200d\u2060\ufeff\u00ad\u200e\u200f\u202a\u202e\u2066\u2069")
    + list("\u0300\u0301\u0308\u0327\u0345\u20dd")
    + list("ΣσςΑΩάΐ") + list("İıIi") + list("ǅǈǋ")
    + list("患者腹痛伴发热血压疼痛部腹") + list("\u1100\u1161\u11a8한국")
    + list("😀👍🏽\ufe0f\ufe0e") + list(WHITESPACE) + ["\ud800", "\udfff"]
)


def _random_text(rng: random.Random, n: int) -> str:
    if rng.random() < 0.3:  # mostly ASCII words with the odd other character, like real answers
        words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCXYZ-,.()0123") for _ in range(rng.randint(1, 9)))
                 for _ in range(max(1, n // 6))]
        text = " ".join(words)
        for _ in range(rng.randint(0, 3)):
            i = rng.randint(0, len(text))
            text = text[:i] + rng.choice(_POOL) + text[i:]
        return text
    return "".join(rng.choice(_POOL) for _ in range(n))


def _check(text: str, limit: int) -> None:
    assert text_keys(text, limit) == reference_keys(text, limit), (text, limit)


def test_char_key_of_every_bmp_character_matches_the_reference():
    for code in range(0x10000):
        ch = chr(code)
        assert char_key(ch) == reference_char_key(ch), hex(code)


def test_every_bmp_character_in_a_text_matches_the_reference():
    """Each character's table entry, through translate and the offsets, in runs of 1,000."""
    every = "".join(map(chr, range(0x10000)))
    for start in range(0, len(every), 1000):
        _check(every[start:start + 1000], 5000)


def test_ascii_key_is_lower_case_without_blanks():
    """The fact the fast path leans on, character by character for all 128."""
    for code in range(128):
        ch = chr(code)
        expected = "" if ch.isspace() else ch.lower()
        assert text_keys(ch, 10) == reference_keys(ch, 10) == (expected, [0] * len(expected), False), code
        assert unicodedata.normalize("NFKC", ch) == ch and unicodedata.category(ch) != "Cf"


def test_every_character_alone_and_in_context():
    for ch in _POOL:
        for text in (ch, f"a{ch}b", f"{ch}{ch} {ch}", f"Σ{ch}", f"e{ch}\u0301"):
            for limit in (1, 2, 3, 100):
                _check(text, limit)


@pytest.mark.parametrize("seed", range(40))
def test_random_texts_and_limits(seed):
    rng = random.Random(seed)
    for _ in range(60):
        text = _random_text(rng, rng.choice([0, 1, 2, 5, 20, 80, 300]))
        for limit in {-3, 0, 1, 2, 3, 7, len(text) // 3, len(text) // SCAN_FACTOR, len(text), 2 * len(text) + 1000}:
            _check(text, limit)


@pytest.mark.parametrize("text", [
    "",
    "   \t\n  ",
    " " * 100 + "x",  # reading stops after SCAN_FACTOR * limit blank characters
    "ﬃ" * 10,  # the limit falls inside a character's three-character key
    "ﬃ" * 100,  # more longer keys than are patched in one by one
    "a…b ﬁ​c" * 12,  # longer keys, zero-length ones and blanks, either way of building offsets
    "…\u200b…\u200b…",
    "\u200b" * 50 + "abc",  # keyless characters count against the scan, not the limit
    "Clustering of missense mutations in the ataxia - telangiectasia gene in a sporadic T - cell leukaemia .",
    "患者腹痛,伴发热(38℃)。",
    "ＴＥＳＴ　ＣＡＳＥ，ok",
    "ΟΔΥΣΣΕΥΣ ΣΑΣ",  # final sigma: a whole-string lower() would differ
    "cafe\u0301 re\u0301sume\u0301",  # combining marks: a whole-string NFKC would compose them
])
def test_edge_texts(text):
    for limit in range(-1, len(text) + 3):
        _check(text, limit)


def test_large_text_matches():
    rng = random.Random(7)
    text = "".join(_random_text(rng, 200) + " " for _ in range(200))
    for limit in (100, 5_000, 100_000):
        _check(text, limit)
    blank_heavy = " " * 30_000 + text  # several chunks of blanks before the first key
    for limit in (1_000, 5_000, 20_000):
        _check(blank_heavy, limit)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_chunk_boundaries_anywhere(monkeypatch, chunk):
    """Tiny chunks put a chunk boundary at every place, including inside a run of multi-character
    keys and right where the limit falls."""
    monkeypatch.setattr(text_keys_module, "_MIN_CHUNK", chunk)
    rng = random.Random(chunk)
    for _ in range(300):
        text = _random_text(rng, rng.choice([1, 5, 20, 80]))
        for limit in {1, 2, 3, len(text) // 3, len(text), 2 * len(text) + 10}:
            _check(text, limit)
    for text in ("ﬃ" * 10, "\u200b" * 50 + "abc", " " * 40 + "x y z"):
        for limit in range(0, len(text) + 2):
            _check(text, limit)


def test_whitespace_list_is_every_isspace_character():
    assert set(WHITESPACE) == {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
