"""Issue 28 phase 2: the XML-tag answer parser's alignment keys, the old per-character loop
against :func:`evalpipe.parsers.text_keys.text_keys`, side by side in one process.

The 940 NCBI Disease test sentences, each answered four ways in turn (the gold tagged copy; one
entity's tags left out; a chatty preamble; the text re-spaced with a few characters altered:
``ﬁ``, full-width letters, a zero-width space, ``…``), so both the equal-keys path and the
SequenceMatcher path of the parser are exercised. Timed, rounds interleaved old/new:

- ``keys``   the keys of every source and every answer's tag-stripped text, as the parser asks
             for them (``MAX_SOURCE_KEYS`` for the source, ``2·|source keys| + 1000`` for the answer);
- ``parse``  ``parse_tagged_answer`` on every answer, with ``xml_tags.text_keys`` swapped for the
             old loop (``old``) or left as it is (``new``).

Every key triple and every parse is checked identical between the two before any timing. The
machine is shared: the load average is printed before and after; read the ratios.

    /work/main/.venv/bin/python bench/parser_speed.py --repeat 5 --cycles 10

Findings
========

Branch speed2 off main 70677b2 (2026-12-03, 2 cores shared with another engineer), 9,400
answers (the 940 sentences cycled 10 times; ``--repeat 5``, best round of each):

- see the figures printed by the run recorded below.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import statistics
import time
import unicodedata
from collections.abc import Callable
from typing import Any

from evalpipe.parsers import xml_tags
from evalpipe.parsers.text_keys import SCAN_FACTOR, text_keys
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task

_NON_BLANK = re.compile(r"\S")
_OLD_CACHE: dict[str, str] = {}


def _old_norm(ch: str) -> str:
    key = _OLD_CACHE.get(ch)
    if key is None:
        folded = unicodedata.normalize("NFKC", ch).lower()
        key = "".join(c for c in folded if not c.isspace() and unicodedata.category(c) != "Cf")
        _OLD_CACHE[ch] = key
    return key


def old_keys(text: str, limit: int) -> tuple[str, list[int], bool]:
    """The parser's ``_keys`` as of main 70677b2: one Python iteration per character."""
    keys: list[str] = []
    offsets: list[int] = []
    stop = min(len(text), SCAN_FACTOR * limit)
    for i in range(stop):
        ch = text[i]
        if ch.isspace():
            continue
        for k in _old_norm(ch):
            keys.append(k)
            offsets.append(i)
        if len(keys) >= limit:
            stop = i + 1
            break
    return "".join(keys), offsets, _NON_BLANK.search(text, stop) is not None


def _altered(answer: str) -> str:
    """The answer re-spaced, with characters whose keys take the slow paths."""
    return (answer.replace(" ", "  ").replace("fi", "ﬁ", 1).replace("a", "ａ", 2)
            .replace(" .", " \u200b.", 1).replace(" ,", " …", 1))


def _cases(cycles: int) -> list[tuple[str, str]]:
    spec = get_task("ncbi_disease")
    examples = list(spec.load(LoadOptions()).examples)
    cases: list[tuple[str, str]] = []
    for i in range(cycles * len(examples)):
        ex = examples[i % len(examples)]
        gold = spec.shot_target(ex)
        answer = (gold if i % 4 == 0 else gold.replace("<disease>", "", 1).replace("</disease>", "", 1) if i % 4 == 1
                  else f"Sure, here it is:\n{gold}" if i % 4 == 2 else _altered(gold))
        cases.append((answer, ex.inputs["text"]))
    return cases


def _key_calls(cases: list[tuple[str, str]]) -> list[tuple[str, int]]:
    """The (text, limit) pairs the parser hands to its key function for these answers."""
    calls: list[tuple[str, int]] = []
    original = xml_tags.text_keys

    def record(text: str, limit: int) -> tuple[str, list[int], bool]:
        calls.append((text, limit))
        return original(text, limit)

    xml_tags.text_keys = record  # type: ignore[assignment]
    try:
        for answer, source in cases:
            xml_tags.parse_tagged_answer(answer, source, {"disease": "Disease"})
    finally:
        xml_tags.text_keys = original
    return calls


def _parse_all(cases: list[tuple[str, str]], keys: Callable[[str, int], Any]) -> list[xml_tags.TaggedParse]:
    original = xml_tags.text_keys
    xml_tags.text_keys = keys
    try:
        return [xml_tags.parse_tagged_answer(a, s, {"disease": "Disease"}) for a, s in cases]
    finally:
        xml_tags.text_keys = original


def _time(action: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=10, help="times the 940 sentences are cycled")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds of old and new")
    args = parser.parse_args()
    cases = _cases(args.cycles)
    calls = _key_calls(cases)
    assert all(old_keys(t, n) == text_keys(t, n) for t, n in calls), "keys differ"
    assert _parse_all(cases, old_keys) == _parse_all(cases, text_keys), "parses differ"
    print(f"{len(cases)} answers, {len(calls)} key calls, {sum(len(t) for t, _ in calls):,} characters; "
          f"identical keys and parses; load average {os.getloadavg()[0]:.2f}")
    impls: dict[str, Callable[[str, int], Any]] = {"old": old_keys, "new": text_keys}
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeat):
        for name, keys in impls.items():
            times.setdefault(("keys", name), []).append(_time(lambda k=keys: [k(t, n) for t, n in calls]))
            times.setdefault(("parse", name), []).append(_time(lambda k=keys: _parse_all(cases, k)))
    for what in ("keys", "parse"):
        old, new = min(times[(what, "old")]), min(times[(what, "new")])
        print(f"{what:6} old {old:7.3f} s  new {new:7.3f} s  old/new x{old / new:5.2f}  "
              f"(medians {statistics.median(times[(what, 'old')]):.3f} / {statistics.median(times[(what, 'new')]):.3f})")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
