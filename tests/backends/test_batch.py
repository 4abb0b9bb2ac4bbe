"""``run --batch`` through the OpenAI Batch API (the ``openai`` SDK) against a loopback fake
(:mod:`tests.support.fake_batch`), ``batch-export``/``batch-import``, and the cost of a run.

Every run is a real ``evalpipe`` subprocess, as a user runs it; the fake server lives in a thread
(or, for the kill-and-resume test, in a process of its own that outlives the killed run).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.fake_batch import FakeBatchProcess, FakeBatchServer, completion_body, tagging_responder

pytest.importorskip("openai")

REPO = Path(__file__).resolve().parents[2]
MODEL = "fake-model"
FAST = ("--batch-poll", "0.05")


def evalpipe(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": "sk-batch-test-0123456789"}
    env.pop("EVALPIPE_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "evalpipe.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def ncbi(url: str, results: Path, name: str, *extra: str, limit: int = 12) -> subprocess.CompletedProcess:
    return evalpipe("run", "--task", "ncbi_disease", "--base-url", url, "--model", MODEL, "--limit", str(limit),
                    "--results-dir", str(results), "--run-name", name, *extra)


def metrics(results: Path, name: str) -> dict:
    return json.loads((results / name / "metrics.json").read_text())["ncbi_disease"]


def batches_of(results: Path, name: str) -> list[tuple]:
    db = sqlite3.connect(results / name / "responses.sqlite")
    try:
        return db.execute("SELECT id, status, requests, done FROM batches ORDER BY created").fetchall()
    finally:
        db.close()


def test_batch_run_of_100_sentences_sends_no_direct_request_and_matches_the_direct_f1(tmp_path):
    with FakeBatchServer() as server:
        direct = ncbi(server.url, tmp_path, "direct", limit=100)
        assert direct.returncode == 0, direct.stderr
        sent_directly = server.direct_requests
        assert sent_directly == 100

        batched = ncbi(server.url, tmp_path, "batched", "--batch", "--batch-size", "40", *FAST, limit=100)
        assert batched.returncode == 0, batched.stderr
        assert server.direct_requests == sent_directly  # not one direct request more
        assert server.batch_lines == 100 and len(server.batches) == 3  # 40 + 40 + 20
        assert {b["request_counts"]["total"] for b in server.batches.values()} == {40, 20}
        port = server.port  # the same endpoint again below (a run never reuses another endpoint's answers)
    a, b = metrics(tmp_path, "direct"), metrics(tmp_path, "batched")
    assert a["f1"] > 0 and b["f1"] == a["f1"] and b["n"] == 100 and b["errors"] == 0
    assert [r[1:] for r in batches_of(tmp_path, "batched")] == [("completed", 40, 1), ("completed", 40, 1),
                                                                  ("completed", 20, 1)]
    # a progress line per change: status, counts, elapsed
    assert "in_progress, 0/40 done, 0 failed" in batched.stderr and "s elapsed" in batched.stderr
    # every answer knows its batch
    samples = [json.loads(line) for line in (tmp_path / "batched" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 100 and all(s["answer"] for s in samples)
    # the same command again: everything is stored, nothing is submitted
    with FakeBatchServer(port=port) as server:
        again = ncbi(server.url, tmp_path, "batched", "--batch", "--batch-size", "40", *FAST, limit=100)
        assert again.returncode == 0, again.stderr
        assert not server.batches and server.direct_requests == 0
    assert metrics(tmp_path, "batched")["f1"] == a["f1"]


def test_killed_while_polling_the_same_command_resumes_the_same_batch(tmp_path):
    with FakeBatchProcess("--hold") as server:
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        env.pop("EVALPIPE_BASE_URL", None)
        args = [sys.executable, "-m", "evalpipe.cli", "run", "--task", "ncbi_disease", "--base-url", server.url,
                "--model", MODEL, "--limit", "10", "--results-dir", str(tmp_path), "--run-name", "held", "--batch",
                *FAST]
        first = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                batches = server.stats()["batches"]
                if batches and all(b["status"] == "in_progress" and b["polls"] >= 3 for b in batches.values()):
                    break
                time.sleep(0.05)
            else:
                pytest.fail(f"the batch was never polled in progress: {server.stats()}")
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        (batch_id,) = server.stats()["batches"]
        polls_before = server.stats()["batches"][batch_id]["polls"]
        assert batches_of(tmp_path, "held") == [(batch_id, "in_progress", 10, 0)]
        assert not (tmp_path / "held" / "metrics.json").exists()

        server.admin("/_admin/release", {})
        second = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
        assert second.returncode == 0, second.stderr
        stats = server.stats()
        assert list(stats["batches"]) == [batch_id]  # no second submission
        assert stats["batch_lines"] == 10 and stats["direct_requests"] == 0
        assert stats["batches"][batch_id]["polls"] > polls_before  # the same batch polled again
        assert f"resuming 1 batch(es) from the store: {batch_id}" in second.stderr
    assert batches_of(tmp_path, "held") == [(batch_id, "completed", 10, 1)]
    assert metrics(tmp_path, "held")["errors"] == 0


def test_failed_lines_go_in_a_new_batch_or_as_direct_requests(tmp_path):
    # lines of sentences holding "the" fail once with HTTP 500 in the error file
    with FakeBatchServer(fail_marker=" the ") as server:
        retried = ncbi(server.url, tmp_path, "again", "--batch", *FAST)
        assert retried.returncode == 0, retried.stderr
        failed_once = sum(server.failed_seen.values())
        assert failed_once > 0 and len(server.batches) == 2 and server.direct_requests == 0
        assert server.batch_lines == 12 + failed_once
        assert f"{failed_once} failed line(s): sending them again in a new batch (round 1)" in retried.stderr
    assert metrics(tmp_path, "again")["errors"] == 0

    with FakeBatchServer(fail_marker=" the ") as server:
        direct = ncbi(server.url, tmp_path, "direct", "--batch", "--batch-retry", "direct", *FAST)
        assert direct.returncode == 0, direct.stderr
        assert len(server.batches) == 1 and server.direct_requests == sum(server.failed_seen.values()) > 0
    assert metrics(tmp_path, "direct")["errors"] == 0 and metrics(tmp_path, "direct")["f1"] == metrics(
        tmp_path, "again")["f1"]

    with FakeBatchServer(fail_marker=" the ") as server:
        none = ncbi(server.url, tmp_path, "none", "--batch", "--batch-retry", "none", *FAST)
        assert none.returncode == 3  # samples without an answer
        assert metrics(tmp_path, "none")["errors"] == sum(server.failed_seen.values())
        summary = json.loads((tmp_path / "none" / "summary.json").read_text())
        assert any("batch line failed: HTTP 500: server busy" in kind
                   for kind in summary["tasks"]["ncbi_disease"]["error_kinds"])


def test_an_expired_batch_is_reported_and_keeps_its_answers(tmp_path):
    with FakeBatchServer(expire=True) as server:
        result = ncbi(server.url, tmp_path, "expired", "--batch", *FAST, limit=10)
        assert result.returncode == 3, result.stderr
        (batch_id,) = server.batches
        port = server.port
    assert f"batch {batch_id} expired: 5 of 10 answers kept; 5 without an answer" in result.stderr
    assert metrics(tmp_path, "expired")["errors"] == 5
    summary = json.loads((tmp_path / "expired" / "summary.json").read_text())
    assert any("expired" in note for note in summary["run"]["notes"])
    # the same command asks the five again, in a new batch, of the same endpoint
    with FakeBatchServer(port=port) as server:
        again = ncbi(server.url, tmp_path, "expired", "--batch", *FAST, limit=10)
        assert again.returncode == 0, again.stderr
        assert server.batch_lines == 5
    assert metrics(tmp_path, "expired")["errors"] == 0


def test_cost_is_tokens_times_prices_and_answers_from_the_store_cost_nothing_new(tmp_path):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({MODEL: {"input": 2.5, "output": 10.0, "batch_discount": 0.5}}))
    with FakeBatchServer() as server:
        first = ncbi(server.url, tmp_path, "priced", "--batch", *FAST, "--prices", str(prices), limit=6)
        assert first.returncode == 0, first.stderr
        samples = [json.loads(line) for line in (tmp_path / "priced" / "samples.jsonl").read_text().splitlines()]
        prompt = sum(s["usage"]["prompt_tokens"] for s in samples)
        completion = sum(s["usage"]["completion_tokens"] for s in samples)
        expected = (prompt * 2.5 + completion * 10.0) / 1e6 * 0.5
        assert metrics(tmp_path, "priced")["cost_usd"] == pytest.approx(expected, rel=1e-12)
        cost = json.loads((tmp_path / "priced" / "summary.json").read_text())["run"]["cost"]
        assert cost["answers_usd"] == pytest.approx(expected) and cost["this_invocation_usd"] == pytest.approx(expected)
        config = json.loads((tmp_path / "priced" / "config.json").read_text())["config"]
        assert config["prices"] == {"input": 2.5, "output": 10.0, "cached_input": None, "batch_discount": 0.5,
                                    "source": str(prices)}

        # four more samples, by direct request: only they cost this invocation, at the full price
        more = ncbi(server.url, tmp_path, "priced", *FAST, "--prices", str(prices), limit=10)
        assert more.returncode == 0, more.stderr
    samples = [json.loads(line) for line in (tmp_path / "priced" / "samples.jsonl").read_text().splitlines()][6:]
    new = sum(s["usage"]["prompt_tokens"] * 2.5 + s["usage"]["completion_tokens"] * 10.0 for s in samples) / 1e6
    cost = json.loads((tmp_path / "priced" / "summary.json").read_text())["run"]["cost"]
    assert cost["this_invocation_usd"] == pytest.approx(new)
    assert cost["answers_usd"] == pytest.approx(expected + new)
    assert metrics(tmp_path, "priced")["cost_usd"] == pytest.approx(expected + new)
    # re-scoring needs no model and reports the same cost of the answers (this invocation: nothing)
    rescored = evalpipe("score", str(tmp_path / "priced"))
    assert rescored.returncode == 0, rescored.stderr
    assert metrics(tmp_path, "priced")["cost_usd"] == pytest.approx(expected + new)


def test_batch_export_and_import_round_trip_and_refusals(tmp_path):
    out = tmp_path / "requests.jsonl"
    exported = evalpipe("run", "--task", "ncbi_disease", "--base-url", "http://127.0.0.1:9/v1", "--model", MODEL,
                        "--limit", "5", "--results-dir", str(tmp_path), "--run-name", "offline",
                        "--batch-export", str(out))
    assert exported.returncode == 0, exported.stderr  # nothing sent: the dead URL is never asked
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 5 and {line["url"] for line in lines} == {"/v1/chat/completions"}
    assert all(line["body"]["model"] == MODEL and line["method"] == "POST" for line in lines)
    run = tmp_path / "offline"

    def answer(line: dict, model: str = MODEL) -> str:
        body = completion_body({**line["body"], "model": model}, tagging_responder(line["body"]), 1)
        return json.dumps({"custom_id": line["custom_id"], "response": {"status_code": 200, "body": body},
                           "error": None})

    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(answer(lines[0]) + "\n" + answer({**lines[1], "custom_id": "f" * 64}) + "\n")
    refused = evalpipe("batch-import", str(run), str(unknown))
    assert refused.returncode == 1 and f"{unknown}:2: custom_id ffffffffffffffff… is not a request of this run" \
        in refused.stderr and "Traceback" not in refused.stderr
    other = tmp_path / "other.jsonl"
    other.write_text(answer(lines[0], "another-model") + "\n")
    refused = evalpipe("batch-import", str(run), str(other))
    assert refused.returncode == 1 and "answered by model 'another-model', but the run's model is 'fake-model'" \
        in refused.stderr
    db = sqlite3.connect(run / "responses.sqlite")
    assert db.execute("SELECT COUNT(*) FROM responses").fetchone()[0] == 0  # a refused file stores nothing
    db.close()

    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(answer(line) + "\n" for line in lines[:4]))
    imported = evalpipe("batch-import", str(run), str(answers))
    assert imported.returncode == 0 and "stored 4 answer(s)" in imported.stdout, imported.stderr
    again = evalpipe("batch-export", str(run), "-o", str(tmp_path / "rest.jsonl"))
    assert again.returncode == 0 and [json.loads(x)["custom_id"] for x in
                                      (tmp_path / "rest.jsonl").read_text().splitlines()] == [lines[4]["custom_id"]]
    scored = evalpipe("score", str(run))
    assert scored.returncode == 0, scored.stderr
    assert metrics(tmp_path, "offline")["errors"] == 1

    rest = tmp_path / "rest-answers.jsonl"
    rest.write_text(answer(lines[4]) + "\n")
    assert evalpipe("batch-import", str(run), str(rest)).returncode == 0
    assert evalpipe("score", str(run)).returncode == 0
    with FakeBatchServer() as server:  # the imported answers score as the same answers asked directly
        direct = ncbi(server.url, tmp_path, "direct", limit=5)
        assert direct.returncode == 0, direct.stderr
    assert metrics(tmp_path, "offline")["f1"] == metrics(tmp_path, "direct")["f1"]
    assert metrics(tmp_path, "offline")["errors"] == 0
