"""``evalpipe contamination``: has the model seen this benchmark? (:mod:`evalpipe.contamination`)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from evalpipe.backends.factory import make_backend
from evalpipe.config import RunConfig
from evalpipe.engines.launch import ENGINES, VLLM_NAMED, engine_options
from evalpipe.results import DEFAULT_ROOT, RunDir, RunDirError, os_problem

from evalpipe.configure import default_concurrency
from evalpipe.engines.watch import run_watched

from evalpipe.cli.common import key_env, AllowExternalOption, ApiKeyEnvOption, BaseUrlOption, ConcurrencyOption, DataDirOption, DataOption, DtypeOption, EndpointOption, EngineArgOption, EngineOption, EXIT_FAILED_REQUESTS, EXIT_INTERRUPTED, GpuMemoryOption, LimitOption, MaxRetriesOption, ModelOption, ResultsDirOption, RevisionOption, RunNameOption, SplitOption, StartupTimeoutOption, TaskArgOption, TaskFileOption, TasksDirOption, TensorParallelOption, TimeoutOption, USER_ERRORS, _fail, _user_tasks, app, console, err
from evalpipe.cli.evaluate import _parse_data, _parse_task_args
from evalpipe.execution import local_engine


@app.command()
def contamination(
    task: Annotated[Optional[str], typer.Option("--task", "-t", help="The task whose data is probed; see `evalpipe tasks` (or one --task-file).")] = None,
    task_file: TaskFileOption = [],
    tasks_dir: TasksDirOption = [],
    model: ModelOption = None,
    base_url: BaseUrlOption = [],
    engine: EngineOption = None,
    tensor_parallel_size: TensorParallelOption = None,
    dtype: DtypeOption = None,
    gpu_memory_utilization: GpuMemoryOption = None,
    revision: RevisionOption = None,
    engine_arg: EngineArgOption = [],
    startup_timeout: StartupTimeoutOption = 600.0,
    endpoint: EndpointOption = "chat",
    api_key_env: ApiKeyEnvOption = None,
    split: SplitOption = None,
    limit: LimitOption = None,
    data: DataOption = [],
    data_dir: DataDirOption = None,
    task_arg: TaskArgOption = [],
    concurrency: ConcurrencyOption = None,
    timeout: TimeoutOption = 120.0,
    max_retries: MaxRetriesOption = 6,
    allow_external_endpoint: AllowExternalOption = False,
    run_name: RunNameOption = None,
    results_dir: ResultsDirOption = DEFAULT_ROOT,
    field: Annotated[Optional[str], typer.Option(help="The input field probed (default: each sample's first text input, e.g. a question or a sentence).")] = None,
    min_tokens: Annotated[int, typer.Option(help="Skip (and count) samples whose field has fewer whitespace tokens.")] = 8,
    max_tokens: Annotated[int, typer.Option(help="The most new tokens of a completion (each gets 2 × its true half's words + 16, at most this).")] = 512,
    temperature: Annotated[float, typer.Option(help="0 = greedy (default, as the method is defined).")] = 0.0,
    seed: Annotated[Optional[int], typer.Option(help="Sampling seed passed to the endpoint.")] = None,
    resamples: Annotated[int, typer.Option(help="Paired bootstrap resamples of the guided − general difference.")] = 1000,
    bootstrap_seed: Annotated[int, typer.Option(help="Seed of the paired bootstrap.")] = 0,
    min_k: Annotated[float, typer.Option("--min-k", help="Min-K % Prob: the percent of least likely tokens averaged (0: no log-probability requests).")] = 20.0,
    reference_text: Annotated[Optional[Path], typer.Option(help="Min-K % Prob: a UTF-8 text the model cannot have memorised in this form (e.g. written after its training), scored beside the test texts.")] = None,
) -> None:
    """Probe whether a model has seen a task's test data.

    Guided vs general completion (Golchin & Surdeanu), and Min-K % Prob where the endpoint returns
    prompt log-probabilities. Each sample's first input field is cut in half; the model is asked to continue the first half
    twice, once told the data set's name and split and once not, and each completion is scored by
    ROUGE-L against the true second half. Writes RUN/contamination.json (by default RUN is the
    directory `evalpipe run` gives the same task, model and data options, so its report shows the
    probe) and resumes like a run. See docs/contamination.md for what it can and cannot show.
    """
    from evalpipe.contamination.probe import ProbeOptions

    if engine is not None and engine not in ENGINES:
        raise typer.BadParameter(f"--engine must be one of {', '.join(ENGINES)}", param_hint="--engine")
    if not base_url and os.environ.get("EVALPIPE_BASE_URL") and engine is None:
        base_url = os.environ["EVALPIPE_BASE_URL"].split()
    if engine == "llamacpp" and not model:
        model = "default"
    if not model:
        raise typer.BadParameter("--model is required (or set EVALPIPE_MODEL)", param_hint="--model")
    if engine and base_url:
        raise typer.BadParameter("give either --engine (evalpipe starts the server) or --base-url", param_hint="--engine")
    if endpoint not in ("chat", "completions"):
        raise typer.BadParameter("--endpoint must be chat or completions", param_hint="--endpoint")
    if reference_text is not None and not reference_text.is_file():
        raise typer.BadParameter(f"{reference_text}: no such file", param_hint="--reference-text")
    try:
        names = [*([task] if task else []), *_user_tasks(task_file, tasks_dir)]
        options = engine_options(engine, dict(zip(VLLM_NAMED, (tensor_parallel_size, dtype, gpu_memory_utilization,
                                                               revision))), engine_arg)
    except USER_ERRORS as exc:
        raise _fail(exc) from None
    if len(set(names)) != 1:
        raise typer.BadParameter("the probe takes one task: --task NAME, or one --task-file", param_hint="--task")
    if concurrency is None:
        concurrency = default_concurrency(engine)
    try:
        config = RunConfig(
            tasks=(names[0],), model=model, base_url=base_url[0] if base_url else None, replicas=tuple(base_url[1:]),
            endpoint="chat" if endpoint == "chat" else "completions",  # (checked above)
            engine=engine, engine_options=options, api_key_env=key_env(api_key_env, "--api-key-env"),
            temperature=temperature, seed=seed, split=split, limit=limit, data=_parse_data(data),
            data_dir=str(Path(data_dir).resolve()) if data_dir else None, concurrency=concurrency,
            timeout_s=timeout, max_retries=max_retries, allow_external_endpoint=allow_external_endpoint,
            run_name=run_name, task_args=_parse_task_args(task_arg))
        probe = ProbeOptions(field=field, min_tokens=min_tokens, max_tokens=max_tokens, resamples=resamples,
                             seed=bootstrap_seed, min_k=min_k,
                             reference_text=reference_text.resolve() if reference_text else None)
    except ValueError as exc:  # a number or name the probe cannot use: bad usage, nothing written yet
        raise typer.BadParameter(str(exc)) from None
    raise typer.Exit(_execute(config, probe, results_dir, startup_timeout))


def _execute(config: RunConfig, probe: Any, results_dir: Path, startup_timeout: float) -> int:
    from evalpipe.contamination.probe import execute_probe
    from evalpipe.pipeline.progress import make_progress

    def announce(run: RunDir, total: int, pending: int) -> None:
        err.print(f"contamination probe {run.path}: {total} requests, {total - pending} already answered, "
                  f"{pending} to send", highlight=False)

    try:
        with local_engine(config, startup_timeout, lambda line: err.print(line, highlight=False)) as (config, server):
            outcome = asyncio.run(run_watched(
                execute_probe(config, probe, make_backend, results_dir, make_progress(err), announce),
                [server] if server is not None else []))
    except KeyboardInterrupt:
        err.print("interrupted: every answer received so far is saved; run the same command again to resume",
                  style="yellow")
        return EXIT_INTERRUPTED
    except USER_ERRORS as exc:  # (an engine that died exits 4, an endpoint gone 5: their exit_code)
        raise _fail(exc) from None
    except OSError as exc:
        raise _fail(RunDirError(os_problem(exc))) from None
    console.print(summary_line(outcome.result), highlight=False, soft_wrap=True)
    console.print(f"results: {outcome.run_dir.path / 'contamination.json'}  (requests sent {outcome.sent}, "
                  f"from store {outcome.cached})", highlight=False, soft_wrap=True)
    if outcome.failed:
        err.print(f"{outcome.failed} request(s) failed for good (see contamination.json: errors, "
                  "min_k_prob.unanswered); "
                  "re-run the same command to retry only those", style="yellow")
        return EXIT_FAILED_REQUESTS
    return 0


def summary_line(result: dict[str, Any]) -> str:
    """One line: the verdict and the numbers it rests on."""
    from evalpipe.contamination.result import summary_text

    return summary_text(result)
