"""Hostile input at the command line: every failure is one line (exit code as the README says), before any
request and before anything is written outside the results directory.

Each test reproduces a probe that once ended in a traceback, a wrong exit code, or a file written in the
wrong place.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalpipe.cli import app
from evalpipe.config import RunConfig
from evalpipe.prompting import PromptRenderer, TemplateError
from evalpipe.records import Example, GenerationParams
from evalpipe.tasks.base import Scoring, TaskSpec

URL = "http://127.0.0.1:9/v1"  # nothing listens there: a request would fail, so none must be made


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=True)


def one_line_error(result, code: int, *needles: str) -> None:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)
    for needle in needles:
        assert needle in result.output, result.output


def run_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["run", "--task", "ncbi_disease", "--base-url", URL, "--model", "m", "--limit", "2",
            "--results-dir", str(tmp_path / "results"), *extra]


@pytest.mark.parametrize("option,value,needle", [
    ("--temperature", "nan", "--temperature"), ("--temperature", "inf", "--temperature"),
    ("--temperature", "-1", "--temperature"), ("--top-p", "nan", "--top-p"), ("--top-p", "0", "--top-p"),
    ("--top-p", "1.5", "--top-p"), ("--max-tokens", "0", "--max-tokens"), ("--max-tokens", "-5", "--max-tokens"),
    ("--context-length", "-10", "--context-length"), ("--timeout", "0", "--timeout"),
    ("--timeout", "nan", "--timeout"), ("--max-retries", "-1", "--max-retries"),
])
def test_bad_numbers_are_usage_errors_before_anything_is_written(tmp_path, option, value, needle):
    result = invoke(*run_args(tmp_path, option, value))
    one_line_error(result, 2, needle)
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("name", ["../../x", "/tmp/evalpipe-absolute", ".", "..", "a\nb", "x" * 300, "a/b", ""])
def test_run_names_cannot_leave_the_results_directory(tmp_path, name):
    result = invoke(*run_args(tmp_path, "--run-name", name))
    one_line_error(result, 2, "--run-name")
    assert not (tmp_path / "x").exists() and not Path("/tmp/evalpipe-absolute").exists()
    assert not (tmp_path / "results").exists()


def test_a_results_directory_that_is_a_file_or_unwritable_is_one_line(tmp_path):
    blocker = tmp_path / "results"
    blocker.write_text("not a folder")
    result = invoke(*run_args(tmp_path))
    one_line_error(result, 1, "cannot create the run directory", "must be a folder")
    if os.geteuid() == 0:
        pytest.skip("root can write anywhere: the unwritable case cannot be set up")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    result = invoke(*[a if a != str(blocker) else str(locked) for a in run_args(tmp_path)])
    one_line_error(result, 1, "locked")


def test_a_damaged_store_is_one_line_naming_the_file(tmp_path):
    from evalpipe.records import Completion
    from tests.report.support import make_run

    run_dir = make_run(tmp_path, "m", lambda prompt: "<response>x</response>", limit=2)
    (run_dir / "responses.sqlite").write_bytes(b"this is not a database" * 100)
    for path in run_dir.glob("responses.sqlite-*"):
        path.unlink()
    result = invoke("score", str(run_dir))
    one_line_error(result, 1, "responses.sqlite", "not a readable SQLite database")
    assert Completion  # (imported for clarity of what the store holds)


def test_broken_metrics_json_names_the_file(tmp_path):
    from tests.report.support import make_run

    run_dir = make_run(tmp_path, "m", lambda prompt: "<response>x</response>", limit=2)
    (run_dir / "metrics.json").write_text("{broken")
    result = invoke("show", str(run_dir))
    one_line_error(result, 1, "metrics.json", "not valid JSON")


def test_a_missing_data_dir_for_a_suite_is_an_error_not_a_skip(tmp_path):
    result = invoke("run", "--suite", "clue", "--data-dir", str(tmp_path / "typo"), "--base-url", URL,
                    "--model", "m", "--results-dir", str(tmp_path / "results"))
    one_line_error(result, 1, "--data-dir", "typo", "does not exist")


def _spec(template: str) -> TaskSpec:
    def load(options):
        raise AssertionError

    return TaskSpec(name="t", description="", template=template, load=load, shot_target=str,
                    scorings={"default": Scoring(parse=None, score=None, empty=None, samplewise=True)},  # type: ignore[arg-type]
                    metrics=(), max_tokens=8, kind="custom")


@pytest.mark.parametrize("body,needle", [
    ("{{ 1/0 }}", "division by zero"),
    ("{{ 'a' + 1 }}", "can only concatenate str"),
    ("{% for i in range(10**9) %}{% endfor %}", "range too big"),
    ("{% macro r(n) %}{{ r(n) }}{% endmacro %}{{ r(1) }}", "recursion"),
])
def test_a_runtime_error_inside_a_template_is_one_line_with_its_line(tmp_path, body, needle):
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    (prompts / "t.j2").write_text("{%- macro prompt(example, shots) -%}\nline two\n" + body + "\n{%- endmacro -%}\n")
    renderer = PromptRenderer(_spec("t.j2"), [], GenerationParams(max_tokens=8), prompts_dir=prompts)
    with pytest.raises(TemplateError) as err:
        renderer.render(Example("e", {}, None))
    message = str(err.value)
    assert "\n" not in message and "t.j2" in message and "line 3" in message and needle in message.lower()


def test_nan_never_reaches_config_json():
    with pytest.raises(ValueError, match="temperature"):
        RunConfig(tasks=("t",), model="m", temperature=float("nan"))
    assert json.dumps(RunConfig(tasks=("t",), model="m").to_json(), allow_nan=False)
