"""Local engines: ``evalpipe serve``, and ``evalpipe demo`` — the main job of ``./run.sh``."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from collections.abc import Iterable
from typing import Annotated, Any, Optional

import typer

from evalpipe.config import RunConfig
from evalpipe.engines.launch import VLLM_NAMED, engine_options, server_spec
from evalpipe.engines.server import ManagedServer
from evalpipe.engines.watch import POLL_S, EngineDied
from evalpipe.errors import UsageError
from evalpipe.results import DEFAULT_ROOT
from evalpipe.outcome import RunError
from evalpipe.tasks.base import TaskSpec
from evalpipe.tasks.registry import resolve

from evalpipe.cli.evaluate import execute_run
from evalpipe.configure import LLAMACPP_CONCURRENCY
from evalpipe.errors import EXIT_ENGINE_DIED
from evalpipe.cli.common import DtypeOption, EngineArgOption, GpuMemoryOption, RevisionOption, StartupTimeoutOption, TensorParallelOption, USER_ERRORS, _fail, app, console, err


@app.command()
def serve(
    engine: Annotated[str, typer.Option(help="llamacpp (CPU, GGUF) or vllm (GPU).")] = "llamacpp",
    model: Annotated[Optional[str], typer.Option(help="GGUF file (llamacpp; default: bundled SmolLM2-135M) or model folder/name (vllm).")] = None,
    context_length: Annotated[Optional[int], typer.Option(help="Context length (llamacpp n_ctx, vllm max-model-len).")] = None,
    port: Annotated[Optional[int], typer.Option(help="Port on 127.0.0.1 (default: a free one).")] = None,
    tensor_parallel_size: TensorParallelOption = None,
    dtype: DtypeOption = None,
    gpu_memory_utilization: GpuMemoryOption = None,
    revision: RevisionOption = None,
    engine_arg: EngineArgOption = [],
    startup_timeout: StartupTimeoutOption = 600.0,
) -> None:
    """Start a local OpenAI-compatible server until Ctrl-C.

    It listens on loopback; the command to evaluate with it is printed.
    """
    if engine not in ("llamacpp", "vllm"):
        raise typer.BadParameter("--engine must be llamacpp or vllm", param_hint="--engine")
    try:
        options = engine_options(engine, dict(zip(VLLM_NAMED, (tensor_parallel_size, dtype, gpu_memory_utilization,
                                                               revision))), engine_arg)
    except UsageError as exc:
        raise typer.BadParameter(str(exc), param_hint="--engine") from None
    try:
        spec = server_spec(engine, model, context_length, options, port=port)
        with ManagedServer(spec, startup_timeout_s=startup_timeout, log=lambda line: err.print(line, highlight=False, markup=False)) as server:
            console.print(f"{spec.name} serves {spec.model!r} at {spec.base_url}  (Ctrl-C stops it)\n"
                          f"  ./run.sh run --task TASK --base-url {spec.base_url} --model {spec.model}   (tasks: ./run.sh tasks)",
                          highlight=False)
            sys.stdout.flush()  # the command to use, at once even through a pipe
            while (death := server.died()) is None:  # watched: a server that dies ends `serve` with its line
                time.sleep(POLL_S)
            raise death
    except KeyboardInterrupt:
        err.print("stopped")
    except EngineDied as exc:
        raise _fail(exc, EXIT_ENGINE_DIED) from None
    except USER_ERRORS as exc:
        raise _fail(exc) from None


def _quick_caps(specs: Iterable[TaskSpec]) -> dict[str, dict[str, Any]]:
    """The demo's per-task generation caps (each task's ``TaskSpec.quick``), as recorded in config.json."""
    return {s.name: s.quick.to_json() for s in specs if s.quick is not None}


def _caps_text(caps: dict[str, dict[str, Any]]) -> str:
    return "; ".join(f"{task} at most {cap['max_tokens']} new tokens"
                     + (f", stop at {', '.join(repr(x) for x in cap['stop'])}" if cap.get("stop") else "")
                     for task, cap in caps.items())


@app.command()
def demo(
    limit: Annotated[int, typer.Option(help="Samples per task.")] = 20,
    model: Annotated[Optional[str], typer.Option(envvar="EVALPIPE_MODEL", help="Model name at --base-url.")] = None,
    base_url: Annotated[Optional[str], typer.Option(envvar="EVALPIPE_BASE_URL", help="Evaluate this OpenAI-compatible endpoint instead of the embedded engine.")] = None,
    results_dir: Annotated[Path, typer.Option(help="Where run directories go.")] = DEFAULT_ROOT,
    report: Annotated[bool, typer.Option(help="Write the run's report (report.html with the sample browser) when it is done.")] = True,
    reuse_answers_from_other_endpoint: Annotated[bool, typer.Option(help="Reuse answers the run directory holds from another endpoint (recorded in config.json).")] = False,
) -> None:
    """The main job of ./run.sh: the demo suite, then its report.

    Evaluates the tasks whose data ships with evalpipe on a few samples each, with quick generation
    caps (each task's own: answers stop where the task's answer format ends; said in the output and
    recorded in config.json), then writes the run's report into RUN/report/ and prints the path to
    open. With an endpoint (EVALPIPE_BASE_URL + EVALPIPE_MODEL) it uses that; otherwise it starts the
    embedded llama.cpp server with SmolLM2-135M-Instruct on loopback, evaluates, and stops it.
    """
    specs = resolve([], ["demo"])
    caps = _quick_caps(specs)
    names = ", ".join(s.name for s in specs)
    if base_url:
        if not model:
            raise typer.BadParameter("EVALPIPE_MODEL (or --model) must name the model at EVALPIPE_BASE_URL")
        err.print(f"demo: evaluating {model} at {base_url} on {names}, {limit} samples each", highlight=False)
        config = RunConfig(tasks=tuple(s.name for s in specs), suites=("demo",), model=model,
                           base_url=base_url, limit=limit, generation=caps,
                           reuse_answers_from_other_endpoint=reuse_answers_from_other_endpoint)
    else:
        from evalpipe.engines.llamacpp import llamacpp_available

        problem = llamacpp_available()
        if problem:
            raise _fail(RunError(f"no endpoint given and the embedded engine is unavailable: {problem}. "
                                 "Or point evalpipe at a server: EVALPIPE_BASE_URL=… EVALPIPE_MODEL=… ./run.sh"))
        err.print("demo: evaluating the bundled SmolLM2-135M-Instruct (llama.cpp, CPU) on "
                  f"{names}, {limit} samples each", highlight=False)
        config = RunConfig(tasks=tuple(s.name for s in specs), suites=("demo",), model="default",
                           engine="llamacpp", limit=limit, concurrency=LLAMACPP_CONCURRENCY, generation=caps)
    if caps:
        err.print(f"demo: quick generation caps (recorded in config.json): {_caps_text(caps)}", highlight=False)
    code, outcome = execute_run(config, results_dir)
    if outcome is not None and report:
        from evalpipe.report import build_report

        try:
            built = build_report([outcome.run_dir.path], outcome.run_dir.path / "report")
        except USER_ERRORS as exc:
            raise _fail(exc) from None
        console.print(f"report: {built.html}  (written in {built.seconds:.1f}s; open it in a browser: "
                      f"{built.html.resolve().as_uri()})", highlight=False, soft_wrap=True)
    console.print("next: ./run.sh tasks  ·  ./run.sh run --help  ·  ./run.sh report RUN [RUN …] to compare runs",
                  highlight=False)
    raise typer.Exit(code)
