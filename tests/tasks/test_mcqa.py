"""The clinical multiple-choice benchmarks: the letter parser on hand cases, each file format, MedMCQA's
index base, the mmlu_medical average, and `run --task medqa --data medqa=FILE` from the command line."""

from __future__ import annotations

import asyncio
import json

import pytest

from evalpipe.config import RunConfig
from evalpipe.data.errors import DataError
from evalpipe.parsers.letter import parse_letter
from evalpipe.pipeline.execute import execute
from evalpipe.tasks.base import IncompleteSuite, LoadOptions
from evalpipe.tasks.registry import get_task, suites
from tests.support.fake_openai import FakeOpenAIProcess
from tests.support.scripted_backend import ScriptedBackend, last_user_text
from tests.tasks import mcqa_synthetic as syn
from tests.test_cli import evalpipe, only_run

OPTIONS = {"A": "Naloxone", "B": "Flumazenil", "C": "Atropine", "D": "Protamine"}


@pytest.mark.parametrize("answer, letter", [
    ("C", "C"),
    ("c", "C"),
    ("C.", "C"),
    (" (B) ", "B"),
    ("[d]", "D"),
    ("**D**", "D"),
    ("Answer: C.", "C"),
    ("Answer: (b)", "B"),
    ("**Answer:** D", "D"),
    ("The answer is c", "C"),
    ("The correct answer is (A). Option B is a benzodiazepine antagonist.", "A"),  # a mentioned option is no answer
    ("final answer: d", "D"),
    ("The best option is B.", "B"),
    ("Option B", "B"),
    ("B) Flumazenil", "B"),
    ("A. Naloxone reverses opioids", "A"),
    ("I'd go with (c).", "C"),
    ("It is D.", "D"),
    ("<think>Opioid overdose... maybe A or B? Naloxone is the antidote.</think>\nAnswer: A", "A"),
    ("<THINK>long reasoning</THINK>A", "A"),
    ("```\nB\n```", "B"),
    ("Sure! Based on the question, here is my answer:\n\nA\n\nLet me know.", "A"),
    ("naloxone", "A"),  # the whole answer is one option's text
    ("Answer: A\nAnswer: A", "A"),  # the same letter stated twice
])
def test_letter_parser_reads(answer, letter):
    prediction = parse_letter(answer, OPTIONS)
    assert (prediction.value, prediction.failed) == (letter, False), prediction.diagnostics


@pytest.mark.parametrize("answer, flag", [
    ("A or B", "hedged"),
    ("Either B or D.", "hedged"),
    ("(a)/(c)", "hedged"),
    ("B/C", "hedged"),
    ("Answer: A. Actually, answer: C", "hedged"),  # two different stated answers
    ("", "empty"),
    ("   \n ", "empty"),
    ("<think>I am still thinking about", "truncated_in_reasoning"),  # never answered
    ("I'm sorry, I cannot provide medical advice. Please consult a doctor.", "no_choice"),
    ("The answer is a rare antidote", "no_choice"),  # "a" the article, not option A
    ("A patient with overdose needs airway support", "no_choice"),  # "A" opening a sentence
    ("Answer: E", "invalid_letter"),  # not an offered option
    ("E", "invalid_letter"),
    ("Naloxone or flumazenil", "hedged"),  # two option texts joined by "or"
])
def test_letter_parser_failures_are_counted(answer, flag):
    prediction = parse_letter(answer, OPTIONS)
    assert prediction.value is None and prediction.failed and prediction.diagnostics[flag]


def test_refusal_is_flagged():
    assert parse_letter("I'm sorry, I can't answer that.", OPTIONS).diagnostics["refusal"]
    assert not parse_letter("No idea.", OPTIONS).diagnostics["refusal"]


# ---- the formats -----------------------------------------------------------------------------

def load(task, **kw):
    return get_task(task).load(LoadOptions(**kw))


def test_medqa_options_dict_and_letter(tmp_path):
    path = syn.write_medqa(tmp_path)
    data = load("medqa", paths={"eval": path})
    assert [e.gold for e in data.examples] == [q[2] for q in syn.QUESTIONS[:5]]
    assert data.examples[1].inputs["options"][1] == {"letter": "B", "text": "Pancreas"}
    assert len(data.shot_pool) == 3  # the train file beside the test file
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "q", "options": {"A": "x", "B": "y"}, "answer_idx": "C"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:1: answer_idx: 'C' is not one of the option letters A, B"):
        load("medqa", paths={"eval": bad}, shots=0)


@pytest.mark.parametrize("base", [1, 0])
def test_medmcqa_reads_either_index_base(tmp_path, base):
    """cop is 1-based in MedMCQA's GitHub release (declared) and 0-based on the hub (detected: an index 0)."""
    path = syn.write_medmcqa(tmp_path, base=base)
    data = load("medmcqa", paths={"eval": path})
    assert [e.gold for e in data.examples] == [q[2] for q in syn.QUESTIONS[:5]]
    assert data.examples[0].id == "q0" and data.examples[0].inputs["subject"] == "Medicine"


def test_medmcqa_mixed_index_bases_are_refused(tmp_path):
    records = syn.medmcqa_records(syn.QUESTIONS[:4], base=1)
    records[0]["cop"], records[3]["cop"] = 0, 4  # 0 says 0-based, 4 (of 4 options) says 1-based
    path = tmp_path / "dev.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(DataError, match=r"dev.json:4: cop: index 4 equals the number of options \(1-based\), but line 1 "
                                        r"has index 0 \(0-based\)"):
        load("medmcqa", paths={"eval": path}, shots=0)


def test_medmcqa_test_file_without_answers_says_so(tmp_path):
    records = syn.medmcqa_records(syn.QUESTIONS[:2])
    for r in records:
        del r["cop"]
    (tmp_path / "test.json").write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(DataError, match=r"test.json:1: cop: missing field .*answers are not published; evaluate the dev"):
        load("medmcqa", data_dir=tmp_path, split="test", shots=0)


def test_pubmedqa_keyed_object_with_text_answers(tmp_path):
    data = load("pubmedqa", paths={"eval": syn.write_pubmedqa(tmp_path / "ori_pqal.json")})
    assert [e.id for e in data.examples] == list(syn.PUBMEDQA)
    assert [e.gold for e in data.examples] == ["A", "B", "C", "A"]  # yes, no, maybe, yes
    assert data.examples[0].meta["line"] == 2 and len(data.examples[0].inputs["contexts"]) == 2


def test_mmlu_headerless_csv_with_dev_shots(tmp_path):
    root = syn.write_mmlu(tmp_path, ["anatomy"])
    data = load("mmlu_anatomy", data_dir=root)
    assert [e.gold for e in data.examples] == ["C", "B", "A"] and len(data.shot_pool) == 5
    assert data.examples[0].meta["line"] == 1  # no header row
    # an explicit test file: its dev file is found in ../dev (MMLU's layout)
    beside = load("mmlu_anatomy", paths={"eval": root / "data" / "test" / "anatomy_test.csv"})
    assert len(beside.shot_pool) == 5


def test_mmlu_medical_average_by_hand():
    suite = suites()["mmlu_medical"]
    assert len(suite.tasks) == 6
    metrics = {t: {"accuracy": a, "n": n} for t, a, n in zip(suite.tasks, (1.0, 0.5, 0.5, 0.5, 0.5, 0.5),
                                                             (10, 30, 30, 30, 30, 70))}
    out = suite.aggregate(metrics)
    assert out["accuracy_macro"] == pytest.approx(3.5 / 6)
    assert out["accuracy_micro"] == pytest.approx((10 + 15 * 4 + 35) / 200)
    del metrics["mmlu_anatomy"]
    with pytest.raises(IncompleteSuite, match="missing: mmlu_anatomy"):
        suite.aggregate(metrics)


# ---- runs ------------------------------------------------------------------------------------

def test_medqa_run_scores_letters_and_counts_failures(tmp_path):
    path = syn.write_medqa(tmp_path / "data")
    answers = {"scurvy": "Answer: C", "insulin": "b", "opioid": "A or C", "peaked": "", "forearm": "**B**"}

    def respond(prompt):
        text = last_user_text(prompt)
        return next(a for k, a in answers.items() if k in text)

    config = RunConfig(tasks=("medqa",), model="m", base_url="http://127.0.0.1:1/v1", data={"medqa": str(path)})
    outcome = asyncio.run(execute(config, lambda _: ScriptedBackend(respond, model="m"), tmp_path / "results"))
    metrics = outcome.metrics["medqa"]
    assert metrics["accuracy"] == pytest.approx(3 / 5)
    assert metrics["parse_failure_rate"] == pytest.approx(2 / 5)  # the hedge and the empty answer
    summary = json.loads((outcome.run_dir.path / "summary.json").read_text())["tasks"]["medqa"]
    assert summary["diagnostics"]["hedged"] == 1 and summary["diagnostics"]["empty"] == 1


def test_run_task_medqa_with_its_data_from_the_command_line(tmp_path):
    path = syn.write_medqa(tmp_path / "data")
    script = tmp_path / "answers.json"
    script.write_text(json.dumps({"scurvy": "C", "insulin": "B", "opioid": "A", "peaked": "D", "forearm": "A"}))
    with FakeOpenAIProcess(latency=0.0, script=script) as server:
        result = evalpipe("run", "--task", "medqa", "--data", f"medqa={path}", "--base-url", server.url,
                          "--model", "fake-model", "--results-dir", str(tmp_path / "results"))
    assert result.returncode == 0, result.stderr
    metrics = json.loads((only_run(tmp_path / "results") / "metrics.json").read_text())["medqa"]
    assert metrics["accuracy"] == pytest.approx(4 / 5) and metrics["n"] == 5
