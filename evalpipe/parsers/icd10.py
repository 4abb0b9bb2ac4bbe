"""ICD-10(-CM) codes mentioned in an answer.

A code is a letter, a digit, and a digit — or ``A`` in the four ICD-10-CM categories with a letter
in third place (C4A, D3A, M1A, Z3A) — then optionally an optional dot and 1–4 letters/digits
(subcategory and extension: ``S52.521A``, ``T36.0X1A``); ``U`` codes (``U07.1``) included. The
match is a whole token (word boundaries), so ``E11650000`` is not read as ``E11.6500``.
Any case, dotted or dotless (``i509`` is ``I509``). Prose words such as ``H2O``, ``T2DM`` or
``A1c`` do not have a code's shape (third character); a few do (``x10``, ``p53``, ``B12``) and are
read as codes — invalid ones then count against the valid-code ratio and precision.

Codes are normalised to upper case without the dot (``i50.9`` → ``I509``, the MIMIC-IV form) and
duplicates are dropped, keeping first-mention order. Validity against the code set is a metric
(:mod:`evalpipe.metrics.icd10`), not a parsing rule: an invented but well-formed code is
extracted so that it can be counted as a false positive and as invalid.
"""

from __future__ import annotations

import re

from evalpipe.records import Prediction

_CODE = re.compile(r"\b([A-Z][0-9](?:[0-9]|(?<=[Cc]4|[Dd]3|[Mm]1|[Zz]3)[Aa]))(\.?)([0-9A-Z]{1,4})?\b", re.IGNORECASE)


def normalise_code(code: str) -> str:
    """Upper case, no dot, no surrounding space: the form codes are compared in."""
    return code.strip().replace(".", "").upper()


def find_codes(text: str) -> list[str]:
    """Every code-shaped token, normalised, in order, duplicates kept."""
    return [normalise_code(m.group(1) + (m.group(3) or "")) for m in _CODE.finditer(text or "")]


def parse_icd10_codes(answer: str) -> Prediction:
    """Answer → Prediction(tuple of unique normalised codes); no code at all is a parse failure."""
    found = find_codes(answer)
    unique = tuple(dict.fromkeys(found))
    return Prediction(unique, not unique, {"duplicate_codes": len(found) - len(unique), "no_codes": not unique})
