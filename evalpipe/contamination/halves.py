"""What the probe cuts in two: a sample's first input field, split at half its whitespace tokens.

* **The first input field** is the first input of the sample (in the order the task declares its
  inputs: a task file's ``fields.inputs``) whose value is text: MeQSum's ``question``, NCBI's
  ``text`` (the sentence; ``tokens`` is a list), a multiple-choice task's ``question``. ``--field``
  names another one.
* **The split**: the text's whitespace tokens are ``n``; the first half is the text up to the end of
  token ⌊n/2⌋ (the text's own spacing and newlines kept: a memorised text is memorised as written),
  the second half the rest, stripped. A text of fewer than :data:`MIN_TOKENS` tokens is not probed
  (its halves are too short for ROUGE-L to tell recall from chance), and is counted as skipped.
* **Normalisation** (for "exact" and for scoring): whitespace runs become one space, ends
  stripped; case is kept (an exact completion is verbatim). A completion that starts by repeating
  the first half (chat models often quote what they were given) has that repetition removed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: texts with fewer whitespace tokens than this are skipped (and counted)
MIN_TOKENS = 8

_TOKEN = re.compile(r"\S+")


@dataclass(frozen=True)
class Halves:
    first: str
    second: str
    #: whitespace tokens of the whole text
    tokens: int


def first_text_field(inputs: Mapping[str, Any], field: str | None = None) -> str | None:
    """The name of the probed input: ``field`` when given (None if the sample lacks it or it is not
    text), else the first input whose value is a non-empty string."""
    if field is not None:
        return field if isinstance(inputs.get(field), str) else None
    return next((name for name, value in inputs.items() if isinstance(value, str) and value.strip()), None)


def split_halves(text: str, min_tokens: int = MIN_TOKENS) -> Halves | None:
    """The two halves of ``text`` (see the module docstring); None below ``min_tokens`` tokens."""
    tokens = list(_TOKEN.finditer(text))
    if len(tokens) < max(min_tokens, 2):
        return None
    cut = tokens[len(tokens) // 2 - 1].end()
    return Halves(first=text[:cut].strip(), second=text[cut:].strip(), tokens=len(tokens))


def normalise(text: str) -> str:
    """Whitespace runs as one space, ends stripped; case kept."""
    return " ".join(text.split())


def completion_text(answer: str, first: str) -> str:
    """The model's continuation, normalised, without a leading repetition of the first half."""
    words, given = answer.split(), first.split()
    if given and words[:len(given)] == given:
        words = words[len(given):]
    return " ".join(words)
