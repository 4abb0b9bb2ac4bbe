"""The judgement parser: what it accepts, what it refuses, and that garbage is never a rating."""

from __future__ import annotations

import pytest

from evalpipe.judging.parse import parse_judgement

CRITERIA = ("accuracy", "completeness", "clarity")
SCALE = (1, 5)


def read(text):
    return parse_judgement(text, CRITERIA, SCALE)


@pytest.mark.parametrize("text", [
    '{"accuracy": 4, "completeness": 3, "clarity": 5}',
    'Sure!\n```json\n{"accuracy": 4, "completeness": 3, "clarity": 5}\n```\nHope this helps.',
    '```\n{"accuracy": 4, "completeness": 3, "clarity": 5}\n```',
    'My ratings: {"Accuracy": 4, "Completeness": 3, "Clarity": 5} — done.',
    '{"accuracy": 4, "completeness": 3, "clarity": 5,}',
    "{'accuracy': 4, 'completeness': 3, 'clarity': 5}",
    '{"accuracy": "4", "completeness": "3/5", "clarity": 5.0}',
    '{"ratings": {"accuracy": 4, "completeness": 3, "clarity": 5}, "rationale": "ok"}',
    '{"accuracy": {"score": 4, "reason": "x"}, "completeness": {"rating": 3}, "clarity": {"value": 5}}',
    '<think>maybe {"accuracy": 1, "completeness": 1, "clarity": 1}</think>{"accuracy": 4, "completeness": 3, "clarity": 5}',
    'First draft {"accuracy": 2, "completeness": 2, "clarity": 2}. Correction: {"accuracy": 4, "completeness": 3, "clarity": 5}',
    '{"rationale": "a {brace} inside a string", "accuracy": 4, "completeness": 3, "clarity": 5}',
])
def test_accepted_forms_give_the_same_ratings(text):
    judgement = read(text)
    assert judgement.usable, judgement.problem
    assert judgement.ratings == {"accuracy": 4, "completeness": 3, "clarity": 5}


@pytest.mark.parametrize("text, problem", [
    ("", "empty reply"),
    (None, "empty reply"),
    ("The answer is good, I would give it a 4.", "no JSON object in the reply"),
    ('{"accuracy": 4, "completeness": 3}', "no rating for clarity"),
    ('{"accuracy": 7, "completeness": 3, "clarity": 5}', "accuracy: 7 is outside 1–5"),
    ('{"accuracy": 0, "completeness": 3, "clarity": 5}', "accuracy: 0 is outside 1–5"),
    ('{"accuracy": 3.5, "completeness": 3, "clarity": 5}', "accuracy: 3.5 is not a whole number"),
    ('{"accuracy": "good", "completeness": 3, "clarity": 5}', "accuracy: 'good' is not a number"),
    ('{"accuracy": true, "completeness": 3, "clarity": 5}', "accuracy: True is not a number"),
    ('{"verdict": "fine"}', "no JSON object rates the criteria"),
    ('{"accuracy": 4, "completeness": 3, "clarity": ', "no JSON object in the reply"),
])
def test_unusable_replies_say_why_and_carry_no_rating(text, problem):
    judgement = read(text)
    assert not judgement.usable and judgement.ratings is None
    assert judgement.problem == problem


def test_the_last_usable_object_wins_and_a_broken_one_does_not_hide_a_good_one():
    text = ('{"accuracy": 9, "completeness": 3, "clarity": 5}\n'
            '{"accuracy": 2, "completeness": 2, "clarity": 3, "rationale": "short but right"}')
    judgement = read(text)
    assert judgement.ratings == {"accuracy": 2, "completeness": 2, "clarity": 3}
    assert judgement.rationale == "short but right"


def test_other_criteria_and_scales_come_from_the_rubric():
    judgement = parse_judgement('{"Factual consistency": 9, "harm": 0}', ("factual_consistency", "harm"), (0, 10))
    assert judgement.ratings == {"factual_consistency": 9, "harm": 0}
