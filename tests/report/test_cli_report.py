"""The commands a reader meets: `demo` ends with its report, `show`/`run`/`score` flag a high parse-failure
rate, `--parquet` on `run` and `score`, and `--help` readable at 80 columns. Real subprocesses against
the loopback fake server (tests/support/fake_openai.py) or scripted runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pandas as pd
import pytest

from evalpipe.results import RunDir
from evalpipe.tasks.registry import resolve
from tests.report.support import gold_answers, make_run
from tests.support.fake_openai import FakeOpenAIProcess
from tests.support.scripted_backend import query_text

REPO = Path(__file__).resolve().parents[2]
COMMANDS = ("run", "score", "show", "tasks", "report", "compare", "serve", "demo", "batch-export", "batch-import")


def evalpipe(*args: str, columns: int | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALPIPE_")}
    env["HF_HUB_OFFLINE"] = "1"
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "evalpipe.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIProcess(latency=0.0) as process:
        yield process


def _pyarrow() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


# ---- the demo ends with its report -----------------------------------------------------------------

def test_demo_states_and_records_its_caps_then_writes_the_report_and_prints_where(server, tmp_path):
    result = evalpipe("demo", "--base-url", server.url, "--model", "fake-model", "--limit", "3",
                      "--results-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    caps = {s.name: s.quick.to_json() for s in resolve([], ["demo"]) if s.quick is not None}
    assert caps, "the demo tasks declare quick caps"
    # said in the output …
    line = next(line for line in result.stderr.splitlines() if line.startswith("demo: quick generation caps"))
    for task, cap in caps.items():
        assert f"{task} at most {cap['max_tokens']} new tokens" in line
    # … recorded in the run's config, and the prompts were sent with them
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["generation"] == caps
    for task, cap in caps.items():
        assert config["tasks"][task]["max_tokens"] == cap["max_tokens"]
    prompts = {s["task"]: s["prompt"]["params"]  # each sample's prompt as sent (kept once, in the store)
               for s in RunDir(run).read_samples(prompts=True)}
    for task, cap in caps.items():
        assert prompts[task]["max_tokens"] == cap["max_tokens"] and prompts[task]["stop"] == cap["stop"]
    # the report of the run, at the printed path, with the sample browser holding both tasks
    html = run / "report" / "report.html"
    assert f"report: {html}" in result.stdout.replace("\n", "") or f"report: {html.relative_to(REPO)}" in result.stdout
    assert html.resolve().as_uri() in result.stdout.replace("\n", "")
    page = html.read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script type="application/json" id="samples-data">(.*?)</script>', page, re.S).group(1))
    assert sorted(t["name"] for t in data["tasks"]) == sorted(caps) and len(data["samples"]) == 3 * len(caps)


# ---- a high parse-failure rate is flagged by show, score and run ------------------------------------

WARNING = re.compile(r"ncbi_disease: (\d+)% of answers could not be parsed — its metrics measure answer-format "
                     r"compliance as much as the task")


@pytest.fixture(scope="module")
def mostly_unparseable(tmp_path_factory) -> Path:
    """An NCBI run where 9 of 10 answers are refusals (parse failures)."""
    gold = gold_answers()

    def respond(prompt):
        text = query_text(prompt)
        return gold[text] if zlib.crc32(text.encode()) % 10 == 0 else "I cannot help with that."
    return make_run(tmp_path_factory.mktemp("unparseable"), "refuser", respond, limit=30)


def test_show_and_score_flag_a_high_parse_failure_rate(mostly_unparseable):
    rate = json.loads((mostly_unparseable / "metrics.json").read_text())["ncbi_disease"]["parse_failure_rate"]
    assert rate > 0.5
    for command in ("show", "score"):
        result = evalpipe(command, str(mostly_unparseable))
        assert result.returncode == 0, result.stderr
        found = WARNING.search(result.stderr)
        assert found and int(found.group(1)) == round(100 * rate), (command, result.stderr)


def test_the_warning_is_above_20_percent_for_run_score_and_show_alike():
    """run's closing output, score and show print the same summary_lines (cli._print_run)."""
    from evalpipe.terminal import summary_lines

    lines = summary_lines({"t": {"parse_failure_rate": 0.21}}, None)
    assert lines == [("warn", "t: 21% of answers could not be parsed — its metrics measure answer-format compliance "
                              "as much as the task (see summary.json diagnostics)")]
    assert summary_lines({"t": {"parse_failure_rate": 0.2}}, None) == []  # the threshold is "above 20 %"


# ---- --parquet on run and score --------------------------------------------------------------------

@pytest.mark.skipif(not _pyarrow(), reason="pyarrow not installed")
def test_parquet_on_run_and_score_writes_the_samples_into_the_run_directory(server, tmp_path):
    result = evalpipe("run", "--task", "ncbi_disease", "--base-url", server.url, "--model", "fake-model",
                      "--limit", "4", "--results-dir", str(tmp_path), "--parquet")
    assert result.returncode == 0, result.stderr
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    frame = pd.read_parquet(run / "samples.parquet")
    assert frame["id"].tolist() == [f"test-{i}" for i in range(4)] and f"parquet: {run / 'samples.parquet'}" in result.stdout
    # the echo server answers with the sentence itself: parsed, no entity — no parse-failure warning
    assert "could not be parsed" not in result.stderr
    (run / "samples.parquet").unlink()
    scored = evalpipe("score", str(run), "--compat", "evalscope", "--parquet")
    assert scored.returncode == 0, scored.stderr
    assert len(pd.read_parquet(run / "samples.evalscope.parquet")) == 4 and not (run / "samples.parquet").exists()


def test_parquet_without_pyarrow_is_refused_before_any_work(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "pyarrow.py").write_text("raise ImportError('no pyarrow here')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALPIPE_")}
    env["PYTHONPATH"] = str(blocker)
    result = subprocess.run([sys.executable, "-m", "evalpipe.cli", "run", "--task", "ncbi_disease", "--base-url",
                             "http://127.0.0.1:9/v1", "--model", "m", "--results-dir", str(tmp_path / "r"), "--parquet"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "--parquet needs the pyarrow package" in result.stderr
    assert not (tmp_path / "r").exists()


# ---- --help at 80 columns --------------------------------------------------------------------------

def _option_names(command: str) -> list[str]:
    import typer.main

    from evalpipe.cli import app

    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    return [name for param in click_command.params for name in (*param.opts, *param.secondary_opts)
            if name.startswith("--")]


@pytest.mark.parametrize("command", ("", *COMMANDS))
def test_help_at_80_columns_has_every_option_name_whole_and_no_rst(command):
    result = evalpipe(*([command] if command else []), "--help", columns=80)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "``" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert not re.search(r"--[a-z0-9-]+…", text)  # rich's cut option names (--tensor-parallel…)
    if command:
        words = set(re.findall(r"--[a-z0-9-]+", text))
        missing = [name for name in _option_names(command) if name not in words]
        assert not missing, f"{command} --help cuts or hides {missing}"
    else:
        for name in COMMANDS:
            row = next(line for line in text.splitlines() if line.strip().startswith(name + " "))
            assert not row.rstrip().endswith("..."), row  # each command's one-line summary whole


def test_a_capped_run_is_another_run_and_an_uncapped_one_keeps_its_name():
    import hashlib

    from evalpipe.config import RunConfig

    plain = RunConfig(tasks=("ncbi_disease",), model="m", limit=20)
    # the name every run had before per-task generation settings existed
    before = hashlib.sha256(json.dumps({n: getattr(plain, n) for n in RunConfig.ANSWER_FIELDS}, sort_keys=True,
                                       default=list).encode()).hexdigest()[:10]
    assert plain.answer_hash() == before
    capped = RunConfig(tasks=("ncbi_disease",), model="m", limit=20,
                       generation={"ncbi_disease": {"max_tokens": 192, "stop": ["</response>"]}})
    assert capped.answer_hash() != before
    assert RunConfig.from_json(capped.to_json()) == capped  # resumable from config.json
