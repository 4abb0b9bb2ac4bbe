"""lm-evaluation-harness's multiple-choice scoring (``--compat lm-eval``): ``acc`` and ``acc_norm``.

For a ``multiple_choice`` task lm-eval asks the model for the log-likelihood of each choice as the
continuation of the context (``target_delimiter`` ``" "`` + choice: `` A``, or PubMedQA's `` yes`` /
`` no`` / `` maybe``) and reports, per question (facts from ``lm_eval/api/task.py``,
``process_results``, commit ``4e7e0d4``, version 0.4.13.dev0):

* ``acc`` — 1 when the choice with the highest log-likelihood is the gold one (``np.argmax``: the
  first of equal maxima), else 0; the mean over questions;
* ``acc_norm`` — the same with each log-likelihood divided by the choice's length in *characters*
  (``len(choice)``, the choice without the delimiter: ``len("yes") = 3``). For single-letter choices
  every length is 1, so ``acc_norm`` equals ``acc`` there.

An answer that is not the stored log-likelihoods of every choice is a counted parse failure, scored 0 in
both (lm-eval never has one: it always gets numbers). The choices' log-probabilities are stored as the
answer, so re-scoring needs no model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence

from evalpipe.metrics.aggregation import Mean
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import Scoring

__all__ = ["COMPAT", "choose", "lm_eval_scoring"]

#: the compatibility mode's name (``--compat lm-eval``)
COMPAT = "lm-eval"


def choose(loglikelihoods: Sequence[float], choices: Sequence[str]) -> tuple[int, int]:
    """(acc's choice, acc_norm's choice) as indices: argmax of the log-likelihoods, and of each divided by
    its choice's length in characters; the first of equal maxima, as ``np.argmax``."""
    normed = [ll / float(len(c)) for ll, c in zip(loglikelihoods, choices)]
    return _argmax(loglikelihoods), _argmax(normed)


def _argmax(values: Sequence[float]) -> int:
    best = 0
    for i, value in enumerate(values):
        if value > values[best]:
            best = i
    return best


def lm_eval_scoring(continuations: Callable[[Example], tuple[str, ...]],
                    letters: Callable[[Example], tuple[str, ...]]) -> Scoring:
    """The scoring of stored ``{"logprobs": {continuation: log-likelihood}}`` answers.

    ``continuations(example)`` are the scored texts (delimiter included, `` yes``), ``letters(example)``
    the option letters in the same order (the gold is a letter). The prediction is acc's letter; its
    diagnostics carry acc_norm's letter (``acc_norm_choice``) and whether either had a tie."""

    def parse(answer: str, example: Example) -> Prediction:
        wanted = continuations(example)
        flags = {"not_logprobs": False, "tie": False, "acc_norm_choice": None}
        try:
            scores = json.loads(answer)["logprobs"]
            values = [float(scores[c]) for c in wanted]
        except (ValueError, TypeError, KeyError):
            return Prediction(None, True, {**flags, "not_logprobs": True})
        if not all(math.isfinite(v) for v in values):
            return Prediction(None, True, {**flags, "not_logprobs": True})
        choices = [c[1:] if c.startswith(" ") else c for c in wanted]  # lm-eval's lengths: without the delimiter
        acc, norm = choose(values, choices)
        names = letters(example)
        return Prediction(names[acc], False, {**flags, "tie": values.count(max(values)) > 1,
                                              "acc_norm_choice": names[norm]})

    def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
        """``acc`` and ``acc_norm`` as lm-eval defines them (module docstring): means of per-question 0/1."""
        per_sample = []
        for example, prediction in zip(examples, predictions):
            norm = prediction.diagnostics.get("acc_norm_choice") if not prediction.failed else None
            per_sample.append({"acc": float(not prediction.failed and prediction.value == example.gold),
                               "acc_norm": float(norm is not None and norm == example.gold)})
        n = len(per_sample)
        corpus = {m: (sum(r[m] for r in per_sample) / n if n else 0.0) for m in ("acc", "acc_norm")}
        return ScoreSheet(corpus=corpus, per_sample=per_sample,
                          aggregations={"acc": Mean("acc"), "acc_norm": Mean("acc_norm")})

    return Scoring(parse=parse, score=score, empty=lambda ex: Prediction(None, True, {"no_answer": True}),
                   description="lm-evaluation-harness: log-likelihood of each choice after lm-eval's prompt; "
                   "acc and acc_norm (per-character normalised)", samplewise=True)
