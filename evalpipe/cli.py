"""Command line: ``evalpipe run | score | judge | show | tasks | report | compare | serve | demo``.

Every user-facing failure (bad data, template, endpoint, options) ends as one clear line on
stderr and a non-zero exit code — never a traceback — and never prints an API key.

Exit codes: 0 success; 1 a problem stopped the run before it finished (bad input, unreachable
endpoint); 2 bad command-line usage; 3 the run finished but some requests failed for good
(re-running the same command retries only those); 130 interrupted (Ctrl-C; re-run to resume).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from evalpipe.backends.base import BackendError
from evalpipe.backends.factory import make_backend
from evalpipe.config import RunConfig, local_model_fingerprint
from evalpipe.data.errors import DataError
from evalpipe.engines.launch import ENGINES, VLLM_NAMED, engine_options, server_spec
from evalpipe.engines.llamacpp import EngineUnavailable
from evalpipe.engines.server import ManagedServer, ServerStartError
from evalpipe.prompting import TemplateError, variant_templates
from evalpipe.cache import StoreError
from evalpipe.results import DEFAULT_ROOT, RunDir, RunDirBusy, RunDirError, os_problem
from evalpipe.rescoring import rescore
from evalpipe.outcome import RunError, RunOutcome
from evalpipe.runner import execute
from evalpipe.tasks.registry import all_tasks, register_task_file, register_tasks_dir, resolve, suites
from evalpipe.robustness import plain_metrics
from evalpipe.terminal import metrics_table, robustness_table, summary_lines

#: what ``evalpipe --help`` says first (plain text: help is not reStructuredText)
APP_HELP = ("Evaluate LLMs on clinical and biomedical NLP tasks: resumable runs, re-scoring without a model, "
            "reports with intervals and a sample browser.")
# Click's plain help layout, not rich's boxes: at 80 columns rich cut option names
# (--tensor-parallel…); click puts a long option name on its own line and wraps only the help text.
# Command docstrings start with one sentence of at most ~60 characters: the command list shows it uncut.
app = typer.Typer(add_completion=False, no_args_is_help=True, help=APP_HELP, rich_markup_mode=None)
# markup off: paths and metric names contain brackets (bertscore[…]_f1, evalpipe[vllm])
console = Console(width=None if sys.stdout.isatty() else 160, markup=False)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160, markup=False)

EXIT_FAILED_REQUESTS = 3
EXIT_INTERRUPTED = 130
USER_ERRORS = (RunError, BackendError, DataError, TemplateError, FileNotFoundError, KeyError, ValueError,
               EngineUnavailable, ServerStartError, RunDirBusy, RunDirError, StoreError)


def _fail(exc: BaseException) -> typer.Exit:
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    err.print(Text("error: ", style="bold red") + Text(message), highlight=False, soft_wrap=True)
    return typer.Exit(1)


# engine options shared by `run` and `serve`
TensorParallelOption = Annotated[Optional[int], typer.Option(help="vLLM: GPUs per model.")]
DtypeOption = Annotated[Optional[str], typer.Option(help="vLLM: dtype (auto, bfloat16, …).")]
GpuMemoryOption = Annotated[Optional[float], typer.Option(help="vLLM: share of GPU memory to use.")]
RevisionOption = Annotated[Optional[str], typer.Option(help="vLLM: model revision.")]
EngineArgOption = Annotated[list[str], typer.Option(
    "--engine-arg", help="Any other engine option, KEY=VALUE (repeatable), passed through: vLLM e.g. "
    "max-num-seqs=256, quantization=awq, enforce-eager=true; llama.cpp e.g. n_gpu_layers=20.")]
StartupTimeoutOption = Annotated[float, typer.Option(help="Seconds to wait for an engine evalpipe starts to answer.")]
# judging options shared by `judge` and `run` (see evalpipe.judging)
JudgeOption = Annotated[list[str], typer.Option("--judge", help="A judge of free-text answers: MODEL=URL (an OpenAI-compatible /v1 endpoint serving MODEL); repeat for a jury.")]
JudgeEngineOption = Annotated[Optional[str], typer.Option("--judge-engine", help="Also judge with a local engine evalpipe starts: llamacpp (the bundled SmolLM2-135M; an offline demo, not a useful judge).")]
JudgeKeyOption = Annotated[str, typer.Option("--judge-api-key-env", help="Environment variable holding the judges' API key (never written anywhere).")]
JudgeRubricOption = Annotated[list[str], typer.Option("--judge-rubric", help="A rubric template FILE for every judged task, or TASK=FILE for one (repeatable; default: each task's own, see prompts/judge/).")]

# ---- user task files (run, score, tasks) ----------------------------------------------------
TaskFileOption = Annotated[list[Path], typer.Option(
    "--task-file", help="A task file (YAML) to run (repeatable); see docs/tasks.md and `evalpipe new-task`.")]
TasksDirOption = Annotated[list[Path], typer.Option(
    "--tasks-dir", help="A folder of task files (*.yaml) to make available as --task NAME (repeatable; "
    "$EVALPIPE_TASKS_DIR is always loaded).")]


def _user_tasks(task_files: list[Path], tasks_dirs: list[Path]) -> list[str]:
    """Register the user's task folders and files; the names of the files' tasks (they are run)."""
    for folder in tasks_dirs:
        register_tasks_dir(folder)
    return [register_task_file(path).name for path in task_files]


DEFAULT_CONCURRENCY = 64
#: the in-process engine is fed in batches of up to 2 × concurrency prompts (see
#: backends/vllm_inprocess.py): large batches keep a GPU busy, and vLLM schedules them itself
INPROCESS_CONCURRENCY = 256
#: the llama.cpp server evalpipe starts answers one request at a time: more in flight only queue
#: there until they pass --timeout (measured: 64 in flight on SmolLM2 → answers waiting ~2 minutes)
LLAMACPP_CONCURRENCY = 2


def _parse_data(pairs: list[str]) -> dict[str, str]:
    data: dict[str, str] = {}
    for pair in pairs:
        key, sep, path = pair.partition("=")
        if not sep or not key or not path:
            raise typer.BadParameter(f"--data expects TASK=PATH or TASK:ROLE=PATH, got {pair!r}", param_hint="--data")
        data[key] = str(Path(path).resolve())
    return data


def _print_run(metrics: dict[str, dict[str, float]], run: RunDir, compat: str | None) -> None:
    """The metrics table and what the summary says about them: one rendering for run, score, show."""
    variants = run.read_variants(compat)  # prompt conditions: their spread in a table of its own
    shown = {task: plain_metrics(values) for task, values in metrics.items()} if variants else metrics
    console.print(metrics_table(shown, title=f"{run.path}" + (f" [{compat}]" if compat else "")))
    if variants:
        console.print(robustness_table(variants, metrics))
    for level, text in summary_lines(metrics, run.read_summary(compat), compat):
        if level == "warn":
            err.print(text, style="yellow", highlight=False)
        else:
            console.print(text, highlight=False)


def _parse_task_args(pairs: list[str]) -> dict[str, str]:
    args: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or ":" not in key or not key.partition(":")[2]:
            raise typer.BadParameter(f"--task-arg expects TASK:NAME=VALUE, got {pair!r}", param_hint="--task-arg")
        args[key] = value
    return args


ParquetOption = Annotated[bool, typer.Option(
    help="Also write the samples as parquet into the run directory (samples.parquet; needs pyarrow).")]


def _check_parquet(parquet: bool) -> None:
    """Refuse ``--parquet`` without pyarrow before any work is done (not after a long run)."""
    if parquet:
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise _fail(RuntimeError("--parquet needs the pyarrow package: pip install pyarrow")) from None


def _write_parquet(run: RunDir, compat: str | None) -> Path:
    """The run's samples (``samples.jsonl``, or a compatibility scoring's) as ``samples[.COMPAT].parquet``."""
    from evalpipe.frames import load_samples, write_parquet

    return write_parquet(load_samples(run.path, compat),
                         run.path / (f"samples.{compat}.parquet" if compat else "samples.parquet"))


def _report(outcome: RunOutcome, compat: str | None, parquet: bool = False) -> int:
    _print_run(outcome.metrics, outcome.run_dir, compat)
    console.print(f"results: {outcome.run_dir.path}  (answers sent {outcome.sent}, from store {outcome.cached})")
    if parquet:
        console.print(f"parquet: {_write_parquet(outcome.run_dir, compat)}", highlight=False)
    failed = sum(int(t.metrics.get("errors", 0)) for t in outcome.tasks)
    if failed:
        err.print(f"{failed} sample(s) have no answer (see summary.json); "
                  "re-run the same command to retry only those", style="yellow")
        return EXIT_FAILED_REQUESTS
    return 0


@app.command()
def run(
    task: Annotated[list[str], typer.Option("--task", "-t", help="Task name (repeatable); see `evalpipe tasks`.")] = [],
    suite: Annotated[list[str], typer.Option("--suite", help="Suite name (repeatable).")] = [],
    task_file: TaskFileOption = [],
    tasks_dir: TasksDirOption = [],
    model: Annotated[Optional[str], typer.Option(envvar="EVALPIPE_MODEL", help="Model name as the endpoint serves it.")] = None,
    base_url: Annotated[list[str], typer.Option(help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1; repeat for replicas of the same model (default: $EVALPIPE_BASE_URL).")] = [],
    engine: Annotated[Optional[str], typer.Option(help="Start a local engine: llamacpp (default model: the bundled SmolLM2-135M), vllm (server), vllm-inprocess.")] = None,
    tensor_parallel_size: TensorParallelOption = None,
    dtype: DtypeOption = None,
    gpu_memory_utilization: GpuMemoryOption = None,
    revision: RevisionOption = None,
    engine_arg: EngineArgOption = [],
    startup_timeout: StartupTimeoutOption = 600.0,
    endpoint: Annotated[str, typer.Option(help="chat (instruction-tuned models) or completions (base models).")] = "chat",
    api_key_env: Annotated[str, typer.Option(help="Name of the environment variable holding the API key (its value is never written anywhere). Unset = 'EMPTY', fine for local servers.")] = "OPENAI_API_KEY",
    shots: Annotated[Optional[int], typer.Option(help="Few-shot examples (default: each task's own; `evalpipe tasks` lists them).")] = None,
    fewshot_seed: Annotated[Optional[int], typer.Option(help="Draw shots at random from the train split with this seed (default: the first K).")] = None,
    fewshot_as_turns: Annotated[bool, typer.Option(help="Give shots as user/assistant chat turns instead of one message.")] = False,
    system_role: Annotated[bool, typer.Option(help="Send the system prompt as a system message (--no-system-role merges it into the first user turn).")] = True,
    temperature: Annotated[float, typer.Option(help="0 = greedy (default).")] = 0.0,
    top_p: Annotated[Optional[float], typer.Option()] = None,
    seed: Annotated[Optional[int], typer.Option(help="Sampling seed passed to the endpoint.")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="Override the task's max_tokens.")] = None,
    split: Annotated[Optional[str], typer.Option(help="Evaluated split (default: the task's test split).")] = None,
    limit: Annotated[Optional[int], typer.Option(help="Only the first N samples, in file order.")] = None,
    ids: Annotated[Optional[str], typer.Option(help="Comma-separated sample ids to evaluate.")] = None,
    data: Annotated[list[str], typer.Option("--data", help="TASK=PATH: the task's evaluated file; TASK:ROLE=PATH another file it reads (its roles: `evalpipe tasks`; repeatable).")] = [],
    context_length: Annotated[Optional[int], typer.Option(help="Model context in tokens for budgeting long inputs (default: ask the server).")] = None,
    data_dir: Annotated[Optional[str], typer.Option(help="Folder holding the data files under their distributed names.")] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="Requests in flight at most (default 64; with --engine vllm-inprocess 256, so a batch holds up to 512 prompts; with --engine llamacpp 2).")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds per request attempt.")] = 120.0,
    max_retries: Annotated[int, typer.Option(help="Retries per request for retryable failures.")] = 6,
    compat: Annotated[Optional[str], typer.Option(help="Score like a reference implementation, e.g. evalscope.")] = None,
    rouge_stemmer: Annotated[bool, typer.Option(help="ROUGE with Porter stemming.")] = False,
    bertscore_model: Annotated[Optional[str], typer.Option(help="BERTScore encoder (local path or hub name).")] = None,
    bertscore_layers: Annotated[Optional[int], typer.Option(help="BERTScore layer (required for an unknown local encoder).")] = None,
    bertscore_idf: Annotated[bool, typer.Option(help="BERTScore with idf weighting.")] = False,
    bertscore_baseline: Annotated[Optional[str], typer.Option(help="BERTScore baseline file for rescaling.")] = None,
    umls_extractor: Annotated[Optional[str], typer.Option(help="UMLS concept extractor: scispacy, or none.")] = None,
    allow_external_endpoint: Annotated[bool, typer.Option(help="Allow credentialed (PhysioNet) data to go to a non-local endpoint.")] = False,
    run_name: Annotated[Optional[str], typer.Option(help="Run directory name (default: derived from the options, so the same command resumes).")] = None,
    results_dir: Annotated[Path, typer.Option(help="Where run directories go.")] = DEFAULT_ROOT,
    task_arg: Annotated[list[str], typer.Option("--task-arg", help="A task's own setting, TASK:NAME=VALUE (repeatable; `evalpipe tasks` lists each task's settings).")] = [],
    embeddings_url: Annotated[Optional[str], typer.Option(help="Retrieval tasks: an OpenAI-compatible /v1 URL serving an embedding model.")] = None,
    embeddings_model: Annotated[Optional[str], typer.Option(help="Retrieval tasks: the embedding model's name at --embeddings-url.")] = None,
    embeddings_path: Annotated[Optional[str], typer.Option(help="Retrieval tasks: a local sentence-transformers model folder instead of a URL.")] = None,
    embeddings_batch_size: Annotated[Optional[int], typer.Option(help="Retrieval tasks: texts per embedding request.")] = None,
    judge: JudgeOption = [],
    judge_engine: JudgeEngineOption = None,
    judge_api_key_env: JudgeKeyOption = "OPENAI_API_KEY",
    judge_rubric: JudgeRubricOption = [],
    mcqa_scoring: Annotated[str, typer.Option("--mcqa-scoring", help="Multiple-choice tasks: generate (parse the letter of a generated answer) or loglikelihood (score each option's letter by its log-probability after the prompt; needs /v1/completions with echo and logprobs, as vLLM serves).")] = "generate",
    prompt_variants: Annotated[Optional[str], typer.Option(help="Evaluate each prompt variant: all, or NAME[,NAME…] (`evalpipe tasks` lists them; 'default' is the canonical prompt). Spread across them: variants.json.")] = None,
    shot_orders: Annotated[int, typer.Option(help="Evaluate K orders of the shots: as selected, and K-1 seeded permutations.")] = 1,
    shots_sweep: Annotated[Optional[str], typer.Option(help="Evaluate several shot counts, e.g. 0,1,3,5 (each the first k of the largest count's shots).")] = None,
    parquet: ParquetOption = False,
) -> None:
    """Evaluate a model on tasks; the same command resumes a run.

    Re-running an interrupted or partly failed run sends only the prompts without a stored answer.
    With --judge, its free-text answers are then rated by LLM judges.
    """
    if engine is not None and engine not in ENGINES:
        raise typer.BadParameter(f"--engine must be one of {', '.join(ENGINES)}", param_hint="--engine")
    _check_parquet(parquet)
    if not base_url and os.environ.get("EVALPIPE_BASE_URL") and engine is None:
        base_url = os.environ["EVALPIPE_BASE_URL"].split()
    if engine == "llamacpp" and not model:
        model = "default"
    try:
        task = [*task, *_user_tasks(task_file, tasks_dir)]
        specs = resolve(task, suite)
    except (KeyError, DataError, ValueError) as exc:
        raise _fail(exc)
    if (embeddings_url is None) == (embeddings_path is None) and any(s.ranking for s in specs):
        raise typer.BadParameter("retrieval tasks need --embeddings-url URL --embeddings-model NAME, or "
                                 "--embeddings-path DIR (not both)", param_hint="--embeddings-url")
    if embeddings_url and not embeddings_model:
        raise typer.BadParameter("--embeddings-url needs --embeddings-model", param_hint="--embeddings-model")
    if not model and specs and all(s.ranking for s in specs):
        # only retrieval tasks: the embedding model is the model of the run (it names the run directory)
        model = embeddings_model or Path(embeddings_path or "embedder").name
    if not model:
        raise typer.BadParameter("--model is required (or set EVALPIPE_MODEL)", param_hint="--model")
    if engine and base_url:
        raise typer.BadParameter("give either --engine (evalpipe starts the server) or --base-url", param_hint="--engine")
    if endpoint not in ("chat", "completions"):
        raise typer.BadParameter("--endpoint must be chat or completions", param_hint="--endpoint")
    if limit is not None and limit < 1:
        raise typer.BadParameter("--limit must be at least 1", param_hint="--limit")
    if concurrency is None:
        concurrency = {"vllm-inprocess": INPROCESS_CONCURRENCY, "llamacpp": LLAMACPP_CONCURRENCY}.get(
            engine or "", DEFAULT_CONCURRENCY)
    if concurrency < 1:
        raise typer.BadParameter("--concurrency must be at least 1", param_hint="--concurrency")
    try:
        options = engine_options(engine, dict(zip(VLLM_NAMED, (tensor_parallel_size, dtype, gpu_memory_utilization,
                                                               revision))), engine_arg)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--engine") from None
    try:
        config = RunConfig(
            tasks=tuple(s.name for s in specs), suites=tuple(suite), model=model,
            base_url=base_url[0] if base_url else None, replicas=tuple(base_url[1:]), endpoint=endpoint,
            engine=engine, engine_options=options,
            api_key_env=api_key_env, shots=shots, fewshot_seed=fewshot_seed, fewshot_as_turns=fewshot_as_turns,
            system_role=system_role, temperature=temperature, top_p=top_p, seed=seed, max_tokens=max_tokens,
            split=split, limit=limit, ids=tuple(i.strip() for i in ids.split(",") if i.strip()) if ids else None,
            data=_parse_data(data), data_dir=str(Path(data_dir).resolve()) if data_dir else None,
            context_length=context_length, concurrency=concurrency, timeout_s=timeout,
            max_retries=max_retries, compat=compat, allow_external_endpoint=allow_external_endpoint,
            run_name=run_name,
            metric_options=_metric_options(rouge_stemmer, bertscore_model, bertscore_layers, bertscore_idf,
                                           bertscore_baseline, umls_extractor),
            task_args=_parse_task_args(task_arg), embeddings_url=embeddings_url, embeddings_model=embeddings_model,
            embeddings_path=str(Path(embeddings_path).resolve()) if embeddings_path else None,
            embeddings_batch_size=embeddings_batch_size, choice_scoring=mcqa_scoring,
            **_condition_options(prompt_variants, shot_orders, shots_sweep),
        )
    except ValueError as exc:  # a number or name the run cannot use: bad usage, nothing written yet
        raise typer.BadParameter(str(exc)) from None
    if not (judge or judge_engine):
        raise typer.Exit(_execute(config, results_dir, startup_timeout, parquet)[0])
    panel, options = _judge_plan(judge, judge_engine, judge_api_key_env, judge_rubric, allow_external_endpoint)
    try:  # the patient-data guard, before the evaluation sends anything anywhere
        from evalpipe.judging.panel import check_patient_data

        check_patient_data([s.name for s in specs if s.credentialed and s.answer_kind], panel, allow_external_endpoint)
    except USER_ERRORS as exc:
        raise _fail(exc)
    code, outcome = _execute(config, results_dir, startup_timeout, parquet)
    if outcome is None:  # interrupted: nothing to judge yet
        raise typer.Exit(code)
    judged = _judge_run(outcome.run_dir.path, panel, judge_engine, options, startup_timeout)
    raise typer.Exit(code or judged)


def _condition_options(prompt_variants: str | None, shot_orders: int, shots_sweep: str | None) -> dict:
    """``--prompt-variants``, ``--shot-orders``, ``--shots-sweep`` as RunConfig fields (evalpipe.conditions)."""
    variants = tuple(v.strip() for v in (prompt_variants or "").split(",") if v.strip())
    if prompt_variants is not None and not variants:
        raise typer.BadParameter("expects all or NAME[,NAME…]", param_hint="--prompt-variants")
    if shot_orders < 1:
        raise typer.BadParameter("must be at least 1", param_hint="--shot-orders")
    try:
        counts = tuple(int(k) for k in (shots_sweep or "").split(",") if k.strip())
    except ValueError:
        raise typer.BadParameter(f"expects shot counts like 0,1,3,5, got {shots_sweep!r}", param_hint="--shots-sweep") from None
    if shots_sweep is not None and (not counts or min(counts) < 0):
        raise typer.BadParameter(f"expects shot counts ≥ 0 like 0,1,3,5, got {shots_sweep!r}", param_hint="--shots-sweep")
    return {"prompt_variants": variants, "shot_orders": shot_orders, "shots_sweep": counts}


def _metric_options(rouge_stemmer: bool, bertscore_model: str | None, bertscore_layers: int | None,
                    bertscore_idf: bool, bertscore_baseline: str | None, umls_extractor: str | None) -> dict:
    """Only the options the user set, so config.json shows what was asked for."""
    given = {
        "rouge_stemmer": rouge_stemmer or None,
        "bertscore_model": bertscore_model,
        "bertscore_num_layers": bertscore_layers,
        "bertscore_idf": bertscore_idf or None,
        "bertscore_baseline": bertscore_baseline,
        "umls_extractor": umls_extractor,
    }
    return {k: v for k, v in given.items() if v is not None}


def _execute(config: RunConfig, results_dir: Path, startup_timeout: float = 600.0,
             parquet: bool = False) -> tuple[int, RunOutcome | None]:
    """Run (starting and stopping a local engine if asked) and print the outcome.

    Returns the exit code and the outcome (None when interrupted).
    """
    from evalpipe.progress import make_progress

    def announce(run: RunDir, total: int, pending: int) -> None:
        err.print(f"run {run.path}: {total} prompts, {total - pending} already answered, {pending} to send",
                  highlight=False)

    server: ManagedServer | None = None
    try:
        if config.engine is not None and config.model != "default":
            config = replace(config, model_fingerprint=local_model_fingerprint(config.model))
        if config.engine in ("llamacpp", "vllm"):
            spec = server_spec(config.engine, None if config.model == "default" else config.model,
                               config.context_length, dict(config.engine_options))
            config = replace(config, base_url=spec.base_url, model=spec.model,
                             context_length=config.context_length or spec.context_length)
            err.print(f"starting {spec.name} ({spec.model}) on {spec.base_url} …", highlight=False)
            server = ManagedServer(spec, startup_timeout_s=startup_timeout)
            started = time.monotonic()
            server.start()
            err.print(f"{spec.name} server ready in {time.monotonic() - started:.1f}s", highlight=False)
        outcome = asyncio.run(execute(config, make_backend, results_dir, make_progress(err), announce))
    except KeyboardInterrupt:
        err.print("interrupted: every answer received so far is saved; "
                  "run the same command again to resume", style="yellow")
        return EXIT_INTERRUPTED, None
    except USER_ERRORS as exc:
        raise _fail(exc)
    except OSError as exc:  # writing results: no permission, disk full … (network errors are the backend's)
        raise _fail(RunDirError(os_problem(exc)))
    finally:
        if server is not None:
            server.stop()
    return _report(outcome, config.compat, parquet), outcome


@app.command()
def score(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (results/<run>).")],
    compat: Annotated[Optional[str], typer.Option(help="Score like a reference implementation, e.g. evalscope.")] = None,
    rouge_stemmer: Annotated[bool, typer.Option(help="ROUGE with Porter stemming.")] = False,
    bertscore_model: Annotated[Optional[str], typer.Option(help="BERTScore encoder (local path or hub name).")] = None,
    bertscore_layers: Annotated[Optional[int], typer.Option(help="BERTScore layer.")] = None,
    bertscore_idf: Annotated[bool, typer.Option(help="BERTScore with idf weighting.")] = False,
    bertscore_baseline: Annotated[Optional[str], typer.Option(help="BERTScore baseline file for rescaling.")] = None,
    umls_extractor: Annotated[Optional[str], typer.Option(help="UMLS concept extractor: scispacy, or none.")] = None,
    task_file: Annotated[list[Path], typer.Option("--task-file", help="Where a user task's file is now, if it "
                                                  "moved since the run (repeatable).")] = [],
    tasks_dir: TasksDirOption = [],
    parquet: ParquetOption = False,
) -> None:
    """Re-score a run's stored answers (no model needed)."""
    _check_parquet(parquet)
    options = _metric_options(rouge_stemmer, bertscore_model, bertscore_layers, bertscore_idf,
                              bertscore_baseline, umls_extractor)
    try:
        _user_tasks(task_file, tasks_dir)
        outcome = rescore(run_dir, compat, options)
    except USER_ERRORS as exc:
        raise _fail(exc)
    _report(outcome, compat, parquet)


def _judge_plan(judges: list[str], engine: str | None, api_key_env: str, rubrics: list[str],
                allow_external_endpoint: bool, **settings: Any) -> tuple[list[Any], Any]:
    """The judges given by URL and the judging options, checked (an engine judge is added once started)."""
    from evalpipe.judging.panel import parse_judge
    from evalpipe.judging.run import JudgeOptions

    if engine is not None and engine != "llamacpp":
        raise typer.BadParameter("--judge-engine must be llamacpp", param_hint="--judge-engine")
    try:
        panel = [parse_judge(text, api_key_env) for text in judges]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--judge") from None
    by_task: dict[str | None, str] = {}
    for text in rubrics:
        task_name, sep, path = text.partition("=")
        key, path = (task_name, path) if sep and not Path(text).is_file() else (None, text)
        if key in by_task:
            raise typer.BadParameter(f"--judge-rubric given twice for {key or 'every task'}", param_hint="--judge-rubric")
        # a file is recorded by its absolute path; anything else is a rubric's name under prompts/ (judge/…)
        by_task[key] = str(Path(path).resolve()) if Path(path).is_file() else path
    return panel, JudgeOptions(rubrics=by_task, allow_external_endpoint=allow_external_endpoint, **settings)


def _judge_run(run_path: Path, panel: list[Any], engine: str | None, options: Any, startup_timeout: float = 600.0) -> int:
    """Judge a run (starting and stopping a local judge engine if asked) and print what came of it."""
    from evalpipe.judging.panel import Judge
    from evalpipe.judging.run import execute_judging, judge_backend
    from evalpipe.progress import make_progress

    server: ManagedServer | None = None
    started: list[ManagedServer] = []

    def backends(judge: Any, judge_options: Any) -> Any:
        # the engine starts only when its judge has something to rate (judging again asks nothing)
        if judge.engine is not None and server is not None and not started:
            err.print(f"starting the judge engine {judge.engine} ({judge.model}) on {judge.url} …", highlight=False)
            server.start()
            started.append(server)
        return judge_backend(judge, judge_options)

    try:
        if engine is not None:
            spec = server_spec(engine, None, None, {})
            server = ManagedServer(spec, startup_timeout_s=startup_timeout)
            panel = [*panel, Judge(model=spec.model, url=spec.base_url, engine=engine)]
        outcome = asyncio.run(execute_judging(run_path, panel, options, backend_factory=backends,
                                              progress=make_progress(err)))
    except KeyboardInterrupt:
        err.print("interrupted: every judgement received so far is saved; run the same command again to resume",
                  style="yellow")
        return EXIT_INTERRUPTED
    except USER_ERRORS as exc:
        raise _fail(exc)
    finally:
        for running in started:
            running.stop()
    if outcome.metrics:
        console.print(metrics_table(outcome.metrics, title=f"{outcome.run_dir.path} · judges"))
    console.print(f"judged: {outcome.run_dir.path}  (judge requests sent {outcome.sent}, judgements from store "
                  f"{outcome.from_store}, newly unusable after a retry {outcome.unusable})", highlight=False)
    for note in outcome.notes:
        err.print(f"note: {note}", style="yellow", highlight=False)
    if outcome.failed_requests:
        err.print(f"{outcome.failed_requests} judge request(s) failed for good (counted in judge_failures); "
                  "re-run the same command to retry only those", style="yellow")
        return EXIT_FAILED_REQUESTS
    return 0


@app.command()
def judge(
    run_dir: Annotated[Path, typer.Argument(help="A finished run directory (results/<run>).")],
    judge: JudgeOption = [],
    judge_engine: JudgeEngineOption = None,
    judge_api_key_env: JudgeKeyOption = "OPENAI_API_KEY",
    judge_rubric: JudgeRubricOption = [],
    allow_external_endpoint: Annotated[bool, typer.Option(help="Allow answers of credentialed (PhysioNet) tasks to go to a judge that is not local.")] = False,
    concurrency: Annotated[int, typer.Option("--judge-concurrency", help="Requests in flight per judge.")] = 8,
    timeout: Annotated[float, typer.Option("--judge-timeout", help="Seconds per judge request attempt.")] = 120.0,
    max_retries: Annotated[int, typer.Option("--judge-max-retries", help="Retries per judge request for retryable failures.")] = 6,
    max_tokens: Annotated[int, typer.Option("--judge-max-tokens", help="Tokens a judge may write per reply.")] = 512,
    startup_timeout: StartupTimeoutOption = 600.0,
) -> None:
    """Rate a run's free-text answers with LLM judges (a jury); resumes; never asks the evaluated model."""
    if concurrency < 1 or max_tokens < 1:
        raise typer.BadParameter("--judge-concurrency and --judge-max-tokens must be at least 1")
    panel, options = _judge_plan(judge, judge_engine, judge_api_key_env, judge_rubric, allow_external_endpoint,
                                 concurrency=concurrency, timeout_s=timeout, max_retries=max_retries,
                                 max_tokens=max_tokens)
    if not panel and judge_engine is None:
        raise typer.BadParameter("give at least one --judge MODEL=URL (or --judge-engine llamacpp)", param_hint="--judge")
    raise typer.Exit(_judge_run(run_dir, panel, judge_engine, options, startup_timeout))


@app.command()
def show(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    compat: Annotated[Optional[str], typer.Option(help="Show the metrics of a compatibility scoring.")] = None,
) -> None:
    """Print a run's metrics and what its summary says about them.

    Warnings (a high parse-failure rate, metrics not computed, notes) go to stderr.
    """
    run = RunDir(run_dir)
    try:
        _print_run(run.read_metrics(compat), run, compat)
    except (FileNotFoundError, ValueError) as exc:
        raise _fail(exc)


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="One or more run directories.")],
    out: Annotated[Optional[Path], typer.Option(help="Output folder (default: results/report).")] = None,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples for the 95% intervals.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    compat: Annotated[Optional[str], typer.Option(help="Report a compatibility scoring instead of the default.")] = None,
    parquet: Annotated[bool, typer.Option(help="Also write the samples as samples.parquet.")] = False,
    top: Annotated[int, typer.Option(help="Examples shown per error category / disagreement list.")] = 10,
) -> None:
    """Write a report of runs: HTML, Markdown and CSV.

    report.html is self-contained (open it from a file or an e-mail, no network): summary,
    leaderboard, per-task metrics with 95 % intervals, NER error analysis, operations, the paired
    comparison of two runs, every sample behind the numbers, and a metric glossary.
    """
    from evalpipe.report import build_report

    target = out or DEFAULT_ROOT / "report"
    try:
        built = build_report(runs, target, resamples=resamples, seed=seed, compat=compat, parquet=parquet,
                             top=top)
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        raise _fail(exc)
    for label, path in (("html", built.html), ("markdown", built.markdown), ("leaderboard", built.csv),
                        ("parquet", getattr(built, "parquet", None))):
        if path:
            console.print(f"{label}: {path}", highlight=False)


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="Run A.")],
    run_b: Annotated[Path, typer.Argument(help="Run B.")],
    out: Annotated[Optional[Path], typer.Option(help="Also write compare.html and compare.md here.")] = None,
    resamples: Annotated[int, typer.Option(help="Paired bootstrap resamples.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    top: Annotated[int, typer.Option(help="Samples shown where the runs disagree most.")] = 10,
    compat: Annotated[Optional[str], typer.Option(help="Compare a compatibility scoring.")] = None,
) -> None:
    """Paired comparison of two runs on their shared samples.

    Differences A - B with paired bootstrap intervals and p-values, and the samples they disagree on most.
    """
    from evalpipe.report import compare_runs, render_compare_terminal

    try:
        result = compare_runs(run_a, run_b, resamples=resamples, seed=seed, top=top, out=out, compat=compat)
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        raise _fail(exc)
    # the comparison renderer escapes its own text and uses markup for emphasis
    render_compare_terminal(result, Console(width=None if sys.stdout.isatty() else 160))


@app.command()
def tasks(
    names: Annotated[list[str], typer.Argument(help="Show everything about these tasks (default: list all).")] = [],
    schema: Annotated[bool, typer.Option("--schema", help="Print the JSON schema of task files and exit.")] = False,
    kinds: Annotated[bool, typer.Option("--kinds", help="List the task kinds a task file can use and exit.")] = False,
    tasks_dir: TasksDirOption = [],
) -> None:
    """List tasks and suites (`evalpipe tasks NAME`: one task whole).

    One task shows its data roles, settings, prompt variants and scorings.
    """
    from evalpipe.tasks.kinds.base import all_kinds
    from evalpipe.tasks.taskfile.build import schema_text

    if schema:
        sys.stdout.write(schema_text())
        return
    if kinds:
        kind_table = Table(title="task kinds (the `kind` of a task file; docs/tasks.md)")
        kind_table.add_column("kind")
        kind_table.add_column("what it scores")
        for name, kind in all_kinds().items():
            kind_table.add_row(name, kind.description)
        console.print(kind_table)
        return
    try:
        _user_tasks([], tasks_dir)
        registered = all_tasks()
        chosen = [registered[n] if n in registered else resolve([n], [])[0] for n in names]
    except (DataError, ValueError, KeyError) as exc:
        raise _fail(exc)
    if chosen:
        for spec in chosen:
            _print_task(spec)
        return
    table = Table(title="tasks  (evalpipe tasks NAME: data roles, settings, prompt variants, scorings)")
    for column in ("task", "answered by", "shots", "metrics", "suites", "defined by", "description"):
        table.add_column(column)
    for spec in registered.values():
        table.add_row(
            spec.name, "embedding ranker" if spec.ranking else "model", str(spec.default_shots),
            ", ".join(spec.metrics), ", ".join(spec.suites), _defined_by(spec.task_file),
            spec.description + (" [credentialed data]" if spec.credentialed else ""),
        )
    console.print(table)
    suite_table = Table(title="suites")
    suite_table.add_column("suite")
    suite_table.add_column("tasks")
    for name, suite in suites().items():
        suite_table.add_row(name, ", ".join(suite.tasks))
    console.print(suite_table)


def _print_task(spec: Any) -> None:
    """One task, whole: everything a user needs to run it with their files and settings."""
    try:
        variants = ", ".join(variant_templates(spec)) if spec.ranking is None else "–"
    except TemplateError as exc:
        variants = f"error: {exc}"
    rows = [
        ("description", spec.description + (" [credentialed data]" if spec.credentialed else "")),
        ("answered by", "an embedding ranker (--embeddings-url/--embeddings-path)" if spec.ranking else "the model"),
        ("defined by", _defined_by(spec.task_file)),
        ("data roles (--data TASK:ROLE=PATH)", "; ".join(f"{r.name}: {r.description}" for r in spec.data_roles)),
        ("settings (--task-arg TASK:NAME=VALUE)", "; ".join(f"{a.name}: {a.description}" for a in spec.args) or "–"),
        ("shots", str(spec.default_shots)),
        ("max tokens", str(spec.max_tokens)),
        ("metrics", ", ".join(spec.metrics) + (f" (headline: {spec.primary_metric})" if spec.primary_metric else "")),
        ("scorings (--compat)", ", ".join(k for k in spec.scorings if k != "default") or "default only"),
        ("prompt variants (--prompt-variants)", variants),
        ("suites", ", ".join(spec.suites) or "–"),
        ("judged (evalpipe judge)", "yes: free-text answers" if spec.answer_kind else "no"),
        ("citation", spec.citation or "–"),
    ]
    table = Table(title=Text(spec.name), show_header=False, title_justify="left")
    table.add_column("key", style="bold")
    table.add_column("value")
    for key, value in rows:
        table.add_row(key, Text(value))
    console.print(table)


def _defined_by(task_file: Path | None) -> str:
    if task_file is None:
        return "Python"
    try:
        return str(task_file.relative_to(Path.cwd()))
    except ValueError:
        return str(task_file)


@app.command("new-task")
def new_task(
    name: Annotated[str, typer.Argument(help="The task's name (lower case, digits, _ - .).")],
    kind: Annotated[str, typer.Option(help="classification, multiple_choice or generation.")] = "classification",
    data: Annotated[Path, typer.Option(help="Your data file: JSON lines, a JSON array, CSV/TSV with a header, parquet.")] = Path(),
    input_field: Annotated[list[str], typer.Option("--input-field", help="A field the model reads (repeatable).")] = [],
    label_field: Annotated[Optional[str], typer.Option(help="The field holding the gold answer (label, option, reference text).")] = None,
    id_field: Annotated[Optional[str], typer.Option(help="A field holding unique sample ids (default: the row).")] = None,
    option_field: Annotated[list[str], typer.Option("--option-field", help="multiple_choice: one field with the options, or one per option column (repeatable).")] = [],
    out: Annotated[Optional[Path], typer.Option(help="Folder for NAME.yaml and NAME.j2 (default: $EVALPIPE_TASKS_DIR, else ./tasks).")] = None,
    description: Annotated[Optional[str], typer.Option(help="One line describing the task.")] = None,
    force: Annotated[bool, typer.Option(help="Overwrite an existing task file and template.")] = False,
) -> None:
    """Write a task file and template from your own data file, and print the command that runs it."""
    from evalpipe.tasks.taskfile.discover import user_tasks_dir
    from evalpipe.tasks.taskfile.scaffold import ScaffoldError, new_task as scaffold

    if data == Path():
        raise typer.BadParameter("--data FILE is required (your data file)", param_hint="--data")
    try:
        made = scaffold(name, kind, data, input_field, label_field, out or user_tasks_dir(), id_field=id_field,
                        option_fields=option_field, force=force, description=description)
    except (ScaffoldError, *USER_ERRORS) as exc:
        raise _fail(exc)
    console.print(f"wrote {made.task_file} and {made.template} ({made.summary})", highlight=False, soft_wrap=True)
    console.print(f"run it:  {made.command}", highlight=False, soft_wrap=True)


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
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--engine") from None
    try:
        spec = server_spec(engine, model, context_length, options, port=port)
        with ManagedServer(spec, startup_timeout_s=startup_timeout, log=lambda line: err.print(line, highlight=False, markup=False)):
            console.print(f"{spec.name} serves {spec.model!r} at {spec.base_url}  (Ctrl-C stops it)\n"
                          f"  ./run.sh run --task TASK --base-url {spec.base_url} --model {spec.model}   (tasks: ./run.sh tasks)",
                          highlight=False)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        err.print("stopped")
    except USER_ERRORS as exc:
        raise _fail(exc)


def _quick_caps(specs) -> dict[str, dict]:
    """The demo's per-task generation caps (each task's ``TaskSpec.quick``), as recorded in config.json."""
    return {s.name: s.quick.to_json() for s in specs if s.quick is not None}


def _caps_text(caps: dict[str, dict]) -> str:
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
                           base_url=base_url, limit=limit, generation=caps)
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
    code, outcome = _execute(config, results_dir)
    if outcome is not None and report:
        from evalpipe.report import build_report

        try:
            built = build_report([outcome.run_dir.path], outcome.run_dir.path / "report")
        except (FileNotFoundError, RuntimeError, ValueError) as exc:
            raise _fail(exc)
        console.print(f"report: {built.html}  (written in {built.seconds:.1f}s; open it in a browser: "
                      f"{built.html.resolve().as_uri()})", highlight=False, soft_wrap=True)
    console.print("next: ./run.sh tasks  ·  ./run.sh run --help  ·  ./run.sh report RUN [RUN …] to compare runs",
                  highlight=False)
    raise typer.Exit(code)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
