"""MCQA honesty: MedMCQA's index base is decided, recorded and printed, or the file is refused with the flag."""

from __future__ import annotations

import asyncio
import json

import pytest

from evalpipe.config import RunConfig
from evalpipe.data.errors import DataError
from evalpipe.pipeline.execute import execute
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task
from tests.support.scripted_backend import ScriptedBackend, last_user_text
from tests.tasks import mcqa_synthetic as syn

NOT_A = [q for q in syn.QUESTIONS if q[2] != "A"]


def _write(tmp_path, rows, base):
    path = tmp_path / "dev.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in syn.medmcqa_records(rows, base)), encoding="utf-8")
    return path


def test_a_file_that_cannot_tell_its_base_is_refused_naming_the_flag(tmp_path):
    rows = [q for q in NOT_A if q[2] != "D"]  # 0-based without A reads exactly like 1-based without D
    assert rows
    path = _write(tmp_path, rows, base=0)
    with pytest.raises(DataError, match=r"dev.json: cop: cannot tell whether cop is 0- or 1-based.*"
                                        r"--task-arg medmcqa:cop_base=0\|1"):
        get_task("medmcqa").load(LoadOptions(paths={"eval": path}, shots=0))


@pytest.mark.parametrize("base", [0, 1])
def test_the_flag_decides_and_is_recorded(tmp_path, base):
    rows = [q for q in NOT_A if q[2] != "D"]
    path = _write(tmp_path, rows, base=base)
    data = get_task("medmcqa").load(LoadOptions(paths={"eval": path}, shots=0, args={"cop_base": base}))
    assert [e.gold for e in data.examples] == [q[2] for q in rows]
    assert data.facts == {"cop_base": base, "cop_base_decided": f"--task-arg medmcqa:cop_base={base}"}
    assert data.note == f"medmcqa: cop is {base}-based (--task-arg medmcqa:cop_base={base})"


def test_a_detected_base_says_which_line_decided(tmp_path):
    path = _write(tmp_path, syn.QUESTIONS[:5], base=0)
    data = get_task("medmcqa").load(LoadOptions(paths={"eval": path}, shots=0))
    assert data.facts["cop_base"] == 0
    assert data.facts["cop_base_decided"].startswith("detected: line ") and "has cop 0" in data.facts["cop_base_decided"]


def test_a_bad_flag_value_is_one_clear_error():
    spec = get_task("medmcqa")
    arg = next(a for a in spec.args if a.name == "cop_base")
    with pytest.raises(ValueError, match="0 or 1"):
        arg.parse("2")


def test_a_zero_based_file_without_answer_a_is_scored_right_with_the_flag(tmp_path):
    """The issue's case: read as 1-based it would shift every answer; with the flag every gold is right."""
    rows = [q for q in NOT_A if q[2] != "D"]
    path = _write(tmp_path, rows, base=0)
    golds = {q[0]: q[2] for q in rows}

    def respond(prompt):
        text = last_user_text(prompt)
        return next(f"Answer: {letter}" for question, letter in golds.items() if question in text)

    config = RunConfig(tasks=("medmcqa",), model="m", base_url="http://127.0.0.1:1/v1", data={"medmcqa": str(path)},
                       task_args={"medmcqa:cop_base": "0"}, shots=0)
    outcome = asyncio.run(execute(config, lambda _: ScriptedBackend(respond, model="m"), tmp_path / "results"))
    assert outcome.metrics["medmcqa"]["accuracy"] == 1.0
    assert "medmcqa: cop is 0-based (--task-arg medmcqa:cop_base=0)" in outcome.notes
    recorded = json.loads((outcome.run_dir.path / "config.json").read_text())
    facts = next(v for k, v in recorded.items() if isinstance(v, dict) and "medmcqa" in v)["medmcqa"]["data_facts"]
    assert facts["cop_base"] == 0


def test_an_answer_cut_inside_its_reasoning_is_its_own_counted_outcome(tmp_path):
    """A reasoning model that ran out of tokens: counted (metric and summary), warned about, never a guess."""
    from evalpipe.results import RunDir
    from evalpipe.terminal import summary_lines

    path = syn.write_medqa(tmp_path / "data")
    answers = {"scurvy": "<think>\nVitamin C deficiency... option C fits, but let me check option", "insulin": "B",
               "opioid": "<think>Naloxone?</think>\nA", "peaked": "D", "forearm": "A"}

    def respond(prompt):
        text = last_user_text(prompt)
        return next(a for k, a in answers.items() if k in text)

    config = RunConfig(tasks=("medqa",), model="m", base_url="http://127.0.0.1:1/v1", data={"medqa": str(path)})
    outcome = asyncio.run(execute(config, lambda _: ScriptedBackend(respond, model="m"), tmp_path / "results"))
    metrics = outcome.metrics["medqa"]
    assert metrics["truncated_in_reasoning"] == pytest.approx(1 / 5)
    assert metrics["parse_failure_rate"] == pytest.approx(1 / 5)
    run = RunDir(outcome.run_dir.path)
    summary = run.read_summary(None)
    assert summary.tasks["medqa"].diagnostics["truncated_in_reasoning"] == 1
    warnings = [text for level, text in summary_lines(run.read_metrics(None), summary) if level == "warn"]
    assert any("medqa: 1 answer(s) truncated in reasoning" in w for w in warnings), warnings
    # the chat request had room for the reasoning (the kind's budget), not the task's 32 tokens
    recorded = json.loads((outcome.run_dir.path / "config.json").read_text())
    tasks = next(v for v in recorded.values() if isinstance(v, dict) and "medqa" in v)
    assert tasks["medqa"]["max_tokens"] == 4096


def test_the_scoring_method_is_shown_and_part_of_the_run_identity(tmp_path):
    """show, the report's runs table and its model labels say log-likelihood; the run name differs."""
    from evalpipe.config import scoring_method
    from evalpipe.report.build import _endpoint
    from evalpipe.report.runs import _labels  # noqa: F401  (the label is built in load_report_runs)

    assert scoring_method({}) == "generated"
    assert scoring_method({"choice_scoring": "loglikelihood"}) == "log-likelihood"
    assert scoring_method({"choice_scoring": "loglikelihood", "prompt_form": "lm-eval"}) == "log-likelihood, lm-eval prompt"
    assert _endpoint({"endpoint": "chat", "choice_scoring": "loglikelihood"}) == "completions (log-likelihood)"
    assert _endpoint({"endpoint": "chat"}) == "chat"
    base = RunConfig(tasks=("medqa",), model="m")
    names = {base.default_run_name(), RunConfig(tasks=("medqa",), model="m", choice_scoring="loglikelihood").default_run_name(),
             RunConfig(tasks=("medqa",), model="m", choice_scoring="loglikelihood", prompt_form="lm-eval").default_run_name()}
    assert len(names) == 3


def test_show_and_report_tell_a_loglikelihood_run_from_a_generated_one(tmp_path):
    from tests.support.fake_openai import FakeOpenAIProcess
    from tests.test_cli import evalpipe

    path = syn.write_medqa(tmp_path / "data")
    script = tmp_path / "answers.json"
    script.write_text(json.dumps({"scurvy": "C", "insulin": "B", "opioid": "A", "peaked": "D", "forearm": "B"}))
    common = ("run", "--task", "medqa", "--data", f"medqa={path}", "--model", "fake-model",
              "--results-dir", str(tmp_path / "results"))
    with FakeOpenAIProcess(latency=0.0, script=script) as server:
        for extra in ((), ("--mcqa-scoring", "loglikelihood")):
            done = evalpipe(*common, *extra, "--base-url", server.url)
            assert done.returncode == 0, done.stderr
    runs = sorted(p for p in (tmp_path / "results").iterdir() if p.is_dir())
    assert len(runs) == 2  # two run directories: the method is part of the identity
    shown = {evalpipe("show", str(r)).stdout for r in runs}
    assert any("answers: log-likelihood" in s for s in shown) and any("answers: generated" in s for s in shown)
    report = evalpipe("report", *map(str, runs), "--out", str(tmp_path / "report"), "--resamples", "50")
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "fake-model [log-likelihood]" in text and "completions (log-likelihood)" in text
