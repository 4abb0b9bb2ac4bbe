"""Labels and fixed options that look distinct must be distinct: Unicode normalisation and scripts.

A label set is matched against answers and gold after normalisation, so two labels that differ only
by case or by a compatibility form (``ｙｅｓ`` and ``yes``) are one label written twice; and a label
that mixes look-alike alphabets (``уes`` with a Cyrillic ``у``) matches nothing a model writes,
silently scoring every answer wrong. :func:`distinct_problem` names either, with the code points.

Two labels are the same when ``unicodedata.normalize("NFKC", s).casefold()`` is. A label *mixes
scripts* when its letters come from more than one of the alphabets whose letters look alike —
Latin, Cyrillic, Greek (by the first word of each letter's Unicode name); letters of other scripts
(CJK, kana, Hangul…) combine freely with any, since ``COVID-19肺炎`` is an ordinary Chinese label.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

#: the alphabets whose letters are confusable with each other
CONFUSABLE_SCRIPTS = ("LATIN", "CYRILLIC", "GREEK")


def folded(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


def _script(char: str) -> str | None:
    name = unicodedata.name(char, "")
    word = name.split(" ", 1)[0]
    return word if word in CONFUSABLE_SCRIPTS else None


def mixed_scripts(text: str) -> str | None:
    """The letters of ``text`` by script, when it mixes confusable alphabets (else None)."""
    by_script: dict[str, list[str]] = {}
    for char in unicodedata.normalize("NFKC", text):
        if char.isalpha() and (script := _script(char)) is not None:
            by_script.setdefault(script, []).append(char)
    if len(by_script) < 2:
        return None
    return "; ".join(f"{script.lower()}: " + ", ".join(f"{c!r} U+{ord(c):04X}" for c in dict.fromkeys(chars))
                     for script, chars in by_script.items())


def distinct_problem(values: Sequence[str], what: str) -> str | None:
    """Why ``values`` (labels, fixed options) are not a usable set, or None."""
    seen: dict[str, str] = {}
    for value in values:
        mixed = mixed_scripts(value)
        if mixed is not None:
            return f"{what}: {value!r} mixes alphabets whose letters look alike ({mixed}); write it in one script"
        key = folded(value)
        if key in seen:
            return (f"{what}: {seen[key]!r} and {value!r} are the same after Unicode normalisation (NFKC) and "
                    "case-folding; list each once")
        seen[key] = value
    return None
