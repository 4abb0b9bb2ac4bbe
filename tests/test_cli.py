"""The `evalpipe` command as a user runs it: real subprocesses against a loopback fake server.

Includes the never-lose-work test: a run killed with SIGKILL mid-way, resumed by the same
command, asks no answered prompt again and ends with exactly the metrics of an uninterrupted run.
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

from tests.support.fake_openai import FakeOpenAIProcess

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-test-9f8e7d6c5b4a39281706"


def evalpipe(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    full_env.pop("EVALPIPE_BASE_URL", None)
    return subprocess.run([sys.executable, "-m", "evalpipe.cli", *args], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIProcess(latency=0.0) as process:
        yield process


def only_run(results: Path) -> Path:
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    return run


def test_tasks_lists_tasks_and_suites():
    result = evalpipe("tasks")
    assert result.returncode == 0, result.stderr
    for name in ("ncbi_disease", "clue_meqsum", "cmeee", "clue-level1", "cblue", "demo"):
        assert name in result.stdout
    one = evalpipe("tasks", "cmeie")
    assert one.returncode == 0 and "schema: CMeIE's relation schema" in one.stdout and "data roles" in one.stdout
    unknown = evalpipe("tasks", "cmeiee")
    assert unknown.returncode == 1 and "unknown task 'cmeiee'" in unknown.stderr


def test_run_show_score_round_trip(server, tmp_path):
    results = tmp_path / "results"
    result = evalpipe("run", "--task", "ncbi_disease", "--base-url", server.url, "--model", "fake-model",
                      "--limit", "8", "--results-dir", str(results), env={"OPENAI_API_KEY": SECRET})
    assert result.returncode == 0, result.stderr
    run = only_run(results)
    metrics = json.loads((run / "metrics.json").read_text())["ncbi_disease"]
    # the echo server copies each sentence untagged: no entity found, every O token right
    assert metrics["n"] == 8 and metrics["errors"] == 0 and metrics["recall"] == 0.0
    assert "recall" in result.stdout and str(run) in result.stdout

    shown = evalpipe("show", str(run))
    assert shown.returncode == 0 and "parse_failure_rate" in shown.stdout

    rescored = evalpipe("score", str(run))
    assert rescored.returncode == 0, rescored.stderr
    assert json.loads((run / "metrics.json").read_text())["ncbi_disease"] == metrics
    compat = evalpipe("score", str(run), "--compat", "evalscope")
    assert compat.returncode == 0 and (run / "metrics.evalscope.json").is_file()

    # the API key never reaches a file or the output
    for path in run.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in result.stdout + result.stderr


def test_unreachable_endpoint_fails_fast_with_the_url(tmp_path):
    started = time.monotonic()
    result = evalpipe("run", "--task", "ncbi_disease", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
                      "--limit", "2", "--results-dir", str(tmp_path))
    assert result.returncode == 1
    assert "http://127.0.0.1:9/v1" in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 30


def test_unknown_model_names_the_served_models(server, tmp_path):
    result = evalpipe("run", "--task", "ncbi_disease", "--base-url", server.url, "--model", "nope",
                      "--limit", "2", "--results-dir", str(tmp_path))
    assert result.returncode == 1
    assert "fake-model" in result.stderr and "nope" in result.stderr


def test_bad_data_fails_before_any_request_with_file_and_line(server, tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("Cancer\tB-Disease\nhere\tO\n\nit\tI-Disease\n")
    before = server.stats()["total_requests"]
    result = evalpipe("run", "--task", "ncbi_disease", "--base-url", server.url, "--model", "fake-model",
                      "--data", f"ncbi_disease={bad}", "--results-dir", str(tmp_path / "r"))
    assert result.returncode == 1
    assert f"{bad}:4: tag:" in result.stderr and "bad BIO sequence" in result.stderr
    assert server.stats()["total_requests"] == before


def test_failed_requests_exit_3_and_are_retried_alone(tmp_path):
    with FakeOpenAIProcess(latency=0.0) as fake:
        fake.plan_faults(["400"], count=3)  # not retried: three samples fail for good
        args = ("run", "--task", "ncbi_disease", "--base-url", fake.url, "--model", "fake-model",
                "--limit", "10", "--concurrency", "1", "--results-dir", str(tmp_path))
        first = evalpipe(*args)
        assert first.returncode == 3, first.stderr
        assert "re-run the same command" in first.stderr
        metrics = json.loads((only_run(tmp_path) / "metrics.json").read_text())["ncbi_disease"]
        assert metrics["errors"] == 3
        generation_requests = fake.stats()["total_requests"]
        second = evalpipe(*args)
        assert second.returncode == 0, second.stderr
        assert fake.stats()["total_requests"] - generation_requests == 3
        assert json.loads((only_run(tmp_path) / "metrics.json").read_text())["ncbi_disease"]["errors"] == 0


def _answers_stored(store: Path) -> int:
    if not store.is_file():
        return 0
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as db:
            return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_gives_identical_metrics(tmp_path):
    limit, concurrency = "60", "4"
    with FakeOpenAIProcess(latency=0.15) as fake:
        killed_dir = tmp_path / "killed"
        args = ["run", "--task", "ncbi_disease", "--base-url", fake.url, "--model", "fake-model",
                "--limit", limit, "--concurrency", concurrency]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        process = subprocess.Popen([sys.executable, "-m", "evalpipe.cli", *args, "--results-dir", str(killed_dir)],
                                   cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        store = None
        while time.monotonic() < deadline:
            # (a hidden .evalpipe-stage-* folder is the rendered plan waiting for the run directory)
            runs = [p for p in killed_dir.glob("*") if p.is_dir() and not p.name.startswith(".")] if killed_dir.exists() else []
            store = runs[0] / "responses.sqlite" if runs else None
            if store is not None and _answers_stored(store) >= 15:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert store is not None
        saved = _answers_stored(store)
        assert 15 <= saved < 60, saved  # killed mid-run
        sent_before = fake.stats()["total_requests"]
        assert not (store.parent / "metrics.json").exists()

        resumed = evalpipe(*args, "--results-dir", str(killed_dir))
        assert resumed.returncode == 0, resumed.stderr
        resent = fake.stats()["total_requests"] - sent_before
        # only never-answered prompts go out again (those in flight at the kill are among them)
        assert resent == 60 - saved
        assert f"{saved} already answered" in resumed.stderr

        clean_dir = tmp_path / "clean"
        clean = evalpipe(*args, "--results-dir", str(clean_dir))
        assert clean.returncode == 0, clean.stderr
    killed_metrics = json.loads((only_run(killed_dir) / "metrics.json").read_text())
    clean_metrics = json.loads((only_run(clean_dir) / "metrics.json").read_text())
    assert killed_metrics == clean_metrics
    killed_samples = (only_run(killed_dir) / "samples.jsonl").read_text().splitlines()
    clean_samples = (only_run(clean_dir) / "samples.jsonl").read_text().splitlines()
    strip = lambda line: {k: v for k, v in json.loads(line).items() if k not in ("latency_s",)}  # noqa: E731
    assert [strip(x) for x in killed_samples] == [strip(x) for x in clean_samples]


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_with_exit_130_and_the_run_resumes(tmp_path):
    with FakeOpenAIProcess(latency=0.15) as fake:
        args = ["run", "--task", "ncbi_disease", "--base-url", fake.url, "--model", "fake-model",
                "--limit", "40", "--concurrency", "2", "--results-dir", str(tmp_path)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        process = subprocess.Popen([sys.executable, "-m", "evalpipe.cli", *args], cwd=REPO, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            stores = list(tmp_path.glob("*/responses.sqlite"))
            if stores and _answers_stored(stores[0]) >= 5:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 130, stderr
        assert "run the same command again to resume" in stderr and "Traceback" not in stderr
        saved = _answers_stored(stores[0])
        resumed = evalpipe(*args)
        assert resumed.returncode == 0, resumed.stderr
        assert f"{saved} already answered" in resumed.stderr


def test_show_prints_what_the_summary_says_about_the_metrics(tmp_path):
    from typer.testing import CliRunner

    from evalpipe.cli import app

    (tmp_path / "metrics.json").write_text(json.dumps({"clue_medisumqa": {"rouge1": 0.25, "n": 4}}))
    (tmp_path / "summary.json").write_text(json.dumps({
        "clue_medisumqa": {"not_computed": {"umls[*]": "scispacy is not installed"}, "truncated_share": 0.5},
        "_run": {"skipped_tasks": {"clue_mednli": "mli_test_v1.jsonl not found"},
                 "incomplete_suites": {"clue-level2": "clue_medisumcode was not run"}},
    }))
    result = CliRunner().invoke(app, ["show", str(tmp_path)])
    assert result.exit_code == 0
    for text in ("rouge1", "0.2500", "umls[*] not computed: scispacy is not installed", "50.0% of prompts",
                 "skipped clue_mednli", "clue-level2: aggregate incomplete"):
        assert text in result.output, text


def test_each_sample_names_the_replica_that_answered_it(tmp_path):
    """Two replicas: every sample says which one served it (kept in the store, so a resumed run
    still says so), and both got a share."""
    results = tmp_path / "results"
    with FakeOpenAIProcess(latency=0.02) as a, FakeOpenAIProcess(latency=0.02) as b:
        args = ["run", "--task", "ncbi_disease", "--base-url", a.url, "--base-url", b.url, "--model", "fake-model",
                "--limit", "12", "--concurrency", "2", "--results-dir", str(results)]
        first = evalpipe(*args)
        assert first.returncode == 0, first.stderr
        again = evalpipe(*args)  # every answer from the store now
        assert again.returncode == 0, again.stderr
        urls = {a.url + "/chat/completions", b.url + "/chat/completions"}
    samples = [json.loads(line) for line in (only_run(results) / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 12 and {s["endpoint"] for s in samples} == urls
    assert "from store 12" in again.stdout


def _bootstrapped() -> str | None:
    """Why ./run.sh cannot be run quickly here (None: its environment is installed and current)."""
    import hashlib

    stamp = REPO / ".venv" / ".evalpipe-installed"
    # run.sh's stamp: these files, then the engine flavour choice (see run.sh)
    parts = [REPO / "pyproject.toml", REPO / "run.sh", REPO / "evalpipe" / "engines" / "llamacpp_install.py"]
    native = os.environ.get("EVALPIPE_LLAMACPP_NATIVE", "")
    want = hashlib.sha256(b"".join(p.read_bytes() for p in parts) + f"llamacpp-native={native}\n".encode()).hexdigest()
    if not stamp.is_file() or stamp.read_text().strip() != want:
        return "./run.sh's environment is not installed or not current (run ./run.sh test)"
    return None


@pytest.mark.skipif(_bootstrapped() is not None, reason=str(_bootstrapped()))
def test_run_sh_with_options_only_runs_the_demo_against_that_endpoint(server, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALPIPE_")}
    result = subprocess.run(["bash", str(REPO / "run.sh"), "--base-url", server.url, "--model", "fake-model",
                             "--limit", "2", "--results-dir", str(tmp_path)],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    run = only_run(tmp_path)
    assert run.name.startswith("clue_meqsum+ncbi_disease__fake-model")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["ncbi_disease"]["n"] == 2 and metrics["clue_meqsum"]["n"] == 2
    assert "./run.sh report" in result.stdout


def test_only_the_command_line_itself_skips_the_collections_at_exit(monkeypatch, capsys):
    """``main()`` as the process's command (argv from sys.argv) freezes the heap as it leaves, so the
    interpreter's shutdown skips its collections; a caller that gives argv keeps its collector."""
    import gc

    from evalpipe.cli import main

    frozen: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    with pytest.raises(SystemExit) as given:
        main(["tasks"])
    assert given.value.code == 0 and frozen == []
    monkeypatch.setattr(sys, "argv", ["evalpipe", "tasks"])
    with pytest.raises(SystemExit) as own:
        main()
    assert own.value.code == 0 and frozen == [1]
    monkeypatch.setattr(sys, "argv", ["evalpipe", "no-such-command"])
    with pytest.raises(SystemExit) as bad:  # a usage error leaves the same way
        main()
    assert bad.value.code == 2 and frozen == [1, 1]
    capsys.readouterr()
