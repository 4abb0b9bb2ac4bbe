"""The probe's pieces against hand-computed cases: the split, the field, ROUGE-L, the paired
bootstrap, the verdict, Min-K % Prob, the reference windows and the echoed log-probabilities."""

from __future__ import annotations

import json

import pytest

from evalpipe.backends.echo_logprobs import prompt_token_logprobs as _prompt_token_logprobs
from evalpipe.backends.retry import RequestFailed
from evalpipe.contamination import halves, logprobs, scoring
from evalpipe.contamination.probe import reference_windows
from evalpipe.contamination.scoring import Interval


def test_split_takes_floor_half_of_the_whitespace_tokens_and_keeps_the_texts_spacing():
    nine = halves.split_halves("a b c d e f g h i")
    assert (nine.first, nine.second, nine.tokens) == ("a b c d", "e f g h i", 9)
    spaced = halves.split_halves("SUBJECT: x\nMESSAGE:  b c d   e f g h\n")
    assert spaced.first == "SUBJECT: x\nMESSAGE:  b c"  # 10 tokens: the first 5, as written
    assert spaced.second == "d   e f g h"
    assert halves.split_halves("one two three four five six seven eight").first == "one two three four"
    assert halves.split_halves("one two three four five six seven") is None  # 7 < 8 tokens: skipped
    assert halves.split_halves("a b c", min_tokens=2).first == "a"


def test_first_text_field_is_the_first_text_input_or_the_named_one():
    assert halves.first_text_field({"text": "a sentence", "tokens": ["a", "sentence"]}) == "text"
    assert halves.first_text_field({"tokens": ["a"], "question": "q?", "context": "c"}) == "question"
    assert halves.first_text_field({"question": "  ", "context": "c"}) == "context"  # blank is no text
    assert halves.first_text_field({"question": "q", "context": "c"}, "context") == "context"
    assert halves.first_text_field({"question": "q"}, "context") is None
    assert halves.first_text_field({"tokens": ["a"]}) is None


def test_a_completion_loses_a_repeated_first_half_and_its_spacing():
    assert halves.completion_text("  a b\nc d  e ", "a b c") == "d e"
    assert halves.completion_text("a b x y", "a b c") == "a b x y"  # not a repetition: kept
    assert halves.normalise(" A\tb\n\nc ") == "A b c"  # case kept


def test_rouge_l_is_the_lcs_f_measure():
    # LCS "the cat on the mat" = 5 tokens; P = 5/5, R = 5/6, F = 10/11
    assert scoring.rouge_l("the cat on the mat", "the cat sat on the mat") == pytest.approx(10 / 11)
    assert scoring.rouge_l("The Cat, sat.", "the cat sat") == pytest.approx(1.0)  # lower-cased, punctuation gone
    assert scoring.rouge_l("", "the cat") == 0.0


def test_paired_bootstrap_resamples_samples_with_both_scores():
    one = scoring.paired_difference([0.9], [0.1])
    assert (one.value, one.low, one.high) == pytest.approx((0.8, 0.8, 0.8))
    # every sample 0.25 better guided: every resample's mean difference is 0.25 (pairing keeps it exact)
    shifted = scoring.paired_difference([0.5, 0.75, 1.0, 0.25], [0.25, 0.5, 0.75, 0.0], resamples=200, seed=3)
    assert (shifted.value, shifted.low, shifted.high) == pytest.approx((0.25, 0.25, 0.25))
    # differences 1 and 0: resample means are 0, 0.5 or 1, each end drawn far more often than 2.5 %
    split = scoring.paired_difference([1.0, 0.0], [0.0, 0.0], resamples=1000, seed=0)
    assert (split.value, split.low, split.high) == pytest.approx((0.5, 0.0, 1.0))
    again = scoring.paired_difference([1.0, 0.0, 0.3], [0.0, 0.0, 0.1], resamples=50, seed=7)
    assert again == scoring.paired_difference([1.0, 0.0, 0.3], [0.0, 0.0, 0.1], resamples=50, seed=7)
    empty = scoring.paired_difference([], [])
    assert (empty.value, empty.low, empty.high) == (None, None, None)
    with pytest.raises(ValueError):
        scoring.paired_difference([1.0], [])


def _interval(low: float | None) -> Interval:
    return Interval(0.1, low, 0.2, 1000, 0, 0.95)


def test_verdict_rule():
    assert scoring.verdict(_interval(0.01), 0, 0) == scoring.LIKELY  # interval above 0
    assert scoring.verdict(_interval(0.0), 0, 0) == scoring.NO_EVIDENCE  # touching 0 is not above
    assert scoring.verdict(_interval(-0.1), 1, 1) == scoring.LIKELY  # one exact
    assert scoring.verdict(_interval(-0.1), 0, 2) == scoring.LIKELY  # two near-exact
    assert scoring.verdict(_interval(-0.1), 0, 1) == scoring.NO_EVIDENCE
    assert scoring.verdict(_interval(None), 0, 0) == scoring.NO_EVIDENCE


def test_min_k_prob_averages_the_k_percent_least_likely_tokens():
    values = [-1.0, -2.0, -3.0, -4.0, -5.0]
    assert scoring.min_k_prob(values, 20) == -5.0  # ⌊5 · 0.2⌋ = 1 token
    assert scoring.min_k_prob(values, 40) == -4.5  # the 2 lowest
    assert scoring.min_k_prob(values, 100) == -3.0
    assert scoring.min_k_prob([-0.5, -0.25], 20) == -0.5  # ⌊0.4⌋ = 0 → at least 1
    assert scoring.min_k_prob([], 20) is None
    with pytest.raises(ValueError):
        scoring.min_k_prob(values, 0)


def test_reference_windows_have_the_test_texts_length():
    ten = " ".join(f"w{i}" for i in range(10))
    assert reference_windows(ten, 4, 50) == ["w0 w1 w2 w3", "w4 w5 w6 w7", "w8 w9"]  # 2 ≥ 4/2: kept
    nine = " ".join(f"w{i}" for i in range(9))
    assert reference_windows(nine, 4, 50) == ["w0 w1 w2 w3", "w4 w5 w6 w7"]  # a last window of 1: dropped
    assert reference_windows("a b", 10, 50) == ["a b"]
    assert reference_windows(ten, 2, 3) == ["w0 w1", "w2 w3", "w4 w5"]
    assert reference_windows("  \n", 4, 50) == []


def test_echoed_prompt_logprobs_are_the_texts_tokens_without_the_first_and_the_generated_one():
    reply = {"choices": [{"index": 0, "text": "the cat sat x", "logprobs": {
        "tokens": ["the", " cat", " sat", " x"], "token_logprobs": [None, -1.5, -0.25, -2.0],
        "text_offset": [0, 3, 7, 11]}}]}
    assert _prompt_token_logprobs(reply, "the cat sat") == [-1.5, -0.25]
    no_echo = {"choices": [{"index": 0, "text": " x", "logprobs": None}]}
    with pytest.raises(RequestFailed, match="no prompt log-probabilities"):
        _prompt_token_logprobs(no_echo, "the cat sat")
    assert logprobs.token_logprobs(json.dumps({"token_logprobs": [-1, -0.5]})) == [-1.0, -0.5]
    assert logprobs.token_logprobs("not json") is None
    assert logprobs.token_logprobs(json.dumps({"token_logprobs": ["a"]})) is None
