"""Kind ``multiple_choice``: pick one of a question's lettered options (MedQA, MedMCQA, PubMedQA, MMLU).

**Options** (``options``): a record field holding ``{letter: text}`` or a list of texts (MedQA's
``options``), record columns in order (MedMCQA's ``opa``…``opd``, MMLU's ``A``…``D``), or the same
texts for every question (``fixed``: PubMedQA's yes / no / maybe). Letters are ``A``, ``B``, … in
order (``letters`` overrides). Templates see ``example.options``: a list of ``{letter, text}``.

**Gold** (``fields.answer``), by ``answer_format``:

* ``letter`` — the correct letter (``C``; any case, brackets and a final period ignored);
* ``index`` — the correct option's position, counted from 0 or 1. ``--task-arg TASK:<field>_base=0|1``
  (MedMCQA: ``medmcqa:cop_base``) says which; without it, with ``detect_index_base`` (default on),
  the whole file decides: an index 0 anywhere means 0-based, an index equal to the number of options
  means 1-based; both at once is an error, and so is neither (a 0-based file whose answers are never
  A reads as a 1-based one whose answers are never D): the error names the flag. MedMCQA's ``cop`` is
  1-based in its GitHub release and 0-based on the Hugging Face hub, and reading one as the other
  silently shifts every answer. The decided base and how it was decided are recorded in config.json
  (``tasks.<task>.data_facts``) and printed. Without detection, the declared ``index_base``;
* ``text`` — the correct option's text (PubMedQA's ``final_decision``), matched case-insensitively.

**Parsing**: :func:`evalpipe.parsers.letter.parse_letter` (bare letter, ``Answer: C.``, ``(B)``,
``**D**``, lower case, ``<think>`` blocks; a hedge naming two letters, a refusal or an empty answer
is a counted parse failure). **Metric**: ``accuracy``, the mean of per-sample 0/1 (a failure is
wrong), declared as a mean so it gets a bootstrap interval. Shots demonstrate the gold letter.

**Log-likelihood scoring** (``--mcqa-scoring loglikelihood``, as lm-evaluation-harness scores
multiple choice): no answer is generated. The prompt is the template's ``completion`` form (ending in
``Answer:``) and the endpoint is asked for the log-probability of each option's letter as its
continuation (`` A``, `` B`` …; :class:`~evalpipe.tasks.base.ChoiceScoring`, sent by the
OpenAI-compatible backend as one ``/v1/completions`` request with ``echo`` and ``logprobs``). The
chosen option is the one with the highest log-probability (the first of equal ones, flagged ``tie``);
accuracy as above, and the calibration of the option probabilities (softmax over the options'
log-probabilities): ``ece`` and ``brier`` (:mod:`evalpipe.metrics.calibration`), with intervals. The
log-probabilities are stored as the answer, so ``score`` re-scores them without the model. Letters are single tokens, so no length normalisation is needed (lm-evaluation-
harness's ``acc_norm`` equals ``acc`` here).
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from evalpipe.data.errors import DataError
from evalpipe.data.file_records import Record
from evalpipe.text.distinct import distinct_problem
from evalpipe.metrics.aggregation import Mean, evaluate
from evalpipe.metrics.calibration import ExpectedCalibrationError, MeanOverScored, calibration_parts, option_probabilities
from evalpipe.metrics.classification import accuracy
from evalpipe.metrics.options import MetricOptions
from evalpipe.parsers.letter import parse_letter
from evalpipe.parsers.letter_strict import parse_letter_strict
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.compat.lm_eval import COMPAT as LM_EVAL
from evalpipe.compat.lm_eval import lm_eval_scoring
from evalpipe.tasks.base import ChoiceScoring, PromptForm, Scoring, StructuredOutput, TaskArg
from evalpipe.tasks.kinds.base import REASONING_BUDGET, Drafted, FileReading, Kind, KindParts, register_kind
from evalpipe.tasks.taskfile.schema import Strict, TaskFile, Text


class OptionsSpec(Strict):
    field: Text | None = Field(None, description="A record field holding {letter: text} or a list of texts.")
    columns: list[Text] | None = Field(None, description="Record fields holding the options, in letter order.")
    fixed: list[Text] | None = Field(None, description="The same option texts for every question.")
    letters: Text | None = Field(None, description="The option letters in order (default ABCD…).")

    @field_validator("fixed")
    @classmethod
    def _fixed_distinct(cls, fixed: list[str] | None) -> list[str] | None:
        problem = distinct_problem(fixed, "options.fixed") if fixed is not None else None
        if problem is not None:
            raise ValueError(problem.removeprefix("options.fixed: "))
        return fixed

    @model_validator(mode="after")
    def _one_source(self) -> OptionsSpec:
        given = [k for k in ("field", "columns", "fixed") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of options.field, options.columns, options.fixed")
        count = len(self.columns or self.fixed or ())
        if self.letters is not None:
            if not re.fullmatch(r"[A-Z]+", self.letters) or len(set(self.letters)) != len(self.letters):
                raise ValueError("options.letters: distinct upper-case letters, e.g. ABCDE")
            if count and len(self.letters) != count:
                raise ValueError(f"options.letters has {len(self.letters)} letters for {count} options")
        if count and count < 2:
            raise ValueError("a question needs at least two options")
        return self


class PromptFormSpec(Strict):
    template: Text = Field(description="The reference's prompt as a template (the same macro contract; its "
                           "completion form is scored), in the folder of the task's own template.")
    continuations: Literal["letter", "text"] = Field("letter", description="What is scored after the prompt: "
                                                     "' ' + the option letter, or ' ' + the option text (PubMedQA).")
    shots: int = Field(0, ge=0, description="Shots by default in this form (--shots wins).")


class MultipleChoiceTask(TaskFile):
    kind: Literal["multiple_choice"]
    options: OptionsSpec
    answer_format: Literal["letter", "index", "text"] = Field(
        "letter", description="How fields.answer names the correct option: its letter, its index, or its text.")
    index_base: Literal[0, 1] = Field(0, description="answer_format index: the index of the first option.")
    detect_index_base: bool = Field(True, description="answer_format index: check the file's indices for the "
                                    "other base (an index 0 → 0-based, an index = number of options → 1-based).")
    compat_forms: dict[Text, PromptFormSpec] = Field(
        default_factory=dict, description="A reference implementation's own prompt and scoring, by compatibility "
        "mode (--compat lm-eval): its template, what is scored after it, its default shots.")

    @model_validator(mode="after")
    def _answer_field(self) -> MultipleChoiceTask:
        if self.fields.gold_field() is None:
            raise ValueError("fields.answer: name the field holding the correct option")
        unknown = sorted(set(self.compat_forms) - set(FORM_SCORINGS))
        if unknown:
            raise ValueError(f"compat_forms: unknown mode(s) {', '.join(unknown)} (known: {', '.join(FORM_SCORINGS)})")
        return self


def _letters(task: MultipleChoiceTask, count: int) -> str:
    return task.options.letters or string.ascii_uppercase[:count]


def _options(task: MultipleChoiceTask, record: Record) -> dict[str, str]:
    spec = task.options
    if spec.fixed is not None:
        return dict(zip(_letters(task, len(spec.fixed)), spec.fixed))
    if spec.columns is not None:
        texts = [str(record.get(column, (str, int, float))).strip() for column in spec.columns]
        for column, text in zip(spec.columns, texts):
            if not text:
                raise record.error(column, "empty option")
        return dict(zip(_letters(task, len(texts)), texts))
    value = record.get(spec.field or "", (dict, list))
    if isinstance(value, list):
        value = dict(zip(_letters(task, len(value)), value))
    options: dict[str, str] = {}
    for key, text in value.items():
        letter = str(key).strip().upper()
        if not re.fullmatch(r"[A-Z]", letter):
            raise record.error(f"{spec.field}.{key}", "an option key must be one letter")
        if not isinstance(text, (str, int, float)) or not str(text).strip():
            raise record.error(f"{spec.field}.{key}", "empty or not text")
        options[letter] = str(text).strip()
    if len(options) < 2:
        raise record.error(spec.field, f"{len(options)} option(s); a question needs at least two")
    return options


def _gold_value(task: MultipleChoiceTask, record: Record) -> tuple[str, object]:
    field = task.fields.gold_field()
    assert field is not None, "the kind's validator requires a gold field"
    names = field if isinstance(field, list) else [field]
    name = next((n for n in names if n in record.fields), names[0])
    return name, record.get(name, (str, int, float))


def _index(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else None


def base_arg(task: MultipleChoiceTask) -> str:
    """The ``--task-arg`` naming the index base: ``<answer field>_base`` (MedMCQA: ``cop_base``)."""
    field = task.fields.gold_field()
    return f"{field[0] if isinstance(field, list) else field}_base"


def _parse_base(text: str) -> int:
    if text.strip() not in ("0", "1"):
        raise ValueError(f"an index base is 0 or 1, not {text!r}")
    return int(text)


@dataclass(frozen=True)
class IndexBase:
    """The index base a file uses and how that was decided (recorded in config.json, printed)."""

    base: int
    how: str


def index_base(task: MultipleChoiceTask, records: Sequence[Record], counts: Sequence[int],
               given: int | None = None) -> IndexBase:
    """The index base the file uses (see the module docstring).

    ``given`` (``--task-arg TASK:<field>_base=0|1``) decides. Otherwise, with ``detect_index_base``,
    the file decides: an index 0 anywhere → 0-based, an index equal to its question's number of
    options → 1-based, both → an error (the file mixes bases); neither (every index is 1 … n-1: a
    0-based file where no answer is A, or a 1-based one where no answer is the last option) → an
    error naming the flag — the task file's declared base is a guess there, and a wrong guess shifts
    every answer. Without detection the declared ``index_base`` is used."""
    arg = base_arg(task)
    if given is not None:
        return IndexBase(given, f"--task-arg {task.name}:{arg}={given}")
    declared = task.index_base
    if not task.detect_index_base or not records:
        return IndexBase(declared, f"declared by the task file (index_base: {declared})")
    zero = next((r for r in records if _index(_gold_value(task, r)[1]) == 0), None)
    top = next((r for r, n in zip(records, counts) if _index(_gold_value(task, r)[1]) == n), None)
    if zero is not None and top is not None:
        name = _gold_value(task, top)[0]
        raise top.error(name, f"index {_gold_value(task, top)[1]} equals the number of options (1-based), but line "
                        f"{zero.line} has index 0 (0-based): the file mixes index bases")
    if zero is not None:
        return IndexBase(0, f"detected: line {zero.line} has {_gold_value(task, zero)[0]} 0")
    if top is not None:
        value = _gold_value(task, top)
        return IndexBase(1, f"detected: line {top.line} has {value[0]} {value[1]} (= its number of options)")
    name = _gold_value(task, records[0])[0]
    raise DataError(records[0].path, None, name,
                    f"cannot tell whether {name} is 0- or 1-based: no row has index 0 and none has an index equal "
                    f"to its number of options, so either base reads every row; pass --task-arg "
                    f"{task.name}:{arg}=0|1 (MedMCQA's GitHub release is 1-based, the Hugging Face copy 0-based)")


def read(task: MultipleChoiceTask, records: Sequence[Record], args: Mapping[str, Any] | None = None) -> FileReading:
    options = [_options(task, record) for record in records]
    decided = None
    if task.answer_format == "index":
        decided = index_base(task, records, [len(o) for o in options], (args or {}).get(base_arg(task)))
    base = decided.base if decided is not None else 0
    out = []
    for record, opts in zip(records, options):
        name, value = _gold_value(task, record)
        letters = list(opts)
        if task.answer_format == "letter":
            letter = str(value).strip().strip("()[]").rstrip(".").strip().upper()
            if letter not in opts:
                raise record.error(name, f"{value!r} is not one of the option letters {', '.join(letters)}")
        elif task.answer_format == "index":
            index = _index(value)
            if index is None or not base <= index < base + len(letters):
                raise record.error(name, f"{value!r} is not an option index ({base}…{base + len(letters) - 1}, "
                                   f"{'0' if base == 0 else '1'}-based)")
            letter = letters[index - base]
        else:
            said = str(value).strip().casefold()
            hits = [k for k, text in opts.items() if text.strip().casefold() == said]
            if len(hits) != 1:
                raise record.error(name, f"{value!r} equals {'no option' if not hits else 'several options'} "
                                   f"({', '.join(opts.values())})")
            letter = hits[0]
        out.append(Drafted(gold=letter, inputs={"options": [{"letter": k, "text": t} for k, t in opts.items()]}))
    if decided is None:
        return FileReading(out)
    arg = base_arg(task)
    return FileReading(out, facts={arg: decided.base, f"{arg}_decided": decided.how},
                       note=f"{task.name}: {arg[:-5]} is {decided.base}-based ({decided.how})")


def option_map(example: Example) -> dict[str, str]:
    return {o["letter"]: o["text"] for o in example.inputs["options"]}


def parse(answer: str, example: Example) -> Prediction:
    return parse_letter(answer, option_map(example))


def parse_strict(answer: str, example: Example) -> Prediction:
    return parse_letter_strict(answer, option_map(example))


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    """``accuracy``: the share of questions whose parsed letter is the gold one (a failure, an empty
    answer and an unanswered request are wrong; mean over questions).

    ``truncated_in_reasoning``: the share of questions whose answer stopped inside an unclosed
    ``<think>`` block with no answer before it (the parser's flag; a reasoning model that ran out of
    tokens), so a low accuracy caused by a small token budget is visible as such."""
    golds = [ex.gold for ex in examples]
    preds = [p.value for p in predictions]
    per_sample = [{"accuracy": float(p is not None and p == g),
                   "truncated_in_reasoning": float(bool(pr.diagnostics.get("truncated_in_reasoning")))}
                  for g, p, pr in zip(golds, preds, predictions)]
    truncated = sum(row["truncated_in_reasoning"] for row in per_sample)
    return ScoreSheet(corpus={"accuracy": accuracy(golds, preds),
                              "truncated_in_reasoning": truncated / len(per_sample) if per_sample else 0.0},
                      per_sample=per_sample,
                      aggregations={"accuracy": Mean("accuracy"),
                                    "truncated_in_reasoning": Mean("truncated_in_reasoning")})


GENERATIVE = Scoring(parse=parse, score=score, empty=lambda ex: Prediction(None, True, {"no_answer": True}),
                     description="the option the answer commits to, read as a careful grader does (hedges, "
                     "refusals, empty answers and unfinished reasoning fail); accuracy",
                     samplewise=True)

#: the rules before issue 23 (a stated answer after a hedge rule, no option text, no ``B - …``): earlier numbers
STRICT_V1 = Scoring(parse=parse_strict, score=score, empty=lambda ex: Prediction(None, True, {"no_answer": True}),
                    description="strict-v1: evalpipe's first, strict letter rules (reproduces earlier numbers)",
                    samplewise=True)


def continuations(example: Example) -> tuple[str, ...]:
    """What a log-likelihood request scores after ``Answer:``: each option's letter, a space before it."""
    return tuple(f" {o['letter']}" for o in example.inputs["options"])


def parse_logprobs(answer: str, example: Example) -> Prediction:
    """``{"logprobs": {" A": -0.4, " B": -2.1, …}}`` → the letter of the most likely option.

    Not such JSON, or a log-probability missing or not a finite number for an option: a parse failure
    (``not_logprobs``). Equal maxima: the first option in order, flagged ``tie``. The option
    probabilities (softmax, in option order) are kept in the diagnostics (``probabilities``) for the
    calibration metrics."""
    wanted = continuations(example)
    try:
        scores = json.loads(answer)["logprobs"]
        values = [float(scores[c]) for c in wanted]
    except (ValueError, TypeError, KeyError):
        return Prediction(None, True, {"not_logprobs": True, "tie": False})
    if not all(math.isfinite(v) for v in values):
        return Prediction(None, True, {"not_logprobs": True, "tie": False})
    best = max(values)
    index = values.index(best)
    return Prediction(wanted[index].strip(), False, {"not_logprobs": False, "tie": values.count(best) > 1,
                                                     "probabilities": option_probabilities(values)})


def score_loglikelihood(examples: Sequence[Example], predictions: Sequence[Prediction],
                        options: MetricOptions) -> ScoreSheet:
    """``accuracy`` as :func:`score`, plus ``ece`` and ``brier`` of the option probabilities over the
    samples that have them (:mod:`evalpipe.metrics.calibration`; a failed answer has none). The corpus
    values are the declared aggregations of the parts (one arithmetic, whole or a chunk at a time);
    tests check them against an independent computation."""
    base = score(examples, predictions, options)
    per_sample, parts = [], []
    for example, prediction, shown in zip(examples, predictions, base.per_sample):
        probabilities = prediction.diagnostics.get("probabilities") if not prediction.failed else None
        sample = {"accuracy": shown["accuracy"]}
        scores = dict(shown)
        if probabilities:
            letters = [o["letter"] for o in example.inputs["options"]]
            cal = calibration_parts(probabilities, letters.index(str(example.gold)))
            sample.update(cal)
            scores.update(confidence=max(probabilities), brier=cal["cal.brier"])
        per_sample.append(scores)
        parts.append(sample)
    aggregations = {**base.aggregations, "ece": ExpectedCalibrationError(), "brier": MeanOverScored("brier")}
    corpus = dict(base.corpus)
    for name in ("ece", "brier"):
        corpus[name] = evaluate(aggregations[name], parts)
    return ScoreSheet(corpus=corpus, per_sample=per_sample, parts=parts, aggregations=aggregations)


LOGLIKELIHOOD_SCORING = Scoring(
    parse=parse_logprobs, score=score_loglikelihood, empty=lambda ex: Prediction(None, True, {"no_answer": True}),
    description="the option whose letter has the highest log-probability after the prompt; accuracy, and the "
                "calibration of the option probabilities (ece, brier)",
    samplewise=True)


#: options a question may have when the task file does not fix their number (a field of lists)
_MOST_OPTIONS = 10


def structured(task: MultipleChoiceTask) -> StructuredOutput:
    """``--structured``: ``{"answer": letter}``, the letters of the task's options (A–J when a field
    holds the options: a letter a question lacks is then a wrong answer, as in free text)."""
    count = len(task.options.columns or task.options.fixed or ()) or _MOST_OPTIONS
    schema = {"type": "object", "additionalProperties": False, "required": ["answer"],
              "properties": {"answer": {"type": "string", "enum": list(_letters(task, count))}}}
    return StructuredOutput(schema=schema, to_text=lambda value, example: value["answer"])


CALIBRATION_DEFINITIONS = {
    "ece": "expected calibration error of the option probabilities (softmax of the options' log-probabilities): "
           "10 equal-width confidence bins, Σ (bin size / N)·|accuracy − mean confidence|; log-likelihood scoring "
           "only; lower is better",
    "brier": "mean over questions of Σ over options (probability − 1[gold])², 0 to 2; log-likelihood scoring only; "
             "lower is better",
}


def text_continuations(example: Example) -> tuple[str, ...]:
    """The option texts as continuations, a space before each (lm-eval's PubMedQA: `` yes``, `` no``, `` maybe``)."""
    return tuple(f" {o['text']}" for o in example.inputs["options"])


def option_letters(example: Example) -> tuple[str, ...]:
    return tuple(o["letter"] for o in example.inputs["options"])


#: compatibility modes a task file may give a prompt form of, and how each scores the continuations
FORM_SCORINGS = {LM_EVAL: lm_eval_scoring}


def _forms(task: MultipleChoiceTask) -> dict[str, PromptForm]:
    forms = {}
    for name, spec in task.compat_forms.items():
        wanted = continuations if spec.continuations == "letter" else text_continuations
        scoring = FORM_SCORINGS[name](wanted, option_letters)
        forms[name] = PromptForm(template=spec.template, default_shots=spec.shots,
                                 choice_scoring=ChoiceScoring(continuations=wanted, scoring=scoring, compat=name))
    return forms


def parts(task: MultipleChoiceTask) -> KindParts:
    args = (TaskArg(base_arg(task), "the index base of the answer column: 0 or 1 (decided from the file when "
                    "omitted; a file that cannot tell is refused)", parse=_parse_base),) \
        if task.answer_format == "index" else ()
    return KindParts(scorings={"default": GENERATIVE, "strict-v1": STRICT_V1}, shot_target=lambda ex: str(ex.gold),
                     args=args, chat_max_tokens=REASONING_BUDGET, forms=_forms(task),
                     # ece and brier exist only under log-likelihood scoring (option probabilities)
                     metrics=("accuracy", "truncated_in_reasoning", "ece", "brier"), primary_metric="accuracy",
                     definitions=CALIBRATION_DEFINITIONS,
                     choice_scoring=ChoiceScoring(continuations=continuations, scoring=LOGLIKELIHOOD_SCORING),
                     structured=structured(task))


KIND = register_kind(Kind(
    name="multiple_choice",
    description="one of lettered options (options from a field, columns or fixed; a strict letter parser; accuracy)",
    model=MultipleChoiceTask,
    read=read,
    parts=parts,
    # the index base is decided over the whole file (an index 0 anywhere → 0-based)
    whole_file=True,
    reads_args=True,
))
