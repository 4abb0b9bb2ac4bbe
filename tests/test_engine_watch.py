"""Watched engines: an engine evalpipe started that dies mid-run stops the run within seconds, with
one line (which engine, how it ended, its last log lines) and exit code 4; answers already received
stay stored and a re-run resumes them.

The dying engine is the stand-in ``vllm serve`` (tests/support/fake_vllm_cli.py) with
``FAKE_VLLM_DIE_AFTER=N``: it answers N requests, then kills itself with SIGSEGV; in process, the
stand-in ``vllm.LLM`` raises vLLM's ``EngineDeadError``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalpipe.cli import app
from evalpipe.cli.common import EXIT_ENGINE_DIED
from evalpipe.engines.server import ManagedServer, ServerSpec, free_port
from evalpipe.engines.watch import EngineDied, death_line, run_watched
from evalpipe.results import RunDir
from tests.test_engines import ENV, _fake_vllm_on_path

REPO = Path(__file__).resolve().parents[1]


class _Dies:
    """An engine that dies ``after_s`` seconds after the watch starts (for run_watched alone)."""

    def __init__(self, after_s: float | None) -> None:
        self.after_s = after_s
        self.start = time.monotonic()

    def died(self) -> EngineDied | None:
        if self.after_s is not None and time.monotonic() - self.start >= self.after_s:
            return EngineDied(death_line("fake", "killed by SIGSEGV", "loading\nggml: fault"))
        return None


def test_run_watched_cancels_the_work_when_an_engine_dies_and_its_cleanup_runs():
    cleaned: list[str] = []

    async def work() -> str:
        try:
            await asyncio.sleep(60)
        finally:
            cleaned.append("store closed")
        return "done"

    started = time.monotonic()
    with pytest.raises(EngineDied, match=r"the fake engine died \(killed by SIGSEGV\).*ggml: fault"):
        asyncio.run(run_watched(work(), [_Dies(0.3)], poll_s=0.05))
    assert time.monotonic() - started < 5
    assert cleaned == ["store closed"]


def test_run_watched_returns_what_the_work_returns_while_the_engine_lives():
    async def work() -> str:
        await asyncio.sleep(0.1)
        return "done"

    assert asyncio.run(run_watched(work(), [_Dies(None)], poll_s=0.02)) == "done"


def test_a_run_that_fails_because_its_engine_died_says_the_engine_died():
    """The run may fail first (its connections refused); the engine's death is the line shown."""
    async def work() -> str:
        raise ConnectionRefusedError("connection refused")

    with pytest.raises(EngineDied, match="SIGSEGV"):
        asyncio.run(run_watched(work(), [_Dies(0.0)], poll_s=0.05))
    with pytest.raises(ConnectionRefusedError):  # and when the engine lives, the run's own error
        asyncio.run(run_watched(work(), [_Dies(None)], poll_s=0.01))


def _dying_vllm_spec(tmp_path: Path, answers: int) -> ServerSpec:
    port = free_port()
    return ServerSpec(
        name="vLLM", command=[sys.executable, "-m", "tests.support.fake_vllm_cli", "serve", "m", "--port", str(port)],
        base_url=f"http://127.0.0.1:{port}/v1", model="m", health_url=f"http://127.0.0.1:{port}/health",
        env={**ENV, "FAKE_VLLM_DIE_AFTER": str(answers)})


def _chat(base_url: str) -> None:
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(base_url + "/chat/completions", body, {"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=10).read()
    except OSError:
        pass


def test_a_server_that_dies_reports_the_signal_and_its_last_log_line(tmp_path):
    spec = _dying_vllm_spec(tmp_path, answers=0)
    server = ManagedServer(spec, startup_timeout_s=30).start()
    try:
        assert server.died() is None
        _chat(spec.base_url)
        deadline = time.monotonic() + 10
        while server.died() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        death = server.died()
        assert death is not None
        line = str(death)
        assert "the vLLM engine died (killed by SIGSEGV)" in line
        assert "EngineCore: segmentation fault in the CPU kernel" in line and "\n" not in line
    finally:
        server.stop()
    assert server.died() is None  # once evalpipe stops it, its exit is no death


def test_a_server_evalpipe_stops_is_no_death(tmp_path):
    spec = _dying_vllm_spec(tmp_path, answers=5)
    with ManagedServer(spec, startup_timeout_s=30) as server:
        pass
    assert server.died() is None


def test_cli_run_stops_when_the_engine_dies_mid_run_and_a_rerun_resumes(tmp_path, monkeypatch):
    """`run --engine vllm`: the engine answers 5 requests, then dies with SIGSEGV. The run stops
    within seconds (not after 7 attempts per pending request), exit 4, one line; the 5 answers are
    stored and a re-run against a working engine sends only the other 7."""
    _fake_vllm_on_path(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_VLLM_DIE_AFTER", "5")
    args = ["run", "--engine", "vllm", "--model", "m", "--task", "ncbi_disease", "--limit", "12",
            "--concurrency", "1", "--results-dir", str(tmp_path / "r"), "--run-name", "w"]
    started = time.monotonic()
    result = CliRunner().invoke(app, args)
    took = time.monotonic() - started
    assert result.exit_code == EXIT_ENGINE_DIED, result.output
    assert took < 30, f"the run took {took:.0f}s to notice its engine died"
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1
    assert "the vLLM engine died (killed by SIGSEGV)" in errors[0]
    assert "EngineCore: segmentation fault in the CPU kernel" in errors[0]
    assert "run the same command again to resume" in errors[0]
    monkeypatch.delenv("FAKE_VLLM_DIE_AFTER")
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert "5 already answered, 7 to send" in again.output
    assert RunDir(tmp_path / "r" / "w").read_metrics()["ncbi_disease"]["n"] == 12


def test_serve_ends_with_the_engine_line_when_its_engine_dies(tmp_path, monkeypatch):
    _fake_vllm_on_path(tmp_path, monkeypatch)
    env = {**os.environ, "FAKE_VLLM_DIE_AFTER": "0"}
    process = subprocess.Popen([sys.executable, "-m", "evalpipe.cli", "serve", "--engine", "vllm", "--model", "m"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        line = process.stdout.readline()
        assert "serves 'm' at http://127.0.0.1:" in line, line
        base_url = line.split(" at ", 1)[1].split()[0]
        _chat(base_url)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == EXIT_ENGINE_DIED
    assert "the vLLM engine died (killed by SIGSEGV)" in err


@pytest.fixture()
def dying_inprocess_vllm(monkeypatch):
    """The stand-in ``vllm`` whose engine dies on its second batch (EngineDeadError, as vLLM raises)."""
    import importlib.util

    standin = REPO / "tests" / "support" / "standin_vllm" / "vllm" / "__init__.py"
    spec = importlib.util.spec_from_file_location("vllm", standin)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "vllm", module)
    spec.loader.exec_module(module)

    class Dying(module.LLM):
        def chat(self, messages, sampling_params=None, use_tqdm=True, **kwargs):
            if self.calls:
                raise module.EngineDeadError()
            return super().chat(messages, sampling_params, use_tqdm=use_tqdm, **kwargs)

    monkeypatch.setattr(module, "LLM", Dying)
    return module


def test_inprocess_vllm_engine_dead_error_stops_the_run_with_the_same_line(tmp_path, dying_inprocess_vllm):
    from evalpipe.backends.vllm_inprocess import VLLMBackend, VLLMConfig
    from evalpipe.store.answers import ResponseStore
    from evalpipe.config import RunConfig
    from evalpipe.pipeline.execute import execute, run_dir_for

    backend = VLLMBackend(VLLMConfig(model="fake", max_batch=4))
    config = RunConfig(tasks=("ncbi_disease",), model="fake", limit=12, concurrency=2)
    with pytest.raises(EngineDied, match=r"the vLLM \(in process\) engine died \(EngineDeadError\).*EngineCore"):
        asyncio.run(execute(config, lambda cfg: backend, tmp_path))
    store = ResponseStore(run_dir_for(config, tmp_path).store_path)
    try:
        assert len(store) == 4  # the first batch's answers are stored
    finally:
        store.close()


def test_cli_inprocess_engine_death_exits_4(tmp_path, dying_inprocess_vllm):
    result = CliRunner().invoke(app, ["run", "--engine", "vllm-inprocess", "--model", "fake", "--task", "ncbi_disease",
                                      "--limit", "12", "--concurrency", "2", "--results-dir", str(tmp_path / "r")])
    assert result.exit_code == EXIT_ENGINE_DIED, result.output
    assert "EngineDeadError" in result.output
