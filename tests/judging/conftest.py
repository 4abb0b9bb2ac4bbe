"""Fixtures of the judging tests: a loopback fake server answering for the evaluated model and two
scripted judges, and finished runs to judge (built once per module, copied per test)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalpipe.config import RunConfig
from evalpipe.pipeline.execute import execute
from tests.judging import scripted
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.scripted_backend import ScriptedBackend

REPO = Path(__file__).resolve().parents[2]
CLUE_FIXTURES = REPO / "tests" / "clue" / "fixtures"


def evalpipe(*args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """The `evalpipe` command as a user runs it."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    full_env.pop("EVALPIPE_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "evalpipe.cli", *args], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def model_requests(server: FakeOpenAIServer, model: str) -> int:
    """Generation requests the server received for ``model``."""
    return sum(1 for r in server.requests if r.endpoint is not None and isinstance(r.body, dict)
               and r.body.get("model") == model)


@pytest.fixture(scope="session")
def server():
    with FakeOpenAIServer(models=(scripted.EVALUATED, *scripted.JUDGES), responder=scripted.responder) as fake:
        yield fake


@pytest.fixture(scope="session")
def questions(tmp_path_factory) -> Path:
    return scripted.write_questions(tmp_path_factory.mktemp("data") / "questions.jsonl")


@pytest.fixture(scope="session")
def answered_run(server, questions, tmp_path_factory) -> Path:
    """A finished evaluation of the 20 scripted questions, made by `evalpipe run` against the server."""
    results = tmp_path_factory.mktemp("results")
    result = evalpipe("run", "--task", "huatuo_generation", "--data", f"huatuo_generation={questions}",
                      "--base-url", server.url, "--model", scripted.EVALUATED, "--results-dir", str(results),
                      "--run-name", "answered")
    assert result.returncode == 0, result.stderr
    return results / "answered"


@pytest.fixture()
def run_copy(answered_run, tmp_path) -> Path:
    """A private copy of the answered run (each test judges its own)."""
    return Path(shutil.copytree(answered_run, tmp_path / "run"))


@pytest.fixture(scope="session")
def medisumqa_run(tmp_path_factory) -> Path:
    """A finished run of a credentialed task (synthetic MeDiSumQA fixture), answered in process."""
    root = tmp_path_factory.mktemp("credentialed")
    config = RunConfig(tasks=("clue_medisumqa",), model="local-model", base_url="http://127.0.0.1:1/v1",
                       data_dir=str(CLUE_FIXTURES), run_name="medisumqa",
                       metric_options={"umls_extractor": "none"})
    outcome = asyncio.run(execute(config, lambda c: ScriptedBackend(lambda p: "The patient should rest.",
                                                                    model="local-model"), root))
    return outcome.run_dir.path


@pytest.fixture()
def medisumqa_copy(medisumqa_run, tmp_path) -> Path:
    return Path(shutil.copytree(medisumqa_run, tmp_path / "medisumqa"))
