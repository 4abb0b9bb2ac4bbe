"""The NLI label an answer commits to: entailment, contradiction or neutral.

The rule is :mod:`evalpipe.parsers.committed_label`'s over these three label words (read its
docstring): a leading label or a committing phrase (``The answer is …``) decides, a hedge naming two
labels (``ENTAILMENT or NEUTRAL``) is ambiguous, otherwise the one label mentioned without negation;
ambiguous and no-label answers are parse failures.

The value is the lower-case label or None; diagnostics flag ``ambiguous`` and ``no_label``.
"""

from __future__ import annotations

from evalpipe.parsers.committed_label import CommittedLabels, parse_committed_label
from evalpipe.records import Prediction

LABELS = ("entailment", "contradiction", "neutral")
_NLI = CommittedLabels(LABELS)


def parse_nli_label(answer: str) -> Prediction:
    """Answer text → Prediction(label or None); never raises."""
    return parse_committed_label(answer, _NLI)
