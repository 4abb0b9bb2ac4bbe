#!/usr/bin/env bash
# GPU check for evalpipe's vLLM paths, for a GPU machine WITHOUT network access.
#
#   scripts/gpu_check.sh MODEL_DIR [WHEELS_DIR]
#
# MODEL_DIR   a local Hugging Face model folder (e.g. a small instruct model such as
#             Qwen2.5-0.5B-Instruct copied onto the machine); nothing is downloaded.
# WHEELS_DIR  optional folder of wheels brought along (vllm and evalpipe's dependencies); when
#             given, everything is installed from it with --no-index.
#
# It runs 50 NCBI Disease samples twice — through the in-process vLLM backend and through a
# `vllm serve` subprocess driven over HTTP — and prints wall time, samples/s, output tokens/s and
# the metrics of both. Budget: under 8 minutes end to end on one H100/H200 with a ~0.5B model
# (most of it is vLLM start-up, twice).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

model="${1:?usage: scripts/gpu_check.sh MODEL_DIR [WHEELS_DIR]}"
wheels="${2:-}"
[ -d "$model" ] || { echo "gpu_check: $model is not a folder (a local model path is required: no network here)" >&2; exit 2; }
python="${PYTHON:-python3}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 PYTHONUNBUFFERED=1
limit="${GPU_CHECK_LIMIT:-50}"
out="${GPU_CHECK_OUT:-$(mktemp -d)/gpu-check}"

if [ -n "$wheels" ]; then
    echo "== installing from $wheels (no index)"
    "$python" -m pip install -q --no-index --find-links "$wheels" vllm
    "$python" -m pip install -q --no-index --find-links "$wheels" --no-build-isolation -e .
else
    "$python" -c 'import evalpipe' 2>/dev/null || "$python" -m pip install -q --no-deps -e .
fi
if [ "${GPU_CHECK_DEVICE_CHECK:-1}" = 1 ]; then  # 0 only in evalpipe's own test of this script
    "$python" -c 'import vllm, torch; assert torch.cuda.is_available(), "no CUDA device"; print("vllm", vllm.__version__, "torch", torch.__version__, torch.cuda.get_device_name(0))'
fi

summarise() {  # $1 label, $2 run dir, $3 and $4 start and end (epoch seconds) including engine start-up
    "$python" - "$1" "$2" "$3" "$4" <<'PY'
import json, sys, pathlib
label, run, wall = sys.argv[1], pathlib.Path(sys.argv[2]), float(sys.argv[4]) - float(sys.argv[3])
metrics = json.loads((run / "metrics.json").read_text())["ncbi_disease"]
summary = json.loads((run / "summary.json").read_text())
task, seconds = summary["tasks"]["ncbi_disease"], summary["run"]["fetch_seconds"] or float("nan")
n = metrics["n"]
print(f"{label:>10}: {n} samples generated in {seconds:.1f}s ({wall:.0f}s with start-up) = "
      f"{n / seconds:.1f} samples/s, {task['completion_tokens'] / seconds:.0f} output tokens/s, "
      f"errors {int(metrics['errors'])}")
print(f"{'':>10}  f1 {metrics['f1']:.4f}  precision {metrics['precision']:.4f}  recall {metrics['recall']:.4f}  "
      f"accuracy {metrics['accuracy']:.4f}  parse failures {metrics['parse_failure_rate']:.3f}")
PY
}

run_one() {  # $1 label, $2 engine
    local dir="$out/$1" started ended
    started=$(date +%s.%N)
    "$python" -m evalpipe.cli run --task ncbi_disease --engine "$2" --model "$model" --limit "$limit" \
        --context-length 4096 --concurrency 64 --results-dir "$dir" --run-name ncbi
    ended=$(date +%s.%N)
    summarise "$1" "$dir/ncbi" "$started" "$ended"
}

echo "== in-process vLLM (vllm.LLM)"
run_one inprocess vllm-inprocess
echo "== vLLM server (vllm serve, OpenAI-compatible HTTP)"
run_one server vllm
echo "== results under $out"
