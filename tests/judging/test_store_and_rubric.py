"""The judgements table (additive, committed on arrival, URLs redacted), what a rubric renders (never the
evaluated model's name), which rubric a task gets, and that the judging package names no task."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from evalpipe.store.answers import ResponseStore
from evalpipe.store.judgements import StoredJudgement
from evalpipe.judging.items import FREE_TEXT, JudgedItem, TaskToJudge, judgeable_tasks, judged_text
from evalpipe.judging.rubric import load_rubric, rubric_for
from evalpipe.records import GenerationParams
from evalpipe.tasks.registry import all_tasks
from tests.test_architecture import TASK_NAMES, _code_tokens

PACKAGE = Path(__file__).resolve().parents[2] / "evalpipe" / "judging"


def test_judgements_are_stored_per_attempt_and_read_back(tmp_path):
    store = ResponseStore(tmp_path / "responses.sqlite")
    row = StoredJudgement(judge="j", rubric_sha256="r", task="t", sample_id="s", answer_sha256="a", attempt=1,
                          request_key="k", text='{"accuracy": 4}', ratings={"accuracy": 4}, latency_s=0.5,
                          endpoint="http://user:sk-secret-123@127.0.0.1:8000/v1/chat/completions?key=sk-x")
    store.put_judgement(row)
    store.put_judgement(StoredJudgement(**{**row.__dict__, "attempt": 2, "ratings": None, "problem": "bad"}))
    store.close()
    # committed: another connection sees both rows at once
    with sqlite3.connect(tmp_path / "responses.sqlite") as db:
        rows = db.execute("SELECT attempt, ratings, problem, endpoint, created FROM judgements ORDER BY attempt").fetchall()
    assert [r[0] for r in rows] == [1, 2] and json.loads(rows[0][1]) == {"accuracy": 4} and rows[1][2] == "bad"
    assert "sk-" not in rows[0][3] and rows[0][3].startswith("http://127.0.0.1:8000/") and isinstance(rows[0][4], float)
    again = ResponseStore(tmp_path / "responses.sqlite")
    read = again.judgements("t", ["j"], "r")
    assert [r.attempt for r in read] == [1, 2] and read[0].ratings == {"accuracy": 4}
    assert again.judgements("t", ["other"], "r") == [] and again.judgements("t", None, "other-rubric") == []
    assert len(again) == 0  # the answers table is untouched
    again.close()


def test_the_rubric_never_sees_the_evaluated_model_and_shows_what_the_model_saw():
    rubric = load_rubric("judge/free_text.j2")
    task = TaskToJudge("t", "Answer the question.", FREE_TEXT, None, False, ())
    item = JudgedItem("t", "0", {"question": "Is it serious?"}, "See a doctor.", "Rest and drink.", "sha")
    prompt = rubric.render(task, item, GenerationParams(max_tokens=8))
    text = "\n".join(m.content for m in prompt.messages)
    for shown in ("Is it serious?", "See a doctor.", "Rest and drink.", "Answer the question.", '"clarity": <1-5>'):
        assert shown in text
    assert prompt.params.temperature == 0.0
    no_reference = rubric.render(task, JudgedItem("t", "0", {"question": "q"}, None, "", "sha"),
                                 GenerationParams(max_tokens=8))
    assert "REFERENCE" not in no_reference.messages[-1].content and "(empty answer)" in no_reference.messages[-1].content


def test_which_rubric_a_task_gets(tmp_path):
    declared = TaskToJudge("p", "", FREE_TEXT, "judge/problem_list.j2", True, ())
    plain = TaskToJudge("q", "", FREE_TEXT, None, False, ())
    assert rubric_for(plain, {}).name == "judge/free_text.j2"
    assert rubric_for(declared, {}).name == "judge/problem_list.j2"
    own = tmp_path / "own.j2"
    own.write_text('{%- set criteria = ["harm"] -%}{%- set scale = [0, 2] -%}{%- macro prompt(s, t) -%}x{%- endmacro -%}')
    assert rubric_for(declared, {None: own}).criteria == {"harm": ""}
    assert rubric_for(declared, {None: own, "p": "judge/free_text.j2"}).name == "judge/free_text.j2"
    problems = load_rubric("judge/problem_list.j2").render(
        declared, JudgedItem("p", "0", {"subjective": "s", "assessment": "a"},
                             {"problems": ["sepsis", "acute kidney injury"], "summary": "sepsis; aki"}, "sepsis", "x"),
        GenerationParams(max_tokens=8))
    assert "- sepsis\n- acute kidney injury" in problems.messages[-1].content


def test_the_free_text_tasks_declare_it_and_the_run_records_it():
    kinds = {name: spec.answer_kind for name, spec in all_tasks().items() if spec.answer_kind}
    assert kinds == {"clue_meqsum": FREE_TEXT, "clue_problem_summaries": FREE_TEXT, "clue_medisumqa": FREE_TEXT,
                     "huatuo_generation": FREE_TEXT}
    for spec in all_tasks().values():
        if spec.answer_kind:
            load_rubric(spec.judge_rubric or f"judge/{spec.answer_kind}.j2")  # every shipped rubric loads


def test_judged_items_come_from_the_run_directory(answered_run):
    config = json.loads((answered_run / "config.json").read_text())
    assert config["tasks"]["huatuo_generation"]["answer_kind"] == FREE_TEXT
    records = [json.loads(line) for line in (answered_run / "samples.jsonl").read_text().splitlines()]
    records[0] = {**records[0], "error": "HTTP 500 after 7 attempts", "answer": None}
    (task,) = judgeable_tasks(config, records)
    assert task.unanswered == ("test-0",) and len(task.items) == 19
    assert task.items[0].answer == records[1]["answer"].strip()
    assert judged_text("<think>plan</think>  The answer. ") == "The answer."
    assert judged_text("The answer.<think>unfinished") == "The answer."


def test_the_judging_package_names_no_task():
    hits = [f"{path.name}:{line}: {text}" for path in sorted(PACKAGE.rglob("*.py"))
            for line, text in _code_tokens(path) if TASK_NAMES.search(text)]
    assert not hits


def test_a_run_recorded_before_answer_kinds_is_judged_by_its_registered_task():
    from evalpipe.judging.items import task_declaration

    old = task_declaration("clue_problem_summaries", {"credentialed": True, "description": "old words"})
    assert old == {"answer_kind": FREE_TEXT, "judge_rubric": "judge/problem_list.j2", "credentialed": True,
                   "description": "old words"}
    assert task_declaration("ncbi_disease", {})["answer_kind"] is None
    assert task_declaration("a_user_task", {"answer_kind": FREE_TEXT, "judge_rubric": None})["answer_kind"] == FREE_TEXT
    assert task_declaration("gone_task", {})["answer_kind"] is None
