"""``evalpipe contamination`` end to end: the command as a user runs it (a subprocess) against the
loopback fake server, answering with a scripted function."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task
from tests.support.fake_openai import FakeOpenAIServer, request_text

REPO = Path(__file__).resolve().parents[2]
LIMIT = 20
GENERIC = "I cannot tell how this text goes on."


def evalpipe(*args: str, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    env.pop("EVALPIPE_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "evalpipe.cli", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def halves(text: str) -> tuple[str, str]:
    """The first ⌊n/2⌋ whitespace tokens as written, and the rest (the probe's split, by hand)."""
    tokens = list(re.finditer(r"\S+", text))
    cut = tokens[len(tokens) // 2 - 1].end()
    return text[:cut].strip(), text[cut:].strip()


@pytest.fixture(scope="module")
def questions() -> list[tuple[str, str]]:
    """(id, question) of MeQSum's first evaluated samples (every one has ≥ 8 tokens)."""
    examples = list(get_task("clue_meqsum").load(LoadOptions()).examples)[:LIMIT]
    assert all(len(ex.inputs["question"].split()) >= 8 for ex in examples)
    return [(ex.id, ex.inputs["question"]) for ex in examples]


def reciter(recited: list[str]):
    """A model that recites the second half of the questions ``recited`` when the prompt names MeQSum."""
    def answer(body):
        text = request_text(body)
        if "MeQSum" in text:
            for question in recited:
                first, second = halves(question)
                if first in text:
                    return second
        return GENERIC
    return answer


def probe(server: FakeOpenAIServer, results: Path, *more: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return evalpipe("contamination", "--task", "clue_meqsum", "--base-url", server.url, "--model", "fake-model",
                    "--limit", str(LIMIT), "--results-dir", str(results), *more, env=env)


def result_of(results: Path) -> dict:
    (path,) = results.glob("*/contamination.json")
    return json.loads(path.read_text())


def test_a_model_reciting_half_the_questions_is_likely_contaminated(tmp_path, questions):
    recited = dict(questions[::2])
    with FakeOpenAIServer(responder=reciter(list(recited.values()))) as server:
        done = probe(server, tmp_path)
        assert done.returncode == 0, done.stderr
        sent = server.total_requests
    result = result_of(tmp_path)
    assert result["verdict"] == "likely_contaminated"
    assert result["dataset"] == "MeQSum" and result["split"] == "test" and result["n"] == LIMIT
    near = {s["id"] for s in result["samples"] if s["near_exact"]}
    assert near == set(recited) and result["near_exact"] == len(recited) == LIMIT // 2
    assert result["exact"] == len(recited)
    for sample in result["samples"]:
        assert sample["general_completion"] == GENERIC and sample["field"] == "question"
        assert (sample["guided_rougeL"] == 1.0) == (sample["id"] in recited)
    assert result["guided_rougeL"] > result["general_rougeL"]
    assert result["difference"]["ci_low"] > 0 and result["difference"]["resamples"] == 1000
    # guided + general per sample, one Min-K % request per text, and one probe of the log-probabilities
    assert sent == 2 * LIMIT + LIMIT + 1
    assert "likely_contaminated" in done.stdout and "near-exact 10 of 20" in done.stdout


def test_a_model_reciting_nothing_shows_no_evidence(tmp_path, questions):
    secret = "sk-test-contamination-7f6e5d4c3b2a"
    with FakeOpenAIServer(responder=lambda body: GENERIC, api_key=secret) as server:
        done = probe(server, tmp_path, "--min-k", "0", env={"OPENAI_API_KEY": secret})
        assert done.returncode == 0, done.stderr
        assert server.total_requests == 2 * LIMIT  # no log-probability requests with --min-k 0
    for path in tmp_path.rglob("*"):  # the API key reaches no file and no output
        assert not path.is_file() or secret.encode() not in path.read_bytes(), path
    assert secret not in done.stdout + done.stderr
    result = result_of(tmp_path)
    assert result["verdict"] == "no_evidence"
    assert result["exact"] == result["near_exact"] == 0 and not any(s["near_exact"] for s in result["samples"])
    assert result["difference"]["value"] == 0.0 and result["difference"]["ci_low"] == 0.0
    assert result["min_k_prob"] == {"available": False, "reason": "not asked for (--min-k 0)"}


def test_partial_answers_are_kept_and_only_the_missing_ones_asked_again(tmp_path, questions):
    with FakeOpenAIServer(responder=reciter([questions[0][1]])) as server:
        server.plan_faults(["400"], count=3)  # not retried: three completions fail for good
        first = probe(server, tmp_path, "--concurrency", "1", "--min-k", "0")
        assert first.returncode == 3, first.stderr
        assert "re-run the same command" in first.stderr
        partial = result_of(tmp_path)
        assert partial["errors"]["count"] == 3 and partial["n"] == LIMIT - 3
        assert "HTTP 400" in partial["errors"]["samples"][0]["error"]
        before = server.total_requests
        again = probe(server, tmp_path, "--concurrency", "1", "--min-k", "0")
        assert again.returncode == 0, again.stderr
        assert server.total_requests - before == 3  # only the three failed ones
        assert "37 already answered, 3 to send" in " ".join(again.stderr.split())
    result = result_of(tmp_path)
    assert result["n"] == LIMIT and result["errors"]["count"] == 0 and result["exact"] == 1


def test_a_killed_probe_resumes_without_asking_again(tmp_path, questions):
    with FakeOpenAIServer(responder=reciter([q for _, q in questions]), latency=0.1) as server:
        args = [sys.executable, "-m", "evalpipe.cli", "contamination", "--task", "clue_meqsum", "--base-url",
                server.url, "--model", "fake-model", "--limit", str(LIMIT), "--results-dir", str(tmp_path),
                "--concurrency", "2", "--min-k", "0"]
        process = subprocess.Popen(args, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while server.total_requests < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
        store = next(tmp_path.glob("*/responses.sqlite"))
        import sqlite3

        stored = sqlite3.connect(store).execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        assert 0 < stored < 2 * LIMIT
        before = server.total_requests
        again = probe(server, tmp_path, "--min-k", "0")
        assert again.returncode == 0, again.stderr
        assert server.total_requests - before == 2 * LIMIT - stored
    result = result_of(tmp_path)
    assert result["n"] == LIMIT and result["exact"] == LIMIT and result["verdict"] == "likely_contaminated"


def min_k(n: int, k: float = 20) -> float:
    """The fake server's Min-K % of an n-token text: its n − 1 scored tokens cost -1.0 but the last,
    -3.0 (the scripted answer is never that token): the lowest ⌊(n−1)·k/100⌋ (≥ 1) averaged."""
    count = max(1, int((n - 1) * k // 100))
    return (-3.0 - (count - 1) * 1.0) / count


def test_min_k_prob_of_the_test_texts_beside_a_reference(tmp_path, questions):
    reference = tmp_path / "reference.txt"
    words = [f"word{i}" for i in range(400)]
    reference.write_text(" ".join(words), encoding="utf-8")
    with FakeOpenAIServer(responder=lambda body: GENERIC) as server:
        done = probe(server, tmp_path / "r", "--reference-text", str(reference))
        assert done.returncode == 0, done.stderr
    result = result_of(tmp_path / "r")["min_k_prob"]
    lengths = [len(q.split()) for _, q in questions]
    median = int(sorted(lengths)[LIMIT // 2 - 1] + sorted(lengths)[LIMIT // 2]) // 2
    assert result["available"] and result["k"] == 20
    assert result["test_mean"] == pytest.approx(sum(min_k(n) for n in lengths) / LIMIT)
    windows = [median] * (400 // median) + ([400 % median] if 400 % median >= median / 2 else [])
    assert result["n_reference"] == len(windows)
    assert result["reference_mean"] == pytest.approx(sum(min_k(n) for n in windows) / len(windows))
    assert result["difference"] == pytest.approx(result["test_mean"] - result["reference_mean"])


def test_an_endpoint_without_prompt_logprobs_says_so(tmp_path):
    with FakeOpenAIServer(responder=lambda body: GENERIC, logprobs=False) as server:
        done = probe(server, tmp_path)
        assert done.returncode == 0, done.stderr
        assert server.total_requests == 2 * LIMIT + 1  # the completions, and the one probe
    result = result_of(tmp_path)["min_k_prob"]
    assert result["available"] is False and "no prompt log-probabilities" in result["reason"]
    assert "Min-K % Prob not available" in done.stdout


def test_credentialed_data_never_goes_to_a_remote_endpoint(tmp_path):
    """The run's guard, before any request: the backend is never even built."""
    from evalpipe.config import RunConfig
    from evalpipe.contamination.probe import ProbeOptions, execute_probe
    from evalpipe.outcome import RunError
    from evalpipe.tasks import registry

    (tmp_path / "notes.jsonl").write_text("".join(json.dumps({"id": i, "note": f"patient {i} was admitted with "
                                                              "chest pain and discharged on aspirin"}) + "\n"
                                                  for i in range(3)))
    (tmp_path / "notes.j2").write_text("{%- macro prompt(example, shots) -%}{{ example.note }}{%- endmacro -%}\n")
    (tmp_path / "notes.task.yaml").write_text(
        "name: secret_notes\nkind: generation\ndescription: notes.\ndata:\n  files:\n    test: notes.jsonl\n"
        "  default_dir: .\nfields:\n  inputs:\n    note: note\n  answer: note\n  id: id\nlanguage: en\n"
        "parser: text\nbertscore: false\nconcepts: false\ncredentialed: true\ntemplate: notes.j2\n")
    name = registry.register_task_file(tmp_path / "notes.task.yaml").name

    def no_backend(config):
        raise AssertionError("a backend was built")

    try:
        for url, allowed in (("https://api.example.com/v1", False), ("http://127.0.0.1:9/v1", None)):
            config = RunConfig(tasks=(name,), model="m", base_url=url)
            if allowed is False:
                with pytest.raises(RunError, match="credentialed"):
                    asyncio.run(execute_probe(config, ProbeOptions(), no_backend, tmp_path / "r"))
                assert not list((tmp_path / "r").glob("*/responses.sqlite"))
        # allowed explicitly, the probe goes ahead (and asks the backend)
        config = RunConfig(tasks=(name,), model="m", base_url="https://api.example.com/v1",
                           allow_external_endpoint=True)
        with pytest.raises(AssertionError, match="a backend was built"):
            asyncio.run(execute_probe(config, ProbeOptions(), no_backend, tmp_path / "r"))
    finally:
        registry._TASKS.pop(name, None)
