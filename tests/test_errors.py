"""User errors are one line and exit 1 (or their own code); anything else is a bug, shown as one.

A bare KeyError/ValueError/TypeError from deep in a run must never be dressed up as a user's mistake
(it hid bugs behind one line): it gets its traceback, a request to report it, and exit 70.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe import __version__
from evalpipe.errors import (EXIT_BUG, EXIT_ENDPOINT_GONE, EngineError, EndpointError, EvalpipeError, InputError,
                             RunDirProblem, UsageError)
from tests.support.fake_openai import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[1]


def evalpipe_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("EVALPIPE_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "evalpipe.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def assert_one_line(result: subprocess.CompletedProcess, code: int, words: str) -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_user_mistakes_are_one_line_and_exit_1(tmp_path):
    assert_one_line(evalpipe_cli("run", "--task", "ncbi_diseas", "--model", "m", "--base-url",
                                 "http://127.0.0.1:9/v1"), 1, "unknown task 'ncbi_diseas'")
    assert_one_line(evalpipe_cli("run", "--suite", "nosuch", "--model", "m"), 1, "unknown suite 'nosuch'")
    assert_one_line(evalpipe_cli("show", str(tmp_path)), 1, "no metrics yet")
    assert_one_line(evalpipe_cli("score", str(tmp_path)), 1, "not a run directory")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{oops")
    assert_one_line(evalpipe_cli("score", str(broken)), 1, "not valid JSON")
    task_file = tmp_path / "mine.yaml"
    task_file.write_text("name: mine\nkind: no_such_kind\n")
    result = evalpipe_cli("run", "--task-file", str(task_file), "--model", "m", "--base-url", "http://127.0.0.1:9/v1")
    assert_one_line(result, 1, str(task_file))


def test_an_option_out_of_range_is_a_usage_error_exit_2():
    """RunConfig's own check, shown by the CLI as the usage error it always was."""
    result = evalpipe_cli("run", "--task", "ncbi_disease", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
                          "--max-retries", "-1")
    assert result.returncode == 2 and "--max-retries must be >= 0" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture()
def server():
    with FakeOpenAIServer() as fake:
        yield fake


def _run_in_process(server: FakeOpenAIServer, results: Path, capsys) -> tuple[int, str]:
    from evalpipe.cli import main

    with pytest.raises(SystemExit) as done:
        main(["run", "--task", "ncbi_disease", "--model", "fake-model", "--base-url", server.url, "--limit", "3",
              "--results-dir", str(results)])
    return done.value.code, capsys.readouterr().err


@pytest.mark.parametrize("error", [KeyError("boom"), ValueError("boom"), TypeError("boom")])
def test_a_bug_deep_in_a_run_shows_its_traceback_and_asks_for_a_report(server, tmp_path, capsys, monkeypatch,
                                                                       error):
    """Raised after every answer arrived (before scoring): the answers stay stored."""
    import evalpipe.pipeline.execute

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(evalpipe.pipeline.execute, "check_unchanged", broken)
    code, stderr = _run_in_process(server, tmp_path, capsys)
    assert code == EXIT_BUG
    assert "Traceback (most recent call last)" in stderr and f"{type(error).__name__}: " in stderr
    assert "in broken" in stderr  # the frame that raised: the traceback is the real one
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"bug: this is a bug in evalpipe {__version__}") and "evalpipe run --task ncbi_disease" in last
    assert not last.startswith("error:")
    assert server.stats()["total_requests"] == 3  # the answers came, and are stored
    monkeypatch.undo()
    code, stderr = _run_in_process(server, tmp_path, capsys)
    assert code == 0, stderr
    assert server.stats()["total_requests"] == 3  # resumed from the store: nothing asked again


def test_a_user_error_raised_deep_in_a_run_keeps_its_own_exit_code(server, tmp_path, capsys, monkeypatch):
    import evalpipe.pipeline.execute
    from evalpipe.backends.liveness import EndpointGone

    def gone(*args, **kwargs):
        raise EndpointGone("http://127.0.0.1:1/v1 stopped answering; answers so far are stored")

    monkeypatch.setattr(evalpipe.pipeline.execute, "check_endpoint_policy", gone)
    code, stderr = _run_in_process(server, tmp_path, capsys)
    assert code == EXIT_ENDPOINT_GONE
    assert stderr.strip().splitlines() == ["error: http://127.0.0.1:1/v1 stopped answering; answers so far are stored"]


def test_the_report_line_quotes_no_credentials():
    from evalpipe.cli.common import shown_command

    shown = shown_command(["run", "--base-url", "http://me:s3cret@10.0.0.1:8000/v1?key=abc", "--model", "m x"])
    assert "s3cret" not in shown and "abc" not in shown and "'m x'" in shown


def _classes() -> list[tuple[type, type, type]]:
    """(class, the EvalpipeError kind it is, the base it had before and keeps)."""
    from evalpipe.backends.base import BackendError
    from evalpipe.backends.liveness import EndpointGone
    from evalpipe.context_fit import ContextTooSmall
    from evalpipe.store.answers import StoreError
    from evalpipe.data.errors import DataError
    from evalpipe.engines.llamacpp import EngineUnavailable
    from evalpipe.engines.server import ServerStartError
    from evalpipe.engines.watch import EngineDied
    from evalpipe.outcome import RunError
    from evalpipe.prompting import TemplateError
    from evalpipe.results import NotARunDir, RunDirBusy, RunDirError
    from evalpipe.tasks.taskfile.source import TaskFileError

    return [
        (DataError, InputError, ValueError), (TaskFileError, InputError, ValueError),
        (TemplateError, InputError, ValueError), (ContextTooSmall, UsageError, ValueError),
        (BackendError, EndpointError, RuntimeError), (EndpointGone, EndpointError, RuntimeError),
        (EngineUnavailable, EngineError, RuntimeError), (ServerStartError, EngineError, RuntimeError),
        (EngineDied, EngineError, RuntimeError), (RunDirBusy, RunDirProblem, RuntimeError),
        (RunDirError, RunDirProblem, RuntimeError), (StoreError, RunDirProblem, RuntimeError),
        (NotARunDir, RunDirProblem, FileNotFoundError), (RunError, EvalpipeError, RuntimeError),
    ]


def test_every_user_facing_error_is_an_evalpipe_error_and_keeps_its_old_base():
    for cls, kind, old_base in _classes():
        assert issubclass(cls, kind) and issubclass(cls, EvalpipeError), cls
        assert issubclass(cls, old_base), cls  # code that catches the old base still catches it


def test_exit_codes_of_the_errors_that_have_their_own():
    from evalpipe.backends.liveness import EndpointGone
    from evalpipe.cli.common import EXIT_ENDPOINT_GONE as CLI_GONE, EXIT_ENGINE_DIED as CLI_DIED
    from evalpipe.engines.watch import EngineDied

    assert (EngineDied.exit_code, EndpointGone.exit_code, UsageError.exit_code) == (4, 5, 1)
    assert (CLI_DIED, CLI_GONE) == (4, 5)


def test_a_user_error_no_command_caught_is_still_one_line(monkeypatch, capsys, tmp_path):
    """`cli.main` is the last line of defence: an EvalpipeError that escapes a command is one line
    with the error's own exit code, never a traceback."""
    import evalpipe.cli.reports
    from evalpipe.cli import main
    from evalpipe.engines.watch import EngineDied

    def died(*args, **kwargs):
        raise EngineDied("llama.cpp server: killed by SIGKILL; answers so far are stored")

    monkeypatch.setattr(evalpipe.cli.reports, "output_folder", died)
    with pytest.raises(SystemExit) as done:
        main(["report", str(tmp_path), "--out", str(tmp_path / "out")])
    assert done.value.code == 4
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: llama.cpp server: killed by SIGKILL; answers so far are stored"]
