"""CLUE level 1 · MedNLI (Romanov & Shivade 2018): the logical relation of two clinical sentences.

Data (credentialed, PhysioNet): ``mli_test_v1.jsonl`` (scored; ``--split dev`` scores
``mli_dev_v1.jsonl``) and ``mli_train_v1.jsonl`` (the shot pool: shots never come from the scored
file). JSON lines with ``sentence1``, ``sentence2``, ``gold_label`` ∈ {entailment, contradiction,
neutral} and ``pairID`` (the sample id; the line number when absent). The train file is found by
role ``shots`` in ``--data``, in ``--data-dir``, or beside the scored file.

Prompt: CLUE's system and user text (``prompts/clue/mednli.j2``); 3 shots; 20 new tokens.

Scorings:

* ``default`` — :func:`evalpipe.parsers.nli_label.parse_nli_label` (the label the answer commits to;
  a hedge naming two labels is a failure), accuracy and macro-F1 over the three labels.
* ``clue`` — the reference's rule (gold label occurs exactly once in the answer), the reference's
  scored set (its three test-file shots are not scored) and its mean (first item counted twice).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evalpipe.compat.clue import first_doubled_mean, nli_credited, reference_positions, reference_weights, weighted_mean_aggregations, weighted_parts
from evalpipe.data.records import check_unique_ids, read_records
from evalpipe.tasks.clue.files import (
    DataFile, candidate_paths, locate, problem_locating,
)
from evalpipe.data.errors import DataError
from evalpipe.metrics.aggregation import MacroF1, Mean
from evalpipe.metrics.classification import accuracy, class_parts, macro_f1
from evalpipe.metrics.options import MetricOptions
from evalpipe.parsers.nli_label import LABELS, parse_nli_label
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import EVAL, LoadOptions, SHOTS, Scoring, TaskData, TaskSpec
from evalpipe.tasks.clue.common import ALL, CITATION, LEVEL1, provenance
from evalpipe.tasks.registry import register

NAME = "clue_mednli"
#: the reference takes this many shots from the test file (quirk reproduced in ``clue`` scoring)
REFERENCE_SHOTS = 3
PUBLISHED = "https://physionet.org/content/mednli/1.0.0/"
FILES = {
    split: DataFile(name=f"mli_{split}_v1.jsonl", dataset=f"MedNLI ({split})", published=PUBLISHED,
                    credentialed=True, subdir="MedNLI")
    for split in ("train", "dev", "test")
}


def _eval_file(options: LoadOptions) -> tuple[str, Path | None]:
    split = options.split or "test"
    if split not in ("test", "dev"):
        raise DataError(FILES["test"].name, None, "split", f"unknown split {split!r} (expected test or dev)")
    return split, options.paths.get("eval")


def _train_file(options: LoadOptions, eval_path: Path) -> Path:
    """The shot file: role "shots", else under --data-dir, else beside the scored file."""
    explicit = options.paths.get("shots")
    if explicit is not None:
        return locate(FILES["train"], explicit, None)
    looked = []
    for folder in dict.fromkeys(d for d in (options.data_dir, eval_path.parent) if d is not None):
        found = [p for p in candidate_paths(FILES["train"], Path(folder)) if p.is_file()]
        if found:
            return found[0]
        looked += candidate_paths(FILES["train"], Path(folder))
    raise DataError(looked[0], None, None, FILES["train"].missing_message(looked) +
                    " (the train file provides the few-shot examples)")


def read_mednli(path: Path, split: str) -> tuple[Example, ...]:
    records = read_records(path)
    positions = reference_positions(len(records))
    examples = []
    for row, record in enumerate(records):
        label = record.text("gold_label").strip().lower()
        if label not in LABELS:
            raise record.error("gold_label", f"{label!r} is not one of {', '.join(LABELS)}")
        pair_id = record.fields.get("pairID")
        examples.append(Example(
            id=str(pair_id) if pair_id is not None else f"{split}-{row}",
            inputs={"sentence1": record.text("sentence1"), "sentence2": record.text("sentence2")},
            gold=label,
            meta=provenance(path, record.line, positions[row]),
        ))
    check_unique_ids(records, [ex.id for ex in examples], "pairID")
    return tuple(examples)


def load(options: LoadOptions) -> TaskData:
    split, explicit = _eval_file(options)
    eval_path = locate(FILES[split], explicit, options.data_dir)
    shots_path = _train_file(options, eval_path)
    return TaskData(
        examples=read_mednli(eval_path, split),
        shot_pool=read_mednli(shots_path, "train"),
        files=(eval_path, shots_path),
        split=split,
    )


def data_problem(options: LoadOptions) -> str | None:
    """Why :func:`load` would fail for want of a file (None when both files are there)."""
    split, explicit = _eval_file(options)
    problem = problem_locating(FILES[split], explicit, options.data_dir)
    if problem:
        return problem
    try:
        _train_file(options, locate(FILES[split], explicit, options.data_dir))
    except DataError as exc:
        return str(exc)
    return None


def shot_target(example: Example) -> str:
    """The reference's assistant turn: the gold label as written in the data (lower case)."""
    return str(example.gold)


# ---- default ---------------------------------------------------------------------------------

def parse(answer: str, example: Example) -> Prediction:
    return parse_nli_label(answer)


def empty(example: Example) -> Prediction:
    return Prediction(None, True, {"no_answer": True})


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    """Accuracy (a failed parse is wrong) and macro-F1 over the fixed three labels: a label absent
    from the scored gold (possible under ``--limit``/``--ids``) scores F1 0 and is still averaged."""
    golds = [ex.gold for ex in examples]
    preds = [p.value for p in predictions]
    per_sample = [{"accuracy": float(p is not None and p == g)} for g, p in zip(golds, preds)]
    return ScoreSheet(
        corpus={"accuracy": accuracy(golds, preds), "macro_f1": macro_f1(golds, preds, LABELS)},
        per_sample=per_sample,
        parts=[{**s, **class_parts(g, p)} for s, g, p in zip(per_sample, golds, preds)],
        aggregations={"accuracy": Mean("accuracy"), "macro_f1": MacroF1(LABELS, over="labels")},
    )


# ---- clue compatibility ----------------------------------------------------------------------

def parse_clue(answer: str, example: Example) -> Prediction:
    """Quirk 2 of :mod:`evalpipe.compat.clue`; the value is the gold label when credited, else None."""
    credited = nli_credited(answer, example.gold)
    return Prediction(example.gold if credited else None, not (answer or "").strip(),
                      {"gold_mentions_not_one": not credited})


def score_clue(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    """Accuracy over the reference's scored set (its shot rows left out), first item counted twice.

    Per sample: ``accuracy`` and ``reference_weight`` (0 = a reference shot, not scored; 2 = the
    first scored item; 1 otherwise).
    """
    positions = [int(ex.meta["reference_position"]) for ex in examples]
    correct = [float(p.value is not None and p.value == ex.gold) for ex, p in zip(examples, predictions)]
    kept = [i for i, pos in enumerate(positions) if pos >= REFERENCE_SHOTS]
    weights = reference_weights(positions, [pos >= REFERENCE_SHOTS for pos in positions])
    per_sample = [{"accuracy": c, "reference_weight": w} for c, w in zip(correct, weights)]
    if not kept:  # only reference shots were evaluated (--ids): the reference scores none of them
        return ScoreSheet(corpus={}, per_sample=per_sample)
    value = first_doubled_mean([correct[i] for i in kept], [positions[i] for i in kept])
    return ScoreSheet(corpus={"accuracy": value}, per_sample=per_sample,
                      parts=[weighted_parts({"accuracy": c}, w) for c, w in zip(correct, weights)],
                      aggregations=weighted_mean_aggregations(["accuracy"]))


SPEC = register(
    TaskSpec(
        name=NAME,
        data_roles=(EVAL, SHOTS),
        data_problem=data_problem,
        description="CLUE L1 · MedNLI: entailment / contradiction / neutral for clinical sentence pairs "
        "(3-shot from train).",
        template="clue/mednli.j2",
        load=load,
        shot_target=shot_target,
        scorings={
            "default": Scoring(parse=parse, score=score, empty=empty,
                               description="committed label (hedges fail); accuracy, macro-F1"),
            "clue": Scoring(parse=parse_clue, score=score_clue, empty=empty,
                            description="CLUE reference: gold label occurs once; reference scored set; "
                            "first item doubled"),
        },
        metrics=("accuracy", "macro_f1"),
        max_tokens=20,
        primary_metric="accuracy",
        default_shots=3,
        completion_stop=("\nSENTENCE_1:", "\n\n"),
        suites=(LEVEL1, ALL),
        credentialed=True,
        citation="Romanov A, Shivade C. Lessons from Natural Language Inference in the Clinical Domain. EMNLP 2018. "
        "MedNLI on PhysioNet (credentialed). " + CITATION,
    )
)
