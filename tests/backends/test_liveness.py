"""An endpoint that dies mid-run stops the run with one line (exit 5) instead of retrying every
pending request for minutes; a slow, timeout-heavy server and one dead replica beside a live one
do not trip it. The endpoint is the loopback fake server, shut down mid-run."""

from __future__ import annotations

import asyncio
import re
import threading
import time

import pytest
from typer.testing import CliRunner

from evalpipe.backends.factory import make_backend
from evalpipe.backends.liveness import EndpointGone, Liveness
from evalpipe.store.answers import ResponseStore
from evalpipe.cli import app
from evalpipe.cli.common import EXIT_ENDPOINT_GONE
from evalpipe.config import RunConfig
from evalpipe.engines.server import free_port
from evalpipe.pipeline.execute import execute, run_dir_for
from tests.support.fake_openai import FakeOpenAIServer, echo_responder


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_gone_only_after_enough_refused_attempts_and_enough_time():
    clock = Clock()
    live = Liveness(after_s=30, min_failures=5, clock=clock)
    for _ in range(10):  # many refusals within a second: not yet (a restart, a blip)
        live.refused("http://h/v1", "Connection refused")
    clock.now = 29.0
    live.refused("http://h/v1", "Connection refused")
    clock.now = 31.0
    with pytest.raises(EndpointGone, match=r"http://h/v1 stopped answering: 12 attempts in a row could not connect over 31s"):
        live.refused("http://h/v1", "Connection refused")
    with pytest.raises(EndpointGone):  # every other worker stops at once
        live.check()


def test_any_reply_or_timeout_breaks_the_streak():
    clock = Clock()
    live = Liveness(after_s=10, min_failures=3, clock=clock)
    for step in range(20):
        clock.now = step * 5.0
        live.refused("u", None)
        live.alive()  # a 500, a 429 or a timeout between the refusals: the server is there
    live.check()
    live.refused("u", None)
    live.refused("u", None)
    clock.now += 100  # a long time, but only 3 refusals: fewer than min_failures
    live.answered()
    live.check()


def test_zero_means_never():
    clock = Clock()
    live = Liveness(after_s=0, clock=clock)
    for step in range(100):
        clock.now = step * 10.0
        live.refused("u", None)


def _stop_after(server: FakeOpenAIServer, answers: int) -> threading.Event:
    """The server answers ``answers`` requests, then is shut down (from another thread)."""
    count = 0
    enough = threading.Event()

    def responder(body):
        nonlocal count
        count += 1
        if count >= answers:
            enough.set()
        return echo_responder(body)

    server.responder = responder
    threading.Thread(target=lambda: (enough.wait(60), time.sleep(0.05), server.stop()), daemon=True).start()
    return enough


def test_a_server_shut_down_mid_run_stops_the_run_and_keeps_its_answers(tmp_path):
    server = FakeOpenAIServer(models=("m",), latency=0.02).start()
    _stop_after(server, 6)
    config = RunConfig(tasks=("ncbi_disease",), model="m", base_url=server.url, limit=40, concurrency=2,
                       unreachable_after_s=2.0)
    started = time.monotonic()
    with pytest.raises(EndpointGone, match="stopped answering"):
        asyncio.run(execute(config, make_backend, tmp_path))
    took = time.monotonic() - started
    assert took < 30, f"took {took:.0f}s: the pending requests were retried one by one"
    store = ResponseStore(run_dir_for(config, tmp_path).store_path)
    try:
        assert 6 <= len(store) < 40  # the answers before the shutdown (and those in flight then), no more
    finally:
        store.close()


def test_a_slow_server_whose_requests_time_out_does_not_trip_it(tmp_path):
    with FakeOpenAIServer(models=("m",), latency=3.0) as server:
        config = RunConfig(tasks=("ncbi_disease",), model="m", base_url=server.url, limit=3, concurrency=3,
                           timeout_s=0.3, max_retries=2, unreachable_after_s=0.5)
        outcome = asyncio.run(execute(config, make_backend, tmp_path))
    assert outcome.tasks[0].metrics["errors"] == 3  # every request timed out, counted as failed: no stop


def test_one_dead_replica_beside_a_live_one_does_not_trip_it(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    with FakeOpenAIServer(models=("m",), latency=0.05) as server:
        config = RunConfig(tasks=("ncbi_disease",), model="m", base_url=server.url, replicas=(dead,), limit=12,
                           concurrency=2, max_retries=1, unreachable_after_s=0.5)

        class NoPreflight:  # the dead replica would fail the start-up check; here it dies after it
            def __init__(self, backend):
                self.backend = backend

            def __getattr__(self, name):
                return getattr(self.backend, name)

            async def preflight(self):
                return None

        outcome = asyncio.run(execute(config, lambda c: NoPreflight(make_backend(c)), tmp_path))
    assert outcome.tasks[0].metrics["n"] == 12 and outcome.tasks[0].metrics["errors"] == 0


def test_cli_exits_5_with_one_line_and_a_rerun_resumes(tmp_path):
    port = free_port()
    server = FakeOpenAIServer(models=("m",), latency=0.02, port=port).start()
    _stop_after(server, 5)
    args = ["run", "--task", "ncbi_disease", "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1",
            "--limit", "20", "--concurrency", "1", "--unreachable-after", "2", "--results-dir", str(tmp_path),
            "--run-name", "gone"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == EXIT_ENDPOINT_GONE, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "stopped answering" in errors[0], errors
    answered = int(re.search(r"(\d+) answered before", errors[0]).group(1))
    assert 5 <= answered <= 8  # those before the shutdown, and any in flight then
    with FakeOpenAIServer(models=("m",), port=port):
        again = CliRunner().invoke(app, args)
    assert again.exit_code == 0, again.output
    assert f"{answered} already answered, {20 - answered} to send" in again.output
