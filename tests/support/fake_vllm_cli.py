"""A stand-in for the ``vllm`` command (``vllm serve MODEL …``) for machines without a GPU.

It accepts exactly the options evalpipe passes, under the names vLLM 0.33.0 gives them
(``vllm/engine/arg_utils.py``, ``vllm/entrypoints/common/cli_args.py``); an unknown option fails
with argparse's exit code 2, as the real command would. It then serves the fake OpenAI server with
vLLM's extra routes (``/health``, ``/tokenize``, ``max_model_len`` in ``/v1/models``).

Environment: ``FAKE_VLLM_ANSWER`` — the answer to every generation request (default: echo);
``FAKE_VLLM_ARGV`` — a file the command line is written to, for tests to inspect;
``FAKE_VLLM_DIE_AFTER`` — answer that many generation requests, then log an error line and kill
the server with SIGSEGV on the next one (an engine crashing mid-run, as llama.cpp did on an AVX-512
VM).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence

from tests.support.fake_openai import FakeOpenAIServer, _serve_until_signalled, echo_responder


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve")
    serve.add_argument("model_tag")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", nargs="+")
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    serve.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=None)
    serve.add_argument("--max-model-len", type=int)
    serve.add_argument("--dtype", default="auto")
    serve.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    serve.add_argument("--revision")
    # two of the many options users pass through with --engine-arg
    serve.add_argument("--max-num-seqs", type=int)
    serve.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=False)
    return parser


def _dying(responder, answers: int):
    """``responder`` for ``answers`` requests; then the process dies with SIGSEGV."""
    count = 0

    def answer(body):
        nonlocal count
        count += 1
        if count > answers:
            print("ERROR: EngineCore: segmentation fault in the CPU kernel", flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        return responder(body)

    return answer


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if os.environ.get("FAKE_VLLM_ARGV"):
        with open(os.environ["FAKE_VLLM_ARGV"], "w", encoding="utf-8") as handle:
            json.dump(argv, handle)
    args = _parser().parse_args(argv)
    answer = os.environ.get("FAKE_VLLM_ANSWER")
    responder = (lambda body: answer) if answer is not None else echo_responder
    if os.environ.get("FAKE_VLLM_DIE_AFTER"):
        responder = _dying(responder, int(os.environ["FAKE_VLLM_DIE_AFTER"]))
    server = FakeOpenAIServer(
        models=tuple(args.served_model_name or [args.model_tag]),
        responder=responder,
        port=args.port,
        max_model_len=args.max_model_len or 4096,
        tokenize=True,
    )
    print(f"INFO: fake vLLM serving {args.model_tag} on port {args.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_until_signalled(server))
    return 0


if __name__ == "__main__":
    sys.exit(main())
