"""Managed local servers: health wait, teardown, failure with the server's last log lines.

The fake OpenAI server (a real subprocess) stands in for an engine, so these run everywhere.
"""

import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from evalpipe.engines.llamacpp import EngineUnavailable
from evalpipe.engines.server import ManagedServer, ServerSpec, ServerStartError, free_port

REPO = Path(__file__).resolve().parents[1]
ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def fake_engine(port: int) -> ServerSpec:
    return ServerSpec(
        name="fake", command=[sys.executable, "-m", "tests.support.fake_openai", "--port", str(port)],
        base_url=f"http://127.0.0.1:{port}/v1", model="fake-model", env=ENV,
    )


def test_waits_until_healthy_then_stops_the_process_group():
    port = free_port()
    with ManagedServer(fake_engine(port), startup_timeout_s=30) as server:
        assert server.running
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as response:
            assert b"fake-model" in response.read()
    assert not server.running
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)


def test_a_crashing_engine_fails_with_its_last_log_lines():
    spec = ServerSpec(name="broken", command=[sys.executable, "-c", "print('loading weights'); print('CUDA error: no device'); raise SystemExit(3)"],
                      base_url=f"http://127.0.0.1:{free_port()}/v1", model="m")
    with pytest.raises(ServerStartError, match=r"exited with code 3(.|\n)*CUDA error: no device"):
        ManagedServer(spec, startup_timeout_s=30).start()


def test_an_engine_that_never_answers_times_out_and_is_stopped():
    spec = ServerSpec(name="silent", command=[sys.executable, "-c", "import time; print('starting'); time.sleep(60)"],
                      base_url=f"http://127.0.0.1:{free_port()}/v1", model="m")
    server = ManagedServer(spec, startup_timeout_s=1.5)
    started = time.monotonic()
    with pytest.raises(ServerStartError, match="did not answer(.|\n)*starting"):
        server.start()
    assert time.monotonic() - started < 20 and not server.running


def test_vllm_server_without_vllm_says_how_to_install(monkeypatch):
    from evalpipe.engines import vllm_server

    monkeypatch.setattr(vllm_server.shutil, "which", lambda name: None)
    monkeypatch.setattr(vllm_server.sys, "executable", "/nonexistent/python")
    with pytest.raises(EngineUnavailable, match=r"evalpipe\[vllm\]"):
        vllm_server.vllm_server("some/model")


def test_vllm_server_command_carries_the_options(monkeypatch, tmp_path):
    from evalpipe.engines import vllm_server

    exe = tmp_path / "vllm"
    exe.write_text("#!/bin/sh\n")
    monkeypatch.setattr(vllm_server.shutil, "which", lambda name: str(exe))
    spec = vllm_server.vllm_server("/models/qwen", max_model_len=4096, tensor_parallel_size=2, dtype="bfloat16",
                                   gpu_memory_utilization=0.8, revision="abc", port=8123)
    command = " ".join(spec.command)
    for part in ("serve /models/qwen", "--port 8123", "--tensor-parallel-size 2", "--max-model-len 4096",
                 "--dtype bfloat16", "--gpu-memory-utilization 0.8", "--revision abc", "--enable-prefix-caching",
                 "--host 127.0.0.1"):
        assert part in command
    assert spec.health_url == "http://127.0.0.1:8123/health" and spec.context_length == 4096


def test_two_checkpoints_with_one_file_name_get_different_identities(tmp_path):
    from evalpipe.config import RunConfig, local_model_fingerprint

    a, b = tmp_path / "a" / "ggml-model-Q4_K_M.gguf", tmp_path / "b" / "ggml-model-Q4_K_M.gguf"
    for path, payload in ((a, b"one"), (b, b"other")):
        path.parent.mkdir()
        path.write_bytes(payload)
    fa, fb = local_model_fingerprint(str(a)), local_model_fingerprint(str(b))
    assert fa and fb and fa != fb
    assert local_model_fingerprint("Qwen/Qwen2.5-0.5B-Instruct") is None  # a name, not a path
    base = dict(tasks=("ncbi_disease",), model="ggml-model-Q4_K_M", engine="llamacpp")
    names = {RunConfig(**base, model_fingerprint=f).default_run_name() for f in (fa, fb)}
    names |= {RunConfig(**base, engine_options={"revision": r}).default_run_name() for r in ("main", "abc123")}
    assert len(names) == 4


def test_long_model_paths_give_short_run_names():
    from evalpipe.config import RunConfig

    name = RunConfig(tasks=("ncbi_disease",), model="/very/" + "deep/" * 100 + "model").default_run_name()
    assert len(name) < 130


def _fake_vllm_on_path(tmp_path: Path, monkeypatch) -> Path:
    """A ``vllm`` command on PATH that runs tests/support/fake_vllm_cli.py; returns its argv log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vllm"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tests.support.fake_vllm_cli "$@"\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", ENV["PYTHONPATH"])
    argv_log = tmp_path / "argv.json"
    monkeypatch.setenv("FAKE_VLLM_ARGV", str(argv_log))
    return argv_log


def test_cli_engine_vllm_starts_the_server_budgets_with_its_tokenizer_and_stops_it(tmp_path, monkeypatch):
    """``evalpipe run --engine vllm`` end to end against a stand-in ``vllm serve`` that accepts only
    vLLM's real option names: health wait on /health, context and chat-template token counts from
    the server, LongHealth's letters sized in tokens, and the server gone afterwards."""
    import json

    from typer.testing import CliRunner

    from evalpipe.cli import app
    from evalpipe.results import RunDir

    argv_log = _fake_vllm_on_path(tmp_path, monkeypatch)
    monkeypatch.setenv("FAKE_VLLM_ANSWER", "The correct answer is B: something")
    results = tmp_path / "results"
    result = CliRunner().invoke(app, [
        "run", "--engine", "vllm", "--model", "/models/tiny-instruct", "--task", "clue_longhealth_task1",
        "--data-dir", str(REPO / "tests" / "clue" / "fixtures"), "--context-length", "1060",
        "--tensor-parallel-size", "2", "--dtype", "bfloat16", "--gpu-memory-utilization", "0.5",
        "--revision", "r1", "--limit", "3", "--results-dir", str(results), "--run-name", "v"])
    assert result.exit_code == 0, result.output
    argv = json.loads(argv_log.read_text())
    assert argv[:2] == ["serve", "/models/tiny-instruct"]
    for option, value in (("--max-model-len", "1060"), ("--tensor-parallel-size", "2"), ("--dtype", "bfloat16"),
                          ("--gpu-memory-utilization", "0.5"), ("--revision", "r1"), ("--host", "127.0.0.1"),
                          ("--served-model-name", "/models/tiny-instruct")):
        assert argv[argv.index(option) + 1] == value
    assert "--enable-prefix-caching" in argv
    run = RunDir(results / "v")
    budget = json.loads((run.path / "summary.json").read_text())["run"]["budget"]
    # LongHealth sizes letters (plain-text counts) and has no long field: no chat prompt was counted,
    # so the budget does not claim template counting (tests/test_budget_tokenizers.py covers that)
    assert budget == {"context_length": 1060, "token_counter": "server"}
    samples = run.read_samples()
    assert len(samples) == 3 and all(s["meta"]["context_measure"] == "tokens" for s in samples)
    assert all(s["prediction"] == "B" for s in samples)
    port = int(argv[argv.index("--port") + 1])
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)


def test_cli_engine_vllm_with_an_option_vllm_rejects_fails_with_its_log(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from evalpipe.cli import app

    _fake_vllm_on_path(tmp_path, monkeypatch)
    result = CliRunner().invoke(app, ["run", "--engine", "vllm", "--model", "m", "--task", "ncbi_disease",
                                      "--limit", "1", "--engine-arg", "no-such-option=8",
                                      "--results-dir", str(tmp_path / "r")])
    assert result.exit_code == 1
    assert "exited with code 2" in result.output and "unrecognized arguments: --no-such-option" in result.output


def test_engine_args_reach_vllm_serve_and_change_the_run(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from evalpipe.cli import app

    argv_log = _fake_vllm_on_path(tmp_path, monkeypatch)
    base = ["run", "--engine", "vllm", "--model", "m", "--task", "ncbi_disease", "--limit", "2",
            "--results-dir", str(tmp_path / "r")]
    plain = CliRunner().invoke(app, base)
    assert plain.exit_code == 0, plain.output
    tuned = CliRunner().invoke(app, [*base, "--engine-arg", "max-num-seqs=8", "--engine-arg", "enforce-eager=true"])
    assert tuned.exit_code == 0, tuned.output
    argv = json.loads(argv_log.read_text())
    assert argv[argv.index("--max-num-seqs") + 1] == "8" and "--enforce-eager" in argv
    # an engine setting may change answers: the tuned run has a directory of its own
    assert len([p for p in (tmp_path / "r").iterdir() if p.is_dir()]) == 2


@pytest.mark.parametrize("args, message", [
    (["--base-url", "http://127.0.0.1:9/v1", "--engine-arg", "max-num-seqs=8"], "--engine-arg needs --engine"),
    (["--base-url", "http://127.0.0.1:9/v1", "--dtype", "bfloat16"], "apply to --engine vllm"),
    (["--engine", "vllm", "--engine-arg", "port=1"], "evalpipe sets port itself"),
])
def test_engine_options_that_would_be_ignored_are_refused(tmp_path, args, message):
    from typer.testing import CliRunner

    from evalpipe.cli import app

    result = CliRunner().invoke(app, ["run", "--model", "m", "--task", "ncbi_disease", *args,
                                      "--results-dir", str(tmp_path)])
    assert result.exit_code in (1, 2) and message in " ".join(result.output.split())
