"""Default parsers (each phrasing) and the compat rules they replace."""

import pytest

from evalpipe.compat import clue as compat
from evalpipe.parsers.choice import parse_choice
from evalpipe.parsers.icd10 import find_codes, parse_icd10_codes
from evalpipe.parsers.nli_label import parse_nli_label

# ---- MedNLI ----------------------------------------------------------------------------------


@pytest.mark.parametrize("answer, label", [
    ("ENTAILMENT", "entailment"),
    ("entailment.", "entailment"),
    ("**Contradiction**", "contradiction"),
    ("Answer: neutral", "neutral"),
    ("Label: \"entailment\"", "entailment"),
    ("The logical relation between the two sentences is: CONTRADICTION", "contradiction"),
    ("NEUTRAL. Neither entailment nor contradiction can be inferred", "neutral"),  # leading label commits
    ("Sentence 2 follows, so the answer is contradiction", "contradiction"),  # committing phrase
    ("It is not entailment but contradiction", "contradiction"),  # negated mention ignored
    ("\n\nCONTRADICTION\n", "contradiction"),
])
def test_nli_label_phrasings(answer, label):
    prediction = parse_nli_label(answer)
    assert (prediction.value, prediction.failed) == (label, False)


@pytest.mark.parametrize("answer, flag", [
    ("ENTAILMENT or NEUTRAL", "ambiguous"),  # a hedge at the start
    ("ENTAILMENT/neutral", "ambiguous"),
    ("It could be entailment or neutral", "ambiguous"),  # two labels, none committed
    ("I think it is not entailment", "no_label"),  # only a negated label
    ("The sentences contradict each other", "no_label"),  # 'contradict' is not the label word
    ("", "no_label"),
])
def test_nli_label_failures(answer, flag):
    prediction = parse_nli_label(answer)
    assert prediction.value is None and prediction.failed and prediction.diagnostics[flag]


def test_compat_nli_rewards_hedging_and_punishes_repetition():
    # the reference rule: the gold label occurs exactly once, anywhere, as a substring
    assert compat.nli_credited("ENTAILMENT or NEUTRAL", "entailment")
    assert compat.nli_credited("ENTAILMENT or NEUTRAL", "neutral")
    assert not compat.nli_credited("Entailment. This is entailment.", "entailment")
    assert compat.nli_credited("nonentailment", "entailment")  # substring, not a word
    assert not compat.nli_credited("contradiction", "entailment")
    # the default parser refuses the hedge and accepts the repetition
    assert parse_nli_label("ENTAILMENT or NEUTRAL").failed
    assert parse_nli_label("Entailment. This is entailment.").value == "entailment"


# ---- LongHealth letter -----------------------------------------------------------------------

OPTIONS = {"A": "Hypertension", "B": "Pulmonary hypertension", "C": "Acute bronchitis", "D": "Asthma", "E": "COPD"}


@pytest.mark.parametrize("answer, letter", [
    ("The correct answer is C: Acute bronchitis.", "C"),
    ("Answer: (C)", "C"),
    ("The correct answer is (E)", "E"),
    ("The correct answer is: **B: Pulmonary hypertension**", "B"),
    ("**C**", "C"),
    ("C", "C"),
    ("C: Acute bronchitis", "C"),
    ("(c) acute bronchitis", "C"),
    ("[d]", "D"),
    ("Option B", "B"),
    ("I choose **D** here", "D"),
    ("Acute bronchitis", "C"),  # the option text itself
    ("Pulmonary hypertension", "B"),  # contains option A's text too: the longer option wins
    ("A patient with acute bronchitis", "C"),  # 'A' opening a sentence is not option A
])
def test_choice_phrasings(answer, letter):
    prediction = parse_choice(answer, OPTIONS)
    assert (prediction.value, prediction.failed) == (letter, False)


@pytest.mark.parametrize("answer, flag", [
    ("The correct answer is G: something", "invalid_letter"),
    ("Hypertension or asthma", "ambiguous"),
    ("I am not sure", "no_choice"),
])
def test_choice_failures(answer, flag):
    prediction = parse_choice(answer, OPTIONS)
    assert prediction.value is None and prediction.failed and prediction.diagnostics[flag]


def test_compat_choice_accepts_only_the_stated_format():
    assert compat.stated_letter("The correct answer is C: Acute bronchitis.") == "C"
    assert compat.stated_letter("The correct answer is c: x") == "c"  # \w, case kept: then wrong vs 'C'
    for answer in ("Answer: (C)", "**C**", "C", "The correct answer is C.", "the correct answer is C: x"):
        assert compat.stated_letter(answer) is None


def test_gold_letter_exact_vs_compat_substring():
    from evalpipe.tasks.clue.longhealth_data import gold_letter

    options = {"A": "Diabetes mellitus type 2", "B": "Diabetes mellitus", "C": "Asthma"}
    assert gold_letter(options, "Diabetes mellitus") == "B"
    assert gold_letter(options, " Diabetes   mellitus ") == "B"  # whitespace normalised
    assert gold_letter(options, "Diabetes") is None  # no option equals it
    assert compat.substring_gold_letter(options, "Diabetes mellitus") == "A"  # the reference's pick


# ---- ICD-10 ----------------------------------------------------------------------------------

def test_icd_parser_shapes_case_dots_and_duplicates():
    answer = "ICD-10 Codes: I50.9, i509, E11.65, C4A.0, D3A.00, M1A.0, Z3A.01, U07.1, S52521A, T36.0X1A, I10."
    prediction = parse_icd10_codes(answer)
    assert prediction.value == (
        "I509", "E1165", "C4A0", "D3A00", "M1A0", "Z3A01", "U071", "S52521A", "T360X1A", "I10",
    )
    assert prediction.diagnostics["duplicate_codes"] == 1 and not prediction.failed
    assert find_codes("E11650000 and ICD10") == []  # too long / not a code shape
    # clinical prose words without a code's shape (third character) are not codes
    assert find_codes("H2O intake, T2DM, HbA1c 7%") == []
    assert parse_icd10_codes("No codes apply.").failed


def test_compat_icd_regex_misses_real_codes_and_keeps_duplicates():
    answer = "I50.9, I50.9, i10, U07.1, C4A.0, E11.65"
    assert compat.icd_codes(answer) == ["I509", "I509", "E1165"]


# ---- reference order and averaging -----------------------------------------------------------

def test_reference_positions_equal_the_seeded_shuffle():
    import random

    rows = list(range(20))
    shuffled = rows[:]
    random.seed(1)
    random.shuffle(shuffled)
    positions = compat.reference_positions(20)
    assert [shuffled[p] for p in positions] == rows


def test_first_doubled_mean():
    # values 1, 0, 0 with the item at reference position 3 (index 1) first: (1 + 0 + 0 + 0) / 4
    assert compat.first_doubled_mean([1.0, 0.0, 0.0], [5, 3, 9]) == 0.25
    assert compat.first_doubled_mean([1.0, 0.0, 0.0], [0, 3, 9]) == 0.5  # (1+0+0+1)/4


def test_first_doubled_mean_is_exact_like_statistics_mean():
    # nine documents scoring 0.1, the first doubled: ten values of 0.1, whose exact mean is 0.1
    # (the reference's statistics.mean). A float running sum gives 0.9999999999999999 / 10 =
    # 0.09999999999999999, one ulp off the reference.
    assert compat.first_doubled_mean([0.1] * 9, list(range(1, 10))) == 0.1


def test_problem_list_reference_keeps_trailing_separator():
    assert compat.problem_list_reference("CHF;AKI;") == "CHF, AKI, "


def test_choice_skips_letters_that_are_not_options():
    # "I" after "Answer:" is a pronoun, not option I: the bold letter later decides
    assert parse_choice("Answer: I think it is **B**", OPTIONS).value == "B"
    assert parse_choice("Answer: I am unsure", OPTIONS).diagnostics["invalid_letter"]


@pytest.mark.parametrize("answer, label", [
    ("Neutral is wrong, the answer is entailment", "entailment"),
    ("Contradiction is not the relation here; it is neutral.", "neutral"),
    ("Neutral. So the answer is contradiction", None),  # two commitments: ambiguous
    ("Entailment. The answer is entailment.", "entailment"),
])
def test_nli_rejected_leading_label_and_conflicting_commitments(answer, label):
    from evalpipe.parsers.nli_label import parse_nli_label

    prediction = parse_nli_label(answer)
    assert prediction.value == label and prediction.failed == (label is None)


def test_compat_valid_ratio_uses_the_reference_code_table():
    from evalpipe.compat.clue import icd_document_scores

    # U07.1 (COVID-19) is missing from the reference's pre-FY2021 table; I50.9 is in both
    scores = icd_document_scores(["I509", "U071"], ["I509"])
    assert scores["valid_ratio"] == 0.5
