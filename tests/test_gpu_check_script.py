"""scripts/gpu_check.sh runs on a GPU machine with little time to spare, so its plumbing (options,
run directories, the summary it prints) is tested here with stand-ins for ``vllm`` — the package
for the in-process path, the command for the server path."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_gpu_check_runs_both_vllm_paths_and_prints_throughput_and_metrics(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "vllm"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tests.support.fake_vllm_cli "$@"\n')
    exe.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "support" / "standin_vllm"), str(REPO)]),
        "PYTHON": sys.executable,
        "GPU_CHECK_DEVICE_CHECK": "0",
        "GPU_CHECK_LIMIT": "6",
        "GPU_CHECK_OUT": str(tmp_path / "out"),
        "FAKE_VLLM_ANSWER": "<response>Familial <disease>breast cancer</disease></response>",
    }
    result = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), str(model)], env=env, cwd=tmp_path,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for label in ("inprocess", "server"):
        summary = next(line for line in lines if line.strip().startswith(f"{label}:"))
        assert "6 samples generated" in summary and "samples/s" in summary and "errors 0" in summary
        metrics = lines[lines.index(summary) + 1]
        assert "f1 " in metrics and "parse failures" in metrics
    assert (tmp_path / "out" / "inprocess" / "ncbi" / "metrics.json").exists()
    assert (tmp_path / "out" / "server" / "ncbi" / "samples.jsonl").exists()


def test_gpu_check_refuses_a_model_that_is_not_a_folder(tmp_path):
    result = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh"), str(tmp_path / "absent")],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "local model path is required" in result.stderr
