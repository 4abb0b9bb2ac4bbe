"""The judge run in process (scripted judges as backends; the transport is tested in test_judge_cli):
replies committed on arrival and resumed after a kill, failed requests asked again, one retry,
rubrics with other criteria, a new panel replacing the old one, and errors before any request."""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import statistics

import pytest

from evalpipe.config import RunConfig
from evalpipe.judging.panel import Judge
from evalpipe.judging.run import JudgeOptions, execute_judging
from evalpipe.outcome import RunError
from evalpipe.prompting import TemplateError
from evalpipe.pipeline.execute import execute
from tests.judging import scripted
from tests.support.scripted_backend import ScriptedBackend

PANEL = [Judge("judge-a", "http://127.0.0.1:9/v1"), Judge("judge-b", "http://127.0.0.1:9/v1")]


class Judges:
    """A backend factory of scripted judges that remembers every backend it made."""

    def __init__(self, reply=scripted.prompt_reply):
        self.reply = reply
        self.made: dict[str, ScriptedBackend] = {}

    def __call__(self, judge, options):
        backend = ScriptedBackend(lambda prompt, name=judge.model: self.reply(name, prompt), model=judge.model)
        self.made[judge.model] = backend
        return backend

    def calls(self) -> int:
        return sum(len(b.calls) for b in self.made.values())


def judge(run, factory, panel=PANEL, **options):
    return asyncio.run(execute_judging(run, panel, JudgeOptions(**options), backend_factory=factory))


def metrics_of(run):
    return json.loads((run / "metrics.json").read_text())["huatuo_generation"]


def stored_rows(run) -> int:
    with sqlite3.connect(run / "responses.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0]


def test_a_killed_judging_resumes_without_asking_a_stored_judgement_again(run_copy):
    class Killed(BaseException):
        pass

    sent = []

    def dies_after_seven(name, prompt):
        if len(sent) == 7:
            raise Killed()
        sent.append(name)
        return scripted.prompt_reply(name, prompt)

    with pytest.raises(Killed):
        judge(run_copy, Judges(dies_after_seven), concurrency=1)
    assert stored_rows(run_copy) == 7  # every reply received was committed on arrival

    resumed = Judges()
    outcome = judge(run_copy, resumed)
    assert resumed.calls() == 2 * scripted.N + 2 - 7
    assert outcome.from_store >= 5
    uninterrupted = run_copy.parent / "fresh"
    import shutil

    shutil.copytree(run_copy, uninterrupted)
    with sqlite3.connect(uninterrupted / "responses.sqlite") as db:
        db.execute("DELETE FROM judgements")
    judge(uninterrupted, Judges())
    assert metrics_of(run_copy) == metrics_of(uninterrupted)


def test_a_failed_judge_request_is_a_failure_now_and_asked_again_next_time(run_copy):
    def flaky(name, prompt):
        text = "\n".join(m.content for m in prompt.messages)
        if name == "judge-a" and "ANSWER-02" in text:
            return RuntimeError("HTTP 503 after 7 attempts")
        return scripted.prompt_reply(name, prompt)

    first = judge(run_copy, Judges(flaky))
    assert first.failed_requests == 1
    metrics = metrics_of(run_copy)
    assert metrics["judge[judge-a]_failures"] == 1 and metrics["judge_failures"] == 2
    records = {json.loads(line)["id"]: json.loads(line) for line in (run_copy / "samples.jsonl").read_text().splitlines()}
    assert "no reply" in records["test-2"]["judge"]["failures"]["judge-a"]

    again = Judges()
    judge(run_copy, again)
    assert again.calls() == 1 and len(again.made["judge-a"].calls) == 1
    assert metrics_of(run_copy)["judge_failures"] == 1


def test_an_unusable_reply_is_retried_once_in_the_same_conversation(run_copy):
    factory = Judges()
    judge(run_copy, factory)
    retries = [p for p in factory.made["judge-b"].calls if len(p.messages) > 2]
    assert len(retries) == 2  # samples 3 and 5; sample 5's retry is unusable too: no third request
    retry = retries[0]
    assert retry.messages[-2].role == "assistant" and retry.messages[-1].role == "user"
    assert "could not be used" in retry.messages[-1].content and '"accuracy": <1-5>' in retry.messages[-1].content
    assert all(p.params.temperature == 0.0 for b in factory.made.values() for p in b.calls)


def test_a_rubric_with_other_criteria_and_scale(run_copy, tmp_path):
    rubric = tmp_path / "safety.j2"
    rubric.write_text(
        '{%- set criteria = {"safety": "Could following the answer harm the patient?"} -%}\n'
        "{%- set scale = [1, 3] -%}\n"
        "{%- macro prompt(sample, task) -%}Task: {{ task.description }}\nQuestion: {{ sample.inputs.question }}\n"
        "Reference: {{ sample.reference }}\nAnswer: {{ sample.answer }}\nRate safety 1-3 as JSON.{%- endmacro -%}\n")

    def safety(name, prompt):
        i = int(prompt.messages[-1].content.split("ANSWER-")[1][:2])
        return json.dumps({"safety": 1 + i % 3 if name == "judge-a" else 1 + (i + 1) % 3})

    judge(run_copy, Judges(safety), rubrics={None: rubric})
    metrics = metrics_of(run_copy)
    assert "judge_accuracy" not in metrics
    expected = statistics.mean(statistics.mean([1 + i % 3, 1 + (i + 1) % 3]) for i in range(scripted.N))
    assert math.isclose(metrics["judge_safety"], expected)
    assert metrics["judge_alpha_safety"] < 0.5  # the two judges disagree by construction
    config = json.loads((run_copy / "config.json").read_text())
    assert config["judging"]["tasks"]["huatuo_generation"]["criteria"] == {
        "safety": "Could following the answer harm the patient?"}
    assert config["judging"]["tasks"]["huatuo_generation"]["scale"] == [1, 3]


def test_a_new_panel_replaces_the_old_judge_metrics(run_copy):
    judge(run_copy, Judges())
    judge(run_copy, Judges(), panel=PANEL[:1])
    metrics = metrics_of(run_copy)
    assert not any(m.startswith("judge[judge-b]") for m in metrics)
    assert "judge_alpha_accuracy" not in metrics
    assert math.isclose(metrics["judge_accuracy"], statistics.mean(r["accuracy"] for r in scripted.RATINGS["judge-a"].values()))
    summary = json.loads((run_copy / "summary.json").read_text())["tasks"]["huatuo_generation"]
    assert "needs at least two judges" in summary["not_computed"]["judge_alpha_accuracy"]
    assert not any(k.startswith("judge[judge-b]") for r in (run_copy / "samples.jsonl").read_text().splitlines()
                   for k in json.loads(r)["parts"])


@pytest.mark.parametrize("make_problem, message", [
    (lambda run, tmp: ({"rubrics": {None: tmp / "missing.j2"}}, PANEL), "judge rubric not found"),
    (lambda run, tmp: ({"rubrics": {"no_such_task": tmp / "x.j2"}}, PANEL), "not a judged task of this run"),
    (lambda run, tmp: ({}, [PANEL[0], PANEL[0]]), "given twice"),
    (lambda run, tmp: ({}, []), "no judge given"),
])
def test_problems_stop_the_judging_before_any_request(run_copy, tmp_path, make_problem, message):
    options, panel = make_problem(run_copy, tmp_path)
    factory = Judges()
    with pytest.raises((RunError, TemplateError), match=message):
        judge(run_copy, factory, panel=panel, **options)
    assert factory.made == {}
    assert "judging" not in json.loads((run_copy / "config.json").read_text())


def test_a_broken_rubric_is_refused_with_its_file_and_line(run_copy, tmp_path):
    rubric = tmp_path / "broken.j2"
    rubric.write_text('{%- set criteria = {"accuracy": "x"} -%}{%- set scale = [1, 5] -%}\n'
                      "{%- macro prompt(sample, task) -%}{{ sample.answr }}{%- endmacro -%}\n")
    factory = Judges()
    with pytest.raises(TemplateError, match="broken.j2: macro prompt"):
        judge(run_copy, factory, rubrics={None: rubric})
    assert factory.made == {}
    rubric.write_text('{%- set criteria = {"n": "x"} -%}{%- set scale = [1, 5] -%}{%- macro prompt(s, t) -%}x{%- endmacro -%}')
    with pytest.raises(TemplateError, match="criterion 'n'"):
        judge(run_copy, factory, rubrics={None: rubric})


def test_a_run_without_free_text_answers_has_nothing_to_judge(tmp_path):
    config = RunConfig(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:1/v1", limit=2)
    outcome = asyncio.run(execute(config, lambda c: ScriptedBackend(lambda p: "<response>x</response>"), tmp_path))
    with pytest.raises(RunError, match="no task of this run has free-text answers"):
        judge(outcome.run_dir.path, Judges())


def test_a_judge_that_is_the_evaluated_model_is_named_in_a_note(run_copy):
    outcome = judge(run_copy, Judges(lambda name, p: scripted.prompt_reply("judge-a", p)),
                    panel=[Judge(scripted.EVALUATED, "http://127.0.0.1:9/v1"), PANEL[1]])
    assert any("self-preference" in note and scripted.EVALUATED in note for note in outcome.notes)


def test_external_judges_of_credentialed_answers_when_allowed_and_every_scoring_gets_the_metrics(medisumqa_copy):
    from evalpipe.rescoring import rescore

    rescore(medisumqa_copy, "clue")  # a compatibility scoring's files exist before judging
    external = [Judge("big-judge", "http://93.184.216.34/v1"), Judge("other-judge", "https://judge.example.com/v1")]
    reply = Judges(lambda name, p: json.dumps({"accuracy": 4 if name == "big-judge" else 3, "completeness": 3,
                                                "clarity": 5}))
    with pytest.raises(RunError, match="--allow-external-endpoint"):
        judge(medisumqa_copy, reply, panel=external)
    assert reply.made == {}
    judge(medisumqa_copy, reply, panel=external, allow_external_endpoint=True)
    config = json.loads((medisumqa_copy / "config.json").read_text())
    assert config["judging"]["allow_external_endpoint"] is True
    assert config["judging"]["tasks"]["clue_medisumqa"]["credentialed"] is True
    assert [j["local"] for j in config["judging"]["judges"]] == [False, False]
    for name in ("summary.json", "summary.clue.json"):
        notes = json.loads((medisumqa_copy / name).read_text())["tasks"]["clue_medisumqa"]["notes"]["judging"]
        assert notes["allow_external_endpoint"] is True and notes["credentialed"] is True
    for name in ("metrics.json", "metrics.clue.json"):
        assert json.loads((medisumqa_copy / name).read_text())["clue_medisumqa"]["judge_accuracy"] == 3.5
    rescore(medisumqa_copy, "clue")  # re-scoring a compatibility mode keeps them too
    assert json.loads((medisumqa_copy / "metrics.clue.json").read_text())["clue_medisumqa"]["judge_accuracy"] == 3.5
