"""Every CLUE task end to end (execute + ScriptedBackend) on the synthetic fixtures, both scorings."""

import asyncio
import json

import pytest

from evalpipe.config import RunConfig
from evalpipe.records import Completion
from evalpipe.rescoring import rescore
from evalpipe.outcome import RunError
from evalpipe.pipeline.execute import execute
from evalpipe.pipeline.prepare import prepare_task
from evalpipe.scoring import score_task
from evalpipe.tasks.registry import get_task, suites
from tests.clue.conftest import FIXTURES
from tests.support.scripted_backend import ScriptedBackend, last_user_text

LEVEL1 = ("clue_mednli", "clue_meqsum", "clue_problem_summaries")
LEVEL2 = ("clue_longhealth_task1", "clue_longhealth_task2", "clue_longhealth_task3", "clue_medisumqa",
          "clue_medisumcode")


def config(tasks, **kw):
    base = dict(tasks=tuple(tasks), model="m", base_url="http://127.0.0.1:1/v1", data_dir=str(FIXTURES), limit=6,
                metric_options={"umls_extractor": "fake"})
    base.update(kw)
    return RunConfig(**base)


def answer_key(cfg, answer):
    """Prompt text → answer(example), from the prompts the runner itself will send."""
    key = {}
    for name in cfg.tasks:
        prepared = prepare_task(get_task(name), cfg)
        for example, prompt in zip(prepared.examples, prepared.prompts):
            key[last_user_text(prompt)] = answer(name, example)
    return lambda prompt: key[last_user_text(prompt)]


def gold_answer(task, example):
    spec = get_task(task)
    if task == "clue_mednli":
        return example.gold.upper()
    return spec.shot_target(example)


def run(cfg, responder, tmp_path):
    return asyncio.run(execute(cfg, lambda _: ScriptedBackend(responder), tmp_path))


def test_every_task_perfect_answers_and_level_scores(tmp_path, fake_extractor):
    cfg = config(LEVEL1 + LEVEL2, suites=("clue", "clue-level1", "clue-level2"))
    outcome = run(cfg, answer_key(cfg, gold_answer), tmp_path)
    m = outcome.metrics
    assert m["clue_mednli"]["accuracy"] == 1.0 and m["clue_mednli"]["n"] == 6
    for task in ("clue_meqsum", "clue_problem_summaries", "clue_medisumqa"):
        assert m[task]["rouge1"] == 1.0
        assert m[task]["bertscore[all-MiniLM-L6-v2@L6]_f1"] == pytest.approx(1.0, abs=1e-4)
    for task in ("clue_problem_summaries", "clue_medisumqa"):
        assert m[task]["umls[fake]_f1"] == 1.0
    for task in LEVEL2[:3]:
        assert m[task]["accuracy"] == 1.0 and m[task]["parse_failure_rate"] == 0.0
    assert m["clue_medisumcode"]["exact_f1"] == m["clue_medisumcode"]["valid_ratio"] == 1.0
    tag = "bertscore=all-MiniLM-L6-v2@L6,umls=fake"
    assert m["clue-level1"][f"level1_score[{tag}]"] == pytest.approx(1.0, abs=1e-4)
    assert m["clue-level2"][f"level2_score[{tag}]"] == pytest.approx(1.0, abs=1e-4)
    assert set(m["clue"]) == {f"level1_score[{tag}]", f"level2_score[{tag}]", "longhealth_task2and3_accuracy"}
    # the compatibility scoring runs on the same stored answers, no model needed
    compat = rescore(outcome.run_dir.path, "clue", {"umls_extractor": "fake"})
    assert compat.metrics["clue_mednli"]["accuracy"] == 1.0
    assert compat.metrics["clue_longhealth_task1"]["accuracy"] < 1.0  # substring gold trap (patient_01 q2)
    assert f"level2_score[{tag}]" in compat.metrics["clue-level2"]


def test_without_umls_extractor_the_level_is_incomplete_not_zero(tmp_path):
    cfg = config(LEVEL1, suites=("clue-level1",), metric_options={"umls_extractor": "none"})
    outcome = run(cfg, answer_key(cfg, gold_answer), tmp_path)
    assert not any(k.startswith("umls") for k in outcome.metrics["clue_problem_summaries"])
    assert "clue-level1" not in outcome.aggregates
    assert "UMLS-concept F1 not computed" in outcome.incomplete["clue-level1"]


def test_missing_tasks_make_the_suite_incomplete(tmp_path, fake_extractor):
    cfg = config(("clue_mednli",), suites=("clue-level1",))
    outcome = run(cfg, answer_key(cfg, gold_answer), tmp_path)
    assert "clue_meqsum" in outcome.incomplete["clue-level1"]


def test_mednli_default_vs_compat_on_hand_made_answers():
    from evalpipe.tasks.base import LoadOptions

    spec = get_task("clue_mednli")
    by_id = {ex.id: ex for ex in spec.load(LoadOptions(data_dir=FIXTURES)).examples}
    # After the reference's random.seed(1) shuffle of the 8 test rows, t1 is at position 5, t2 at 2
    # (one of the reference's 3 shots, so not scored there) and t6 at 3 (its first scored item).
    examples = [by_id["t1"], by_id["t2"], by_id["t6"]]  # gold: entailment, contradiction, neutral
    assert [ex.meta["reference_position"] for ex in examples] == [5, 2, 3]
    answers = ["ENTAILMENT or NEUTRAL", "contradiction", "Neutral. Definitely neutral."]
    completions = [Completion(text=a) for a in answers]
    default = score_task(spec, examples, ["{}"] * 3, completions, None).metrics
    # default: the hedge fails, the others are right → 2/3; one parse failure in three answers
    assert default["accuracy"] == pytest.approx(2 / 3) and default["parse_failure_rate"] == pytest.approx(1 / 3)
    compat = score_task(spec, examples, ["{}"] * 3, completions, "clue")
    # reference: t1 credited (gold once), t2 not scored, t6 not credited (gold twice) and counted
    # twice as the first item → (1 + 0 + 0) / 3
    assert compat.metrics["accuracy"] == pytest.approx(1 / 3)
    assert [r["scores"]["reference_weight"] for r in compat.records] == [1.0, 0.0, 2.0]


def test_medisumcode_default_vs_compat():
    from evalpipe.tasks.base import LoadOptions

    spec = get_task("clue_medisumcode")
    examples = {ex.id: ex for ex in spec.load(LoadOptions(data_dir=FIXTURES)).examples}
    chosen = [examples["1002"], examples["1004"]]  # gold U071, J1282 / C4A3
    answers = [Completion(text="u07.1, J12.82, J12.82"), Completion(text="C4A.3")]
    default = score_task(spec, chosen, ["{}"] * 2, answers, None).metrics
    assert default["exact_f1"] == 1.0 and default["valid_ratio"] == 1.0
    compat = score_task(spec, chosen, ["{}"] * 2, answers, "clue")
    # reference regex: doc 1002 → J1282, J1282 (u07.1 missed): P 1, R 1/2, F1 2/3; doc 1004 → nothing: 0
    per_doc = [r["scores"]["exact_f1"] for r in compat.records]
    assert per_doc == [pytest.approx(2 / 3), 0.0]
    positions = [ex.meta["reference_position"] for ex in chosen]
    first = per_doc[positions.index(min(positions))]
    assert compat.metrics["exact_f1"] == pytest.approx((sum(per_doc) + first) / 3)


def test_longhealth_default_reads_phrasings_compat_does_not(tmp_path):
    def answer(task, example):
        letter = example.gold.letter
        return f"**{letter}**" if example.meta["repeat"] % 2 else f"The correct answer is {letter}: x"

    cfg = config(("clue_longhealth_task3",), limit=None)
    outcome = run(cfg, answer_key(cfg, answer), tmp_path)
    assert outcome.metrics["clue_longhealth_task3"]["accuracy"] == 1.0
    compat = rescore(outcome.run_dir.path, "clue").metrics["clue_longhealth_task3"]
    assert compat["accuracy"] == pytest.approx(15 / 25)  # repeats 0, 2, 4 use the stated format


def test_credentialed_task_refuses_a_remote_endpoint(tmp_path):
    cfg = config(("clue_medisumcode",), base_url="http://8.8.8.8/v1")
    with pytest.raises(RunError, match="credentialed"):
        asyncio.run(execute(cfg, lambda c: pytest.fail("no backend may be created"), tmp_path))
    allowed = config(("clue_medisumcode",), base_url="http://8.8.8.8/v1", allow_external_endpoint=True)
    outcome = run(allowed, lambda p: "ICD-10 Codes: I10", tmp_path)
    assert outcome.metrics["clue_medisumcode"]["n"] == 4


def test_prompts_system_role_turns_and_completion(tmp_path):
    cfg = config(("clue_mednli",), fewshot_as_turns=True)
    prompt = prepare_task(get_task("clue_mednli"), cfg).prompts[0]
    roles = [m.role for m in prompt.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert prompt.messages[1].content.startswith("\nSENTENCE_1: ") and prompt.messages[2].content == "entailment"
    one_message = prepare_task(get_task("clue_mednli"), config(("clue_mednli",))).prompts[0]
    assert [m.role for m in one_message.messages] == ["system", "user"]
    assert "Example 3:" in one_message.messages[1].content
    merged = prepare_task(get_task("clue_mednli"), config(("clue_mednli",), system_role=False)).prompts[0]
    assert [m.role for m in merged.messages] == ["user"] and merged.messages[0].content.startswith("You are")
    text = prepare_task(get_task("clue_longhealth_task1"), config(("clue_longhealth_task1",), endpoint="completions"))
    assert text.prompts[0].text.endswith("The correct answer is") and text.prompts[0].params.max_tokens == 50


def test_suites_are_registered():
    known = suites()
    assert known["clue-level1"].tasks == LEVEL1
    assert known["clue-level2"].tasks == LEVEL2
    assert known["clue"].tasks == LEVEL1 + LEVEL2 and known["clue"].aggregate is not None


def test_samples_record_gold_and_provenance(tmp_path, fake_extractor):
    cfg = config(("clue_medisumcode",))
    outcome = run(cfg, answer_key(cfg, gold_answer), tmp_path)
    sample = json.loads(outcome.run_dir.samples_path().read_text().splitlines()[0])
    assert sample["gold"]["codes"] and sample["meta"]["reference_position"] >= 1
    assert sample["prediction"] == sample["gold"]["codes"]
