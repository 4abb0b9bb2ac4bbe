"""Every parser in evalpipe/parsers costs time linear in the answer, on answers built to make
regexes backtrack or loops rescan; and the possessive quantifiers that made that so match
exactly what the plain ones did."""

from __future__ import annotations

import random
import re

import pytest

from evalpipe.parsers import choice, committed_label, letter, letter_strict, nli_label
from evalpipe.parsers.choice import parse_choice
from evalpipe.parsers.icd10 import parse_icd10_codes
from evalpipe.parsers.letter import parse_letter
from evalpipe.parsers.letter_strict import parse_letter_strict
from evalpipe.parsers.nli_label import parse_nli_label
from evalpipe.parsers.term_list import parse_term_list
from evalpipe.parsers.triples import parse_triples
from evalpipe.parsers.zh_labels import LabelSet, parse_label
from evalpipe.text.chinese import label_key
from tests.parsers.scaling import assert_linear

PARSERS = {
    "choice": lambda a: parse_choice(a, {"A": "colon cancer", "B": "pulmonary hypertension", "C": "hypertension"}),
    "icd10": parse_icd10_codes,
    "nli_label": parse_nli_label,
    "letter": lambda a: parse_letter(a, {"A": "colon cancer", "B": "hypertension", "C": "asthma", "D": "gout"}),
    "letter_strict": lambda a: parse_letter_strict(a, {"A": "colon cancer", "B": "hypertension", "C": "asthma",
                                                       "D": "gout"}),
    "term_list": lambda a: parse_term_list(a, known_keys={"头痛"}),
    "triples": lambda a: parse_triples(a, predicates=["治疗"]),
    "zh_labels": lambda a: parse_label(a, LabelSet.of(["是", "否"])),
}

#: hostile answers as functions of a size: blank runs after the phrases regexes look for,
#: deep wrappers for label keys, many distinct terms, lines and triples
HOSTILE = {
    "answer-blanks": lambda n: "The answer is" + " " * n + "!",
    "answer-blanks-stars": lambda n: "answer" + " *" * n + "!",
    "label-blanks": lambda n: "Neutral" + " " * n + "x",
    "bold-blanks": lambda n: "** A" + " " * n + "x",
    "relation-noise": lambda n: "relationship" + " -" * n + "!",
    "nested-brackets": lambda n: "(" * n + "是" + ")" * n,
    "nested-quotes": lambda n: "“" * n + "是" + "”。" * n,
    "distinct-terms": lambda n: "##".join(f"term{i}" for i in range(n)),
    "triple-lines": lambda n: "".join(f"头{i} | 治疗 | 尾{i}\n" for i in range(n)),
    "json-lines": lambda n: "".join(f'["头{i}", "治疗", "尾"]\n' for i in range(n)),
    "think": lambda n: "<think>" * n + "是",
    "fences": lambda n: "```" * n + "是",
    "icd-like": lambda n: "I10." * n,
}


@pytest.mark.parametrize("parser", sorted(PARSERS))
@pytest.mark.parametrize("hostile", sorted(HOSTILE))
def test_parsers_are_linear_on_hostile_answers(parser, hostile):
    make = HOSTILE[hostile]
    assert_linear(PARSERS[parser], make(2_500), make(10_000))


def test_label_key_strips_deep_wrappers_in_linear_time():
    assert label_key("((（“是”）))。") == "是"
    assert label_key("(" * 3 + "是" + ")。" * 3) == "是"
    assert_linear(label_key, "(" * 10_000 + "是" + ")" * 10_000, "(" * 40_000 + "是" + ")" * 40_000)


# ---- the possessive patterns match what the plain ones did

def _plain(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """The pattern with possessive quantifiers (``*+``, ``++``) made plain again."""
    return re.compile(pattern.pattern.replace("*+", "*").replace("++", "+"), pattern.flags)


POSSESSIVE = {
    "choice._STATED": (choice._STATED, "finditer"), "choice._BOLD": (choice._BOLD, "finditer"),
    "nli.leading": (nli_label._NLI.leading, "finditer"), "nli.committing": (nli_label._NLI.committing, "finditer"),
    "nli.hedge": (nli_label._NLI.hedge, "match"), "committed_label._REJECTED": (committed_label._REJECTED, "match"),
    "letter_strict._ALONE": (letter_strict._ALONE, "match"), "letter_strict._HEDGE": (letter_strict._HEDGE, "finditer"),
    "letter._LEADING": (letter._LEADING, "match"), "letter._JOINED": (letter._JOINED, "match"),
    **{f"letter._STATEMENTS[{i}]": (p, "finditer") for i, p in enumerate(letter._STATEMENTS) if "+" in p.pattern},
    **{f"letter._HEDGES[{i}]": (p, "finditer") for i, p in enumerate(letter._HEDGES) if "*+" in p.pattern or "++" in p.pattern},
}
PIECES = ["answer", "Answer", "ANSWER", "is", "would", "be", "seems", ":", "-", "=", "*", "**", " ", "  ", "\n",
          "option", "(", ")", "[", "]", "{", "}", "A", "c", "C", "x", "Z", "1", "entailment", "NEUTRAL",
          "contradiction", "or", "/", "and", "not", "wrong", "the", "final", "relation", "relationship",
          "between", "sentences", "two", "label", "it", "this", "'", '"', "`", "_", "#", ">", ".", "\t"]


@pytest.mark.parametrize("name", sorted(POSSESSIVE))
def test_possessive_patterns_match_like_plain_ones(name):
    pattern, how = POSSESSIVE[name]
    plain = _plain(pattern)
    assert plain.pattern != pattern.pattern  # the test compares two different patterns
    rng = random.Random(name)
    for _ in range(4_000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 14)))
        if how == "match":
            got, want = pattern.match(text), plain.match(text)
            assert (got and (got.span(), got.groups())) == (want and (want.span(), want.groups())), text
        else:
            got = [(m.span(), m.groups()) for m in pattern.finditer(text)]
            assert got == [(m.span(), m.groups()) for m in plain.finditer(text)], text
