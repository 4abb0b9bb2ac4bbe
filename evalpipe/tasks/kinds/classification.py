"""Kind ``classification``: one label of a fixed set per sample.

Gold: the ``fields.answer`` (or ``fields.label``) value, matched to ``labels`` after the label
normalisation of :func:`evalpipe.text.chinese.label_key` (width, case, spaces, trailing
punctuation) and ``data_aliases`` (how the file spells a label, e.g. ``NA`` → ``0``); a value that
is no label is a data error naming the line.

Parsing (``parser``):

* ``exact`` (default) — :func:`evalpipe.parsers.zh_labels.parse_label`: after reasoning, fences and
  emphasis are removed, the answer *is* a label or one of its ``aliases`` (``是`` for ``1``);
  answers in any language; nothing cleverer, so a sentence that merely contains a label fails.
* ``committed`` — :func:`evalpipe.parsers.committed_label.parse_committed_label`: the label an
  English prose answer commits to (``The answer is neutral``); a hedge naming two labels fails.

Metrics: ``accuracy`` (mean of per-sample 0/1; a parse failure is wrong) and ``macro_f1`` (the
unweighted mean of per-label F1 from summed one-vs-rest counts; a parse failure is a false negative
of its gold label and never a class), over the labels with gold support (``macro_f1_over: gold``,
default, as sklearn without ``labels``) or over every declared label (``labels``: a label without
gold in the evaluated set scores F1 0 and is still averaged). Both are declared aggregations, so
both get a bootstrap interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator, model_validator

from evalpipe.data.file_records import Record
from evalpipe.metrics.aggregation import MacroF1, Mean
from evalpipe.metrics.classification import accuracy, class_parts, macro_f1
from evalpipe.metrics.options import MetricOptions
from evalpipe.parsers.committed_label import committed_labels, parse_committed_label
from evalpipe.parsers.zh_labels import LabelSet, parse_label
from evalpipe.text.distinct import distinct_problem
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import StructuredOutput, Scoring
from evalpipe.tasks.kinds.base import REASONING_BUDGET, Drafted, Kind, KindParts, register_kind
from evalpipe.tasks.taskfile.schema import TaskFile, Text
from evalpipe.text.chinese import label_key


class ClassificationTask(TaskFile):
    kind: Literal["classification"]
    labels: list[Text] = Field(min_length=2, description="The label set, as gold and answers spell it.")
    aliases: dict[Text, Text] = Field(default_factory=dict, description="Other answers that mean a label "
                                      "(answer → label), e.g. {是: '1', 否: '0'}.")
    data_aliases: dict[Text, Text] = Field(default_factory=dict, description="Other spellings of a label in "
                                           "the data file (spelling → label), e.g. {NA: '0'}.")
    shot_answers: dict[Text, Text] = Field(default_factory=dict, description="The answer a shot of each label "
                                           "demonstrates (label → answer; default: the label itself).")
    parser: Literal["exact", "committed"] = Field("exact", description="exact: the answer is a label or "
                                                  "alias; committed: the label an English answer commits to.")
    macro_f1_over: Literal["gold", "labels"] = Field("gold", description="Labels macro-F1 averages over: "
                                                     "those with gold support, or every declared label.")

    @field_validator("labels")
    @classmethod
    def _labels_distinct(cls, labels: list[str]) -> list[str]:
        problem = distinct_problem(labels, "labels")
        if problem is not None:
            raise ValueError(problem.removeprefix("labels: "))
        return labels

    @model_validator(mode="after")
    def _labels_consistent(self) -> ClassificationTask:
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("labels: a label is listed twice")
        for key in ("aliases", "data_aliases", "shot_answers"):
            mapping = getattr(self, key)
            pairs = mapping.values() if key != "shot_answers" else mapping.keys()
            unknown = [label for label in pairs if label not in self.labels]
            if unknown:
                raise ValueError(f"{key}: {', '.join(map(repr, unknown))} not in labels")
        LabelSet.of(self.labels, self.aliases)  # two spellings that normalise alike are refused here
        if self.fields.gold_field() is None:
            raise ValueError("fields.label (or fields.answer): name the field holding the gold label")
        return self


def label_set(task: ClassificationTask) -> LabelSet:
    return LabelSet.of(task.labels, task.aliases)


def read(task: ClassificationTask, records: Sequence[Record]) -> list[Drafted]:
    known = {label_key(label): label for label in task.labels}
    known.update({label_key(spelling): label for spelling, label in task.data_aliases.items()})
    field = task.fields.gold_field()
    assert field is not None, "the kind's validator requires a gold field"
    names = field if isinstance(field, list) else [field]
    out = []
    for record in records:
        name = next((n for n in names if n in record.fields), names[0])
        value = record.get(name, (str, int, float))
        label = known.get(label_key(str(value)))
        if label is None:
            raise record.error(name, f"unknown label {str(value)!r} (expected one of {', '.join(task.labels)})")
        out.append(Drafted(gold=label))
    return out


def scoring(task: ClassificationTask) -> Scoring:
    labels = tuple(task.labels)
    if task.parser == "committed":
        compiled = committed_labels(labels, tuple(task.aliases.items()))

        def parse(answer: str, example: Example) -> Prediction:
            return parse_committed_label(answer, compiled)
    else:
        exact = label_set(task)

        def parse(answer: str, example: Example) -> Prediction:
            return parse_label(answer, exact)

    def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
        golds = [ex.gold for ex in examples]
        preds = [p.value for p in predictions]
        per_sample = [{"accuracy": float(p is not None and p == g)} for g, p in zip(golds, preds)]
        if task.macro_f1_over == "labels":
            macro, over = macro_f1(golds, preds, labels), MacroF1(labels, over="labels")
        else:
            gold_labels = tuple(sorted({str(g) for g in golds}))
            macro, over = macro_f1(golds, preds), MacroF1(gold_labels, over="gold")
        return ScoreSheet(corpus={"accuracy": accuracy(golds, preds), "macro_f1": macro},
                          per_sample=per_sample,
                          parts=[{**s, **class_parts(g, p)} for s, g, p in zip(per_sample, golds, preds)],
                          aggregations={"accuracy": Mean("accuracy"), "macro_f1": over})

    described = ("the label an English answer commits to (hedges fail)" if task.parser == "committed"
                 else "exact label after width/space/punctuation normalisation")
    return Scoring(parse=parse, score=score, empty=lambda ex: Prediction(None, True, {"no_answer": True}),
                   description=f"{described}; accuracy, macro-F1 over the "
                   f"{'declared' if task.macro_f1_over == 'labels' else 'gold'} label set",
                   # 0/1 accuracy and one-vs-rest counts per sample; macro-F1 over the gold labels merges
                   # the chunks' label sets (MacroF1.merge)
                   samplewise=True)


def parts(task: ClassificationTask) -> KindParts:
    answers = dict(task.shot_answers)
    return KindParts(
        scorings={"default": scoring(task)},
        shot_target=lambda ex: answers.get(ex.gold, ex.gold),
        metrics=("accuracy", "macro_f1"),
        primary_metric="accuracy",
        template_vars={"label_set": list(task.labels)},
        # --structured: {"label": one of the labels}, read by the default parser
        structured=StructuredOutput(
            schema={"type": "object", "additionalProperties": False, "required": ["label"],
                    "properties": {"label": {"type": "string", "enum": list(task.labels)}}},
            to_text=lambda value, example: value["label"]),
        chat_max_tokens=REASONING_BUDGET,
    )


KIND = register_kind(Kind(
    name="classification",
    description="one label of a fixed set (label aliases; accuracy, macro-F1, parse failures)",
    model=ClassificationTask,
    read=read,
    parts=parts,
))
