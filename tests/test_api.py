"""The Python API (`evalpipe.evaluate`, `rescore`, `load_run`) end to end against the loopback fake server.

A run made from Python must be the run `evalpipe run` makes: same run directory, same numbers,
resumable and re-scorable by either; a mistake is a typed error raised before anything is sent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import evalpipe
from evalpipe.config import RunConfig
from evalpipe.errors import EvalpipeError, InputError, UnknownName, UsageError
from tests.support.fake_openai import FakeOpenAIServer

TASK = "ncbi_disease"


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture(scope="module")
def first_run(server, tmp_path_factory):
    """One evaluation of 6 samples, and how many requests it cost."""
    results = tmp_path_factory.mktemp("api") / "results"
    before = server.stats()["total_requests"]
    result = evalpipe.evaluate(TASK, model="fake-model", base_url=server.url, limit=6, results_dir=results,
                               concurrency=2)
    return result, server.stats()["total_requests"] - before, results


def test_evaluate_returns_what_the_run_directory_holds(first_run):
    result, requests, results = first_run
    assert requests == 6  # one generation request per sample
    assert result.run_dir.parent == results
    on_disk = json.loads((result.run_dir / "metrics.json").read_text())
    assert {task: dict(values) for task, values in result.metrics.items()} == on_disk
    assert result.tasks == (TASK,)
    assert result.config.limit == 6 and result.config.concurrency == 2 and result.config.model == "fake-model"
    coverage = result.coverage(TASK)
    assert coverage["samples"] == 6 and coverage["answered"] == 6
    assert result.unanswered == 0
    assert result.summary.run.sent == 6 and result.summary.run.cached == 0


def test_the_result_is_frozen(first_run):
    result, _, _ = first_run
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.run_dir = Path("elsewhere")  # type: ignore[misc]
    with pytest.raises(TypeError):
        result.metrics[TASK]["f1"] = 1.0  # type: ignore[index]


def test_the_same_call_resumes_and_sends_nothing(server, first_run):
    result, _, results = first_run
    before = server.stats()["total_requests"]
    again = evalpipe.evaluate([TASK], model="fake-model", base_url=server.url, limit=6, results_dir=results,
                              concurrency=2)
    assert again.run_dir == result.run_dir
    assert server.stats()["total_requests"] == before
    assert again.metrics == result.metrics
    assert again.summary.run.sent == 0 and again.summary.run.cached == 6


def test_the_command_line_finds_the_run_the_api_made(server, first_run, capsys):
    """Both build their config with one function: same options, same run directory, nothing sent."""
    from evalpipe.cli import main

    result, _, results = first_run
    before = server.stats()["total_requests"]
    with pytest.raises(SystemExit) as done:
        main(["run", "--task", TASK, "--model", "fake-model", "--base-url", server.url, "--limit", "6",
              "--concurrency", "2", "--results-dir", str(results)])
    assert done.value.code == 0, capsys.readouterr().err
    assert sorted(p.name for p in results.iterdir() if p.is_dir()) == [result.run_dir.name]
    assert server.stats()["total_requests"] == before
    assert evalpipe.load_run(result.run_dir).metrics == result.metrics


def test_rescore_and_load_run_agree_with_the_run(first_run):
    result, _, _ = first_run
    rescored = evalpipe.rescore(result.run_dir)
    assert rescored.metrics == result.metrics
    assert rescored.summary.run.rescored is True
    loaded = evalpipe.load_run(str(result.run_dir))
    assert loaded.metrics == result.metrics and loaded.config == result.config


def test_evaluate_works_inside_a_running_event_loop(server, tmp_path):
    """A notebook runs an event loop: evaluate() must still work there (asyncio.run would refuse)."""
    async def in_a_notebook():
        return evalpipe.evaluate(TASK, model="fake-model", base_url=server.url, limit=2,
                                 results_dir=tmp_path, progress=True)

    result = asyncio.run(in_a_notebook())
    assert result.coverage(TASK)["answered"] == 2


@pytest.mark.parametrize(("options", "message"), [
    ({"temperature": -1.0}, "--temperature must be a finite number >= 0"),
    ({"concurrency": 0}, "--concurrency must be at least 1"),
    ({"endpoint": "chatty"}, "--endpoint must be chat or completions"),
    ({"engine": "llamacpp"}, "give either --engine"),
    ({"temprature": 0.5}, "unknown option(s) temprature"),
    ({"limit": 0}, "--limit must be at least 1"),
])
def test_a_bad_option_is_a_usage_error_before_anything_is_sent(server, tmp_path, options, message):
    before = server.stats()["total_requests"]
    kwargs = {"model": "fake-model", "base_url": server.url, "results_dir": tmp_path / "r", **options}
    with pytest.raises(UsageError) as raised:
        evalpipe.evaluate(TASK, **kwargs)
    assert message in str(raised.value)
    assert server.stats()["total_requests"] == before
    assert not (tmp_path / "r").exists()


def test_an_unknown_task_is_a_usage_error_and_still_a_key_error(server, tmp_path):
    with pytest.raises(UnknownName) as raised:
        evalpipe.evaluate("ncbi_diseas", model="fake-model", base_url=server.url, results_dir=tmp_path)
    assert isinstance(raised.value, KeyError) and isinstance(raised.value, UsageError)
    assert str(raised.value).startswith("unknown task 'ncbi_diseas'")  # unquoted, unlike a KeyError


def test_load_run_of_a_folder_that_is_no_run(tmp_path):
    with pytest.raises(EvalpipeError):
        evalpipe.load_run(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        evalpipe.load_run(tmp_path)


def test_run_config_validates_itself():
    """The Python API gets the checks the CLI had: a RunConfig that no run can use cannot be made."""
    good = RunConfig(tasks=(TASK,), model="m")
    with pytest.raises(UsageError, match="--max-retries must be >= 0"):
        dataclasses.replace(good, max_retries=-1)
    with pytest.raises(UsageError, match="--top-p must be in"):
        RunConfig(tasks=(TASK,), model="m", top_p=1.5)
    with pytest.raises(UsageError) as raised:
        RunConfig(tasks=(TASK,), model="m", timeout_s=0)
    assert raised.value.option == "--timeout" and isinstance(raised.value, ValueError)
    # a recorded config is checked too, when it is read back
    with pytest.raises(UsageError, match="--endpoint"):
        RunConfig.from_json({**good.to_json(), "endpoint": "rest"})


def test_import_evalpipe_stays_cheap():
    """The API is imported on first use: `import evalpipe` loads none of its modules (the CLI's
    start-up and every `python -c 'import evalpipe'` pay for nothing)."""
    code = ("import sys, evalpipe; print(sorted(m for m in sys.modules if m.startswith('evalpipe.'))); "
            "evalpipe.evaluate; print('evalpipe.api' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.split("\n")
    assert out[0] == "[]" and out[1] == "True"
