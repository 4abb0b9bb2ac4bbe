"""The parsers grade the labelled corpus (tests/parsers/graded_answers.jsonl) as a careful human does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalpipe.parsers.graded import grade
from evalpipe.parsers.letter import parse_letter

CORPUS = Path(__file__).with_name("graded_answers.jsonl")
ROWS = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_corpus_is_large_and_labelled():
    assert len(ROWS) >= 400
    assert {r["split"] for r in ROWS} == {"tune", "heldout"}
    assert {r["kind"] for r in ROWS} == {"letter", "yes_no_maybe", "nli", "zh_label"}
    assert sum(r["label"] == "fail" for r in ROWS) >= 80


@pytest.mark.parametrize("split", ["tune", "heldout"])
def test_agreement_with_the_human_grader(split):
    rows = [r for r in ROWS if r["split"] == split]
    agree = sum(grade(r) == r["label"] for r in rows)
    assert agree / len(rows) >= 0.98, (split, agree, len(rows))
    # a hedge, refusal, empty answer or unfinished reasoning is never scored as a choice
    scored = [r["answer"] for r in rows if r["label"] == "fail" and grade(r) != "fail"]
    assert scored == []


def test_strict_rules_are_still_the_old_ones():
    """strict-v1 keeps rejecting what the old parser rejected (so earlier numbers reproduce)."""
    rows = [r for r in ROWS if r["kind"] == "letter"]
    strict = sum(grade(r, "strict-v1") == r["label"] for r in rows)
    assert strict < len(rows) * 0.9  # it misses plain answers the careful reader reads
    assert grade({"kind": "letter", "answer": "B - Intussusception", "options": {"A": "x", "B": "Intussusception"}},
                 "strict-v1") == "fail"


OPTS = {"A": "Plasma free metanephrines", "B": "Intussusception", "C": "Ethambutol", "D": "Intramuscular epinephrine"}
YNM = {"A": "yes", "B": "no", "C": "maybe"}


@pytest.mark.parametrize("answer,options,want", [
    ("B is the correct answer.", OPTS, "B"),
    ("**D** Intramuscular epinephrine", OPTS, "D"),
    ("B - Intussusception", OPTS, "B"),
    ("C is correct.", OPTS, "C"),
    ("The most likely diagnosis is pheochromocytoma, so A, plasma free metanephrines.", OPTS, "A"),
    ("Ethambutol (option C) causes optic neuritis.", OPTS, "C"),
    ("The answer is no.", YNM, "B"),
    ("Yes, the pharmacist review reduced readmissions.", YNM, "A"),
    ("B (no)", YNM, "B"),
    ("The best answer here is B.", OPTS, "B"),
    ("Answer: The patient has Graves disease (A).", OPTS, "A"),
    ("The answer is B. Options A or C are not supported", OPTS, "B"),
    ("Answer: C (not A/B)", OPTS, "C"),
    ("Answer: B\nExplanation: unlike option A or D, it explains the findings.", OPTS, "B"),
    ("A. Wait. Final answer: C", OPTS, "C"),
    ("答案：Ｂ", OPTS, "B"),
])
def test_the_issue_examples_are_read_as_committed(answer, options, want):
    prediction = parse_letter(answer, options)
    assert (prediction.value, prediction.failed) == (want, False), answer


@pytest.mark.parametrize("answer,flag", [
    ("B or C", "hedged"), ("The answer is B or C.", "hedged"), ("between A and D", "hedged"),
    ("yes or maybe", "hedged"), ("A patient with this presentation needs more tests.", "no_choice"),
    ("I'm sorry, I can't answer that.", "refusal"), ("", "empty"), ("<think>\nOption B looks", "truncated_in_reasoning"),
    ("The answer is B. Actually the answer is C.", "hedged"), ("Answer: E", "invalid_letter"),
])
def test_failures_are_counted_with_their_reason(answer, flag):
    options = YNM if "yes" in answer else OPTS
    prediction = parse_letter(answer, options)
    assert prediction.failed and prediction.value is None
    assert prediction.diagnostics[flag], prediction.diagnostics
