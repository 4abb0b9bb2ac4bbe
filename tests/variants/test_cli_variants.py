"""`evalpipe run --prompt-variants/--shot-orders/--shots-sweep`, `show`, `score` and `tasks` as a user
runs them: real subprocesses against the loopback fake server."""

from __future__ import annotations

import json

import pytest

from tests.support.fake_openai import FakeOpenAIProcess
from tests.test_cli import evalpipe, only_run


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIProcess(latency=0.0) as process:
        yield process


def test_run_with_every_variant_then_show_and_score(server, tmp_path):
    results = tmp_path / "results"
    result = evalpipe("run", "--task", "ncbi_disease", "--base-url", server.url, "--model", "fake-model",
                      "--limit", "4", "--prompt-variants", "all", "--shot-orders", "2", "--results-dir", str(results))
    assert result.returncode == 0, result.stderr
    run = only_run(results)
    doc = json.loads((run / "variants.json").read_text())["tasks"]["ncbi_disease"]
    assert set(doc["axes"]) == {"variant", "order"} and len(doc["conditions"]) == 10
    # the spread numbers are in their own table, not among the task's metrics
    assert "robustness across prompt conditions" in result.stdout and "prompt variants" in result.stdout
    assert "flips" in result.stdout
    table = result.stdout.split("robustness across")[0]
    assert "f1_variant_std" not in table and "parse_failure_rate" in table
    assert "f1_variant_std" in json.loads((run / "metrics.json").read_text())["ncbi_disease"]

    shown = evalpipe("show", str(run))
    assert shown.returncode == 0 and "shot orders" in shown.stdout
    before = (run / "variants.json").read_bytes()
    assert evalpipe("score", str(run)).returncode == 0
    assert (run / "variants.json").read_bytes() == before


@pytest.mark.parametrize(("args", "code", "message"), [
    (("--shot-orders", "0"), 2, "must be at least 1"),
    (("--shots-sweep", "1,x"), 2, "expects shot counts"),
    (("--shots-sweep", "-1"), 2, "expects shot counts"),
    (("--prompt-variants", ","), 2, "expects all or NAME"),
    (("--prompt-variants", "concise,nope"), 1, "task ncbi_disease has no prompt variant 'nope'"),
])
def test_bad_condition_options_are_one_line_errors(server, tmp_path, args, code, message):
    result = evalpipe("run", "--task", "ncbi_disease", "--base-url", server.url, "--model", "m", "--limit", "2",
                      "--results-dir", str(tmp_path), *args)
    assert result.returncode == code
    assert message in " ".join(result.stderr.split())


def test_tasks_lists_each_tasks_variants():
    result = evalpipe("tasks", "chip_ctc", "clue_mednli", "ncbi_disease")
    assert result.returncode == 0
    assert "prompt variants" in result.stdout
    for variant in ("coordinator,", "labels_last,", "definitions,", "guidelines,", "system_role"):
        assert variant in result.stdout
