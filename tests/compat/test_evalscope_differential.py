"""The linear-time evalscope compat parser gives the same results as a literal transcription.

:mod:`tests.compat.slow_evalscope` applies evalscope's rules as the regexes and loops they are;
:mod:`evalpipe.compat.evalscope_ner` computes the same with bisects (the literal form is quadratic
on hostile answers). They must agree on every step — clean-up, entities, BIO tags — for answers
generated to hit the rules' corners: nested, crossed, unclosed and wrongly closed tags, repeated
entity texts with and without matching context, newlines inside tag bodies, wrappers repeated or
unclosed, non-ASCII tag names and text.
"""

from __future__ import annotations

import random

import pytest

from evalpipe.compat.evalscope_ner import (
    NCBI_TAG_MAP,
    evalscope_clean_answer,
    evalscope_predicted_tags,
    evalscope_tagged_entities,
)
from tests.compat import slow_evalscope
from tests.parsers.scaling import assert_linear

TAG_MAP = {**NCBI_TAG_MAP, "Chem": "Chemical"}
WORDS = ["pain", "a", "b", "colon", "cancer", "FAP", "pain", "é", "中文", "x_1", "<", ">", "a b", ""]
PIECES = [
    "<response>", "</response>", "<RESPONSE>", "<disease>", "</disease>", "<Disease>", "</DISEASE>",
    "<chem>", "</chem>", "<Chem>", "</Chem>", "<b>", "</b>", "<疾病>", "</疾病>", "</x>", "<dis", "ease>",
    "</", "<", ">", "<>", "</>", "<a b>", "\n", "\n", " ", " ", "  ", "&amp;", "<<", ">>", "\\1", "\t",
]


def _sentence(rng: random.Random) -> list[str]:
    n = rng.randint(0, 14)
    vocab = WORDS if rng.random() < 0.9 else WORDS + ["", "  "]
    return [rng.choice(vocab[:-1] if rng.random() < 0.95 else vocab) for _ in range(n)]


def _answer(rng: random.Random, tokens: list[str]) -> str:
    parts = []
    for _ in range(rng.randint(0, 30)):
        roll = rng.random()
        if roll < 0.45 and tokens:
            parts.append(rng.choice(tokens))
        elif roll < 0.55:
            parts.append(rng.choice(WORDS))
        else:
            parts.append(rng.choice(PIECES))
        if rng.random() < 0.5:
            parts.append(" ")
    return "".join(parts)


def _cases(seed: int, count: int):
    rng = random.Random(seed)
    for _ in range(count):
        tokens = _sentence(rng)
        yield _answer(rng, tokens), tokens


def _entity_tuples(cleaned: str):
    return [(e.type, e.text, e.start, e.end) for e in evalscope_tagged_entities(cleaned, TAG_MAP)]


@pytest.mark.parametrize("seed", range(6))
def test_agrees_with_the_literal_rules_on_generated_answers(seed):
    for answer, tokens in _cases(seed, 1500):
        cleaned = slow_evalscope.clean(answer)
        assert evalscope_clean_answer(answer) == cleaned, answer
        assert _entity_tuples(cleaned) == slow_evalscope.entities(cleaned, TAG_MAP), cleaned
        assert evalscope_predicted_tags(answer, tokens, TAG_MAP) == slow_evalscope.predicted_tags(
            answer, tokens, TAG_MAP), (answer, tokens)


# repeated entity texts whose contexts occur in the sentence (the context walk), or do not
@pytest.mark.parametrize("answer", [
    "pain a <disease>pain</disease> b pain",
    "q q q <disease>pain</disease> z z",
    "q q q <disease></disease> z z",
    "b pain <disease>pain</disease> a",
    "<disease></disease> zz <disease></disease> a <disease></disease>",
    "<response>\n<disease>pain\n</disease></response> <disease>a</disease>",
    "<disease>pain</chem> <chem>a</disease>\n<disease>b",
])
def test_agrees_on_context_corner_cases(answer):
    sentences = [s.split() for s in ("pain a pain b pain c pain d", "a pain b pain a pain", "pain", "", "a",
                                      "pain a", "w1 w2 w3 w4 pain x pain y")]
    for tokens in [*sentences, ["a", ""], ["", "a", "", ""], ["pain", "", "pain"]]:  # empty tokens too
        assert evalscope_predicted_tags(answer, tokens, TAG_MAP) == slow_evalscope.predicted_tags(
            answer, tokens, TAG_MAP)


TOKENS = "Risk of colon cancer in familial adenomatous polyposis patients .".split()


@pytest.mark.parametrize("unit", ["<response>", "<disease>cancer ", "<disease>cancer</disease> ",
                                  "<disease>x</chem>\n", "<a><b>", "<disease>colon</disease> q%d "])
def test_hostile_answers_cost_grows_linearly(unit):
    """Four times the answer costs well under 16 times the time (it was quadratic: 8,000 unclosed
    tags took 18 s); compared with itself, so no absolute time is asserted."""

    def answer(n: int) -> str:
        return "".join(unit % i if "%d" in unit else unit for i in range(n))

    assert_linear(lambda a: evalscope_predicted_tags(a, TOKENS, NCBI_TAG_MAP), answer(5_000), answer(20_000))
