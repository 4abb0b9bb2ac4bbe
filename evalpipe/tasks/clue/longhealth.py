"""CLUE level 2 · LongHealth (Adams et al. 2024): multiple-choice questions over long patient letters.

Data (public, not redistributed): ``benchmark_v5.json`` from github.com/kbressem/LongHealth
(structure: :mod:`evalpipe.tasks.clue.longhealth_data`). Three tasks, each question asked ``REPEATS`` times
(the reference asks 5 times, with fresh document order / distractors each time):

* ``clue_longhealth_task1`` — the question's answer letters plus the patient's *other* letters,
  options A–E, gold = the correct option;
* ``clue_longhealth_task2`` — the answer letters plus ``DISTRACTORS`` letters of *other*
  patients, options A–F (F: "Question cannot be answered with provided documents"), gold = the
  correct option;
* ``clue_longhealth_task3`` — the distractors only, options A–F, gold = F.

Documents are fitted into a context budget by :func:`evalpipe.data.context_budget.fit_documents`
(answer letters first, never dropped — cut only if they alone exceed the budget, which is flagged
``answer_truncated`` in the sample's meta; other letters whole, while they fit), then shuffled.
The budget (:func:`document_budget`) is the model's context less ``PROMPT_RESERVE_TOKENS`` for the
instructions, question, options and answer, counted with the model's tokenizer when one answers
(``LoadOptions.token_counter``: vLLM's or llama.cpp's tokenize endpoint, an in-process engine's
tokenizer); without a tokenizer it is converted to characters with the 3.5 characters/token
estimate of :mod:`evalpipe.context_fit`. With no known context it is ``DEFAULT_CONTEXT_CHARS``
characters of documents (separators included) — about 7k tokens, the reference's 8k-token setting
less the prompt around the documents. The task is ``sized_by_context``: the runner reloads it once
the server has told the context length and the tokenizer answers. Each sample's meta records the
measure (``context_measure``: tokens or characters) and the size used.

Every random choice (document order, which other letters, distractors) comes from a
``random.Random`` seeded with ``LoadOptions.seed``, the task, patient, question and repeat, so two
runs with the same seed see identical prompts, and each task's sampling is independent of the
others and of ``--limit``. Examples are ordered repeat-major (``--limit 400`` = one pass over all
questions). Zero-shot; 50 new tokens.

Scorings: ``default`` — :func:`evalpipe.parsers.choice.parse_choice`, accuracy. ``clue`` — the
reference's ``The correct answer is (\\w):`` and its substring-based gold letter (quirks 4, 5 of
:mod:`evalpipe.compat.clue`), accuracy. Task 2&3 accuracy is a suite aggregate
(:mod:`evalpipe.tasks.clue.suites`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from evalpipe.compat.clue import stated_letter, substring_gold_letter
from evalpipe.tasks.clue.files import DataFile
from evalpipe.context_fit import CHARS_PER_TOKEN_ESTIMATE
from evalpipe.data.context_budget import CHARACTERS, CountedMeasure, Document, Measure, fit_documents
from evalpipe.data.errors import DataError
from evalpipe.tasks.clue.longhealth_data import Patient, read_longhealth
from evalpipe.metrics.aggregation import Mean
from evalpipe.metrics.options import MetricOptions
from evalpipe.parsers.choice import parse_choice
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import LoadOptions, Scoring, TaskData, TaskSpec
from evalpipe.tasks.clue.common import ALL, CITATION, LEVEL2, locate_test_file, single_file_problem
from evalpipe.tasks.registry import register

TASK_NAMES = {1: "clue_longhealth_task1", 2: "clue_longhealth_task2", 3: "clue_longhealth_task3"}
REPEATS = 5
DISTRACTORS = 10
DEFAULT_CONTEXT_CHARS = 24_000
#: must equal the join in prompts/clue/longhealth.j2 (a test checks it)
SEPARATOR = "\n\n--------------\n\n"
UNANSWERABLE = "Question cannot be answered with provided documents"
FILE = DataFile(
    name="benchmark_v5.json", dataset="LongHealth", subdir="LongHealth",
    published="https://github.com/kbressem/LongHealth (data/benchmark_v5.json)", credentialed=False,
)


@dataclass(frozen=True)
class ChoiceGold:
    """The gold letter, and the letter CLUE's reference would take as gold (substring rule)."""

    letter: str
    clue_letter: str | None


def _options(question_options: dict[str, str], with_unanswerable: bool) -> dict[str, str]:
    return {**question_options, "F": UNANSWERABLE} if with_unanswerable else dict(question_options)


def _rng(task: int, seed: int | None, patient: str, number: str, repeat: int) -> random.Random:
    # a str seed is hashed deterministically (sha512), unlike hash(), so runs agree
    return random.Random(f"clue_longhealth|task{task}|seed={seed}|{patient}|{number}|repeat={repeat}")


def build_examples(
    patients: Sequence[Patient],
    task: int,
    seed: int | None,
    budget: int = DEFAULT_CONTEXT_CHARS,
    measure: Measure = CHARACTERS,
    repeats: int = REPEATS,
) -> tuple[Example, ...]:
    """Every (repeat, patient, question) prompt of one task, documents fitted to ``budget``."""
    if task not in TASK_NAMES:
        raise ValueError(f"LongHealth task must be 1, 2 or 3, not {task}")
    pool = [(p.id, Document(f"{p.id}/{tid}", text)) for p in patients for tid, text in p.texts.items()]
    examples = []
    for repeat in range(repeats):
        for patient in patients:
            others = [doc for owner, doc in pool if owner != patient.id]
            for question in patient.questions:
                rng = _rng(task, seed, patient.id, question.number, repeat)
                answer_docs = [Document(f"{patient.id}/{tid}", patient.texts[tid]) for tid in question.answer_texts]
                if task == 1:
                    optional = [Document(f"{patient.id}/{tid}", text) for tid, text in patient.texts.items()
                                if tid not in question.answer_texts]
                    rng.shuffle(optional)
                else:
                    optional = rng.sample(others, min(DISTRACTORS, len(others)))
                required = [] if task == 3 else answer_docs
                fitted = fit_documents(required, optional, budget, SEPARATOR, measure)
                documents = list(fitted.documents)
                rng.shuffle(documents)
                options = _options(dict(question.options), with_unanswerable=task != 1)
                gold = ChoiceGold("F", "F") if task == 3 else ChoiceGold(
                    question.gold, substring_gold_letter(options, question.correct))
                examples.append(Example(
                    id=f"r{repeat}-{patient.id}-q{question.number}",
                    inputs={
                        "documents": [d.text for d in documents],
                        "question": question.question,
                        "options": [{"letter": k, "text": v} for k, v in options.items()],
                    },
                    gold=gold,
                    meta={
                        "patient": patient.id, "question": question.number, "repeat": repeat,
                        "documents": [d.id for d in documents],
                        "answer_documents": [d.id for d in answer_docs] if task != 3 else [],
                        "answer_truncated": fitted.truncated, "skipped_documents": fitted.skipped,
                        "context_size": fitted.used, "context_measure": measure.name,
                    },
                ))
    return tuple(examples)


#: tokens kept for the instructions, question, options and answer around the documents
PROMPT_RESERVE_TOKENS = 1024


def document_budget(options: LoadOptions) -> tuple[int, Measure]:
    """How much document text goes into one prompt, and in what unit.

    With a context of C tokens the documents get ``C - PROMPT_RESERVE_TOKENS`` tokens, counted with
    ``options.token_counter`` when there is one; without a tokenizer, ``(C - PROMPT_RESERVE_TOKENS)
    × 3.5`` characters — the same conservative estimate as :mod:`evalpipe.context_fit` — so a prompt fits
    without cutting a letter in half. With no known context: ``DEFAULT_CONTEXT_CHARS`` characters.
    """
    if not options.context_length:
        return DEFAULT_CONTEXT_CHARS, CHARACTERS
    tokens = options.context_length - PROMPT_RESERVE_TOKENS
    if tokens <= 0:
        raise DataError(FILE.name, None, "context_length",
                        f"a context of {options.context_length} tokens leaves no room for LongHealth's documents")
    if options.token_counter is not None:
        return tokens, CountedMeasure(options.token_counter)
    return int(tokens * CHARS_PER_TOKEN_ESTIMATE), CHARACTERS


def _loader(task: int) -> Callable[[LoadOptions], TaskData]:
    def load(options: LoadOptions) -> TaskData:
        path = locate_test_file(FILE, options)
        patients = read_longhealth(path)
        budget, measure = document_budget(options)
        return TaskData(examples=build_examples(patients, task, options.seed, budget=budget, measure=measure),
                        shot_pool=(), files=(Path(path),), split="test")

    return load


data_problem = single_file_problem(FILE)


def option_map(example: Example) -> dict[str, str]:
    return {o["letter"]: o["text"] for o in example.inputs["options"]}


def shot_target(example: Example) -> str:
    letter = example.gold.letter
    return f"The correct answer is {letter}: {option_map(example)[letter]}"


def parse(answer: str, example: Example) -> Prediction:
    return parse_choice(answer, option_map(example))


def parse_clue(answer: str, example: Example) -> Prediction:
    letter = stated_letter(answer)
    return Prediction(letter, letter is None, {"no_stated_answer": letter is None})


def empty(example: Example) -> Prediction:
    return Prediction(None, True, {"no_answer": True})


def _accuracy_sheet(golds: Sequence[str | None], predictions: Sequence[Prediction]) -> ScoreSheet:
    """Accuracy: the share of samples whose letter equals the gold letter (no letter is wrong)."""
    per_sample = [{"accuracy": float(p.value is not None and p.value == g)} for g, p in zip(golds, predictions)]
    value = sum(s["accuracy"] for s in per_sample) / len(per_sample) if per_sample else 0.0
    return ScoreSheet(corpus={"accuracy": value}, per_sample=per_sample, aggregations={"accuracy": Mean("accuracy")})


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    return _accuracy_sheet([ex.gold.letter for ex in examples], predictions)


def score_clue(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    return _accuracy_sheet([ex.gold.clue_letter for ex in examples], predictions)


_DESCRIPTIONS = {
    1: "answer letters + the patient's other letters, options A–E",
    2: "answer letters + other patients' letters, options A–F",
    3: "other patients' letters only, options A–F, gold F (cannot be answered)",
}

SPECS = {
    task: register(TaskSpec(
        kind="multiple_choice",
        name=name,
        data_problem=data_problem,
        description=f"CLUE L2 · LongHealth task {task}: {_DESCRIPTIONS[task]} (zero-shot, {REPEATS} repeats).",
        template="clue/longhealth.j2",
        load=_loader(task),
        shot_target=shot_target,
        scorings={
            "default": Scoring(parse=parse, score=score, empty=empty,
                               description="chosen letter from the usual phrasings; accuracy", samplewise=True),
            "clue": Scoring(parse=parse_clue, score=score_clue, empty=empty,
                            description="CLUE reference: 'The correct answer is (\\w):', substring gold; accuracy",
                            samplewise=True),
        },
        metrics=("accuracy",),
        max_tokens=50,
        primary_metric="accuracy",
        default_shots=0,
        completion_stop=("\n\n",),
        completion_prefix="The correct answer is",
        suites=(LEVEL2, ALL),
        credentialed=False,
        sized_by_context=True,
        citation="Adams L, Busch F, Han T, et al. LongHealth: A Question Answering Benchmark with Long Clinical "
        "Documents. arXiv:2401.14490, 2024. " + CITATION,
    ))
    for task, name in TASK_NAMES.items()
}
