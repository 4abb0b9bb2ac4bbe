"""Base models: the completion prompt primes "The correct answer is", so it is put back before parsing."""

from pathlib import Path

from evalpipe.config import RunConfig
from evalpipe.records import Completion
from evalpipe.config import load_options
from evalpipe.scoring import answer_prefix as _answer_prefix, score_task
from evalpipe.tasks.registry import get_task

FIXTURES = Path(__file__).parent / "fixtures"


def test_longhealth_completions_are_scored_with_the_primed_opening():
    spec = get_task("clue_longhealth_task1")
    chat = RunConfig(tasks=(spec.name,), model="m", data_dir=str(FIXTURES))
    base = RunConfig(tasks=(spec.name,), model="m", data_dir=str(FIXTURES), endpoint="completions")
    assert _answer_prefix(spec, chat) == "" and _answer_prefix(spec, base) == "The correct answer is"
    examples = spec.load(load_options(base, spec.name)).materialized().examples[:4]

    def continuations(gold_letter):  # what a base model writes after "... The correct answer is"
        out = []
        for ex in examples:
            letter = gold_letter(ex)
            out.append(Completion(text=f" {letter}: {({o['letter']: o['text'] for o in ex.inputs['options']})[letter]}."))
        return out

    # each mode's own gold (compat: the reference's substring rule) answered right → accuracy 1
    for compat, gold_letter in ((None, lambda ex: ex.gold.letter), ("clue", lambda ex: ex.gold.clue_letter)):
        scored = score_task(spec, examples, ["{}"] * 4, continuations(gold_letter), compat,
                            answer_prefix=_answer_prefix(spec, base))
        assert scored.metrics["accuracy"] == 1.0, compat
    # without the prefix the reference's rule finds no "The correct answer is X:" at all
    unprimed = score_task(spec, examples, ["{}"] * 4, continuations(lambda ex: ex.gold.clue_letter), "clue")
    assert unprimed.metrics["accuracy"] == 0.0
