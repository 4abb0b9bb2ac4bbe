"""Which parser reads which answer kind of the labelled grading corpus (``tests/parsers/graded_answers.jsonl``).

One function per kind, so the agreement bench (``bench/grading_agreement.py``) and its test grade each
answer with the parser a task of that kind uses by default: option letters and PubMedQA's
yes / no / maybe by :func:`~evalpipe.parsers.letter.parse_letter`, NLI labels by
:func:`~evalpipe.parsers.nli_label.parse_nli_label`, Chinese labels with aliases by
:func:`~evalpipe.parsers.zh_labels.parse_label`. The value a grader compares is the chosen letter or
label, or ``"fail"`` for a counted failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evalpipe.parsers.letter import parse_letter
from evalpipe.parsers.letter_strict import parse_letter_strict
from evalpipe.parsers.nli_label import parse_nli_label
from evalpipe.parsers.zh_labels import LabelSet, parse_label
from evalpipe.records import Prediction

__all__ = ["GRADERS", "grade"]


def _zh(answer: str, options: Mapping[str, Any]) -> Prediction:
    return parse_label(answer, LabelSet.of(options["labels"], options.get("aliases")))


GRADERS: dict[str, dict[str, Callable[[str, Any], Prediction]]] = {
    "default": {"letter": parse_letter, "yes_no_maybe": parse_letter,
                "nli": lambda a, _o: parse_nli_label(a), "zh_label": _zh},
    "strict-v1": {"letter": parse_letter_strict, "yes_no_maybe": parse_letter_strict,
                  "nli": lambda a, _o: parse_nli_label(a), "zh_label": _zh},
}


def grade(row: Mapping[str, Any], rules: str = "default") -> str:
    """The corpus row's answer as the parser reads it: the letter/label, or ``"fail"``."""
    prediction = GRADERS[rules][row["kind"]](row["answer"], row["options"])
    return "fail" if prediction.failed or prediction.value is None else str(prediction.value)
