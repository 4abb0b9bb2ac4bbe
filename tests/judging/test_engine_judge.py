"""`--judge-engine llamacpp`: the bundled SmolLM2-135M judges for real, offline, through the same HTTP
backend. A 135M model is no useful judge — most replies are prose — so this asserts the accounting:
every (sample, judge) pair ends as a rating or a counted failure (never a 0), and nothing is asked
twice. Skipped where llama-cpp-python or the model package is missing (`./run.sh` installs both)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.judging.conftest import evalpipe
from tests.test_llamacpp_integration import _skip_reason

pytestmark = [pytest.mark.slow, pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))]


def test_the_bundled_model_judges_offline(server, questions, tmp_path):
    results = tmp_path / "results"
    made = evalpipe("run", "--task", "huatuo_generation", "--data", f"huatuo_generation={questions}",
                    "--base-url", server.url, "--model", "evaluated-model", "--results-dir", str(results),
                    "--run-name", "one", "--limit", "1")
    assert made.returncode == 0, made.stderr
    run = results / "one"
    judged = evalpipe("judge", str(run), "--judge-engine", "llamacpp", "--judge-max-tokens", "24",
                      "--judge-concurrency", "2", timeout=600)
    assert judged.returncode == 0, judged.stderr
    metrics = json.loads((run / "metrics.json").read_text())["huatuo_generation"]
    judge = json.loads((run / "config.json").read_text())["judging"]["judges"][0]
    assert judge["engine"] == "llamacpp" and judge["local"] is True
    name = judge["model"]
    assert metrics["judge_n"] + metrics[f"judge[{name}]_failures"] == 1
    with sqlite3.connect(run / "responses.sqlite") as db:
        rows = db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0]
    assert 1 <= rows <= 2  # the reply, plus its retry when it was unusable
    again = evalpipe("judge", str(run), "--judge-engine", "llamacpp", "--judge-max-tokens", "24", timeout=600)
    assert again.returncode == 0 and "sent 0" in again.stdout
