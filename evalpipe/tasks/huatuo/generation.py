"""Huatuo-26M answer generation (Li et al., 2023): the model answers Chinese medical questions.

Scored with corpus BLEU-4 (sacrebleu, ``tokenize="zh"``) and mean character ROUGE-L, see
:mod:`evalpipe.metrics.chinese_text` (0-1 scale; the paper prints 0-100). Data: :mod:`evalpipe.tasks.huatuo.data`.
"""

from __future__ import annotations

from collections.abc import Sequence

from evalpipe.metrics.chinese_text import text_score_sheet
from evalpipe.metrics.options import MetricOptions
from evalpipe.parsers.zh_labels import answer_body
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import EVAL, SHOTS, Scoring, TaskSpec
from evalpipe.tasks.huatuo.data import CITATION, load
from evalpipe.tasks.registry import register


def parse(answer: str, example: Example) -> Prediction:
    """The answer text itself (reasoning removed); an empty answer is a failure scored as ""."""
    body, reasoning = answer_body(answer)
    return Prediction(value=body, failed=not body, diagnostics={"empty": not body, "reasoning_stripped": reasoning})


def empty_prediction(example: Example) -> Prediction:
    return Prediction(value="", failed=True, diagnostics={"no_answer": True})


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    """Corpus BLEU-4 (sacrebleu zh) and mean character ROUGE-L (see evalpipe.metrics.chinese_text)."""
    return text_score_sheet([p.value or "" for p in predictions], [ex.gold for ex in examples])


SPEC = register(
    TaskSpec(
        name="huatuo_generation",
        data_roles=(EVAL, SHOTS),
        description="Huatuo-26M test set: answer Chinese medical questions; BLEU-4 and character ROUGE-L.",
        template="huatuo/generation.j2",
        load=load,
        shot_target=lambda ex: ex.gold,
        scorings={"default": Scoring(parse=parse, score=score, empty=empty_prediction,
                                     description="sacrebleu zh corpus BLEU-4; rouge-score ROUGE-L, char tokens")},
        metrics=("bleu4", "rouge_l"),
        max_tokens=512,
        primary_metric="rouge_l",
        default_shots=0,
        completion_stop=("\n问题：",),
        answer_kind="free_text",
        citation=CITATION,
    )
)


