"""Evaluating a model: ``run``, ``score`` and ``show`` (and what they print)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from evalpipe.config import RunConfig, scoring_method
from evalpipe.configure import build_config
from evalpipe.engines.launch import VLLM_NAMED
from evalpipe.errors import UsageError
from evalpipe.results import DEFAULT_ROOT, RunDir
from evalpipe.execution import run_config
from evalpipe.rescoring import rescore
from evalpipe.outcome import RunOutcome
from evalpipe.tasks.registry import resolve
from evalpipe.variants.robustness import plain_metrics
from evalpipe.terminal import metrics_table, robustness_table, summary_lines

from evalpipe.cli.common import AllowExternalOption, ApiKeyEnvOption, BaseUrlOption, ConcurrencyOption, DataDirOption, DataOption, EndpointOption, EngineOption, LimitOption, MaxAnswerBytesOption, MaxRetriesOption, ModelOption, ResultsDirOption, ReuseOtherEndpointOption, RunNameOption, SplitOption, TaskArgOption, TimeoutOption, UnreachableAfterOption
from evalpipe.cli.common import DtypeOption, EXIT_FAILED_REQUESTS, EXIT_INTERRUPTED, EngineArgOption, GpuMemoryOption, JudgeEngineOption, JudgeKeyOption, JudgeOption, JudgeRubricOption, key_env, RevisionOption, StartupTimeoutOption, TaskFileOption, TasksDirOption, TensorParallelOption, USER_ERRORS, _fail, _user_tasks, app, console, err


def _parse_data(pairs: list[str]) -> dict[str, str]:
    data: dict[str, str] = {}
    for pair in pairs:
        key, sep, path = pair.partition("=")
        if not sep or not key or not path:
            raise typer.BadParameter(f"--data expects TASK=PATH or TASK:ROLE=PATH, got {pair!r}", param_hint="--data")
        data[key] = str(Path(path).resolve())
    return data


def _print_run(metrics: Mapping[str, Mapping[str, float | None]], run: RunDir, compat: str | None) -> None:
    """The metrics table and what the summary says about them: one rendering for run, score, show."""
    variants = run.read_variants(compat)  # prompt conditions: their spread in a table of its own
    shown = {task: plain_metrics(values) for task, values in metrics.items()} if variants else metrics
    console.print(metrics_table(shown, title=f"{run.path}" + (f" [{compat}]" if compat else "")))
    settings = run.read_config().get("config", {}) if run.config_path.is_file() else {}
    console.print(f"answers: {scoring_method(settings)}", highlight=False)
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
    failed = sum(int(t.metrics.get("errors") or 0) for t in outcome.tasks)
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
    shots: Annotated[Optional[int], typer.Option(help="Few-shot examples (default: each task's own; `evalpipe tasks` lists them).")] = None,
    fewshot_seed: Annotated[Optional[int], typer.Option(help="Draw shots at random from the train split with this seed (default: the first K).")] = None,
    fewshot_as_turns: Annotated[bool, typer.Option(help="Give shots as user/assistant chat turns instead of one message.")] = False,
    system_role: Annotated[bool, typer.Option(help="Send the system prompt as a system message (--no-system-role merges it into the first user turn).")] = True,
    temperature: Annotated[float, typer.Option(help="0 = greedy (default).")] = 0.0,
    top_p: Annotated[Optional[float], typer.Option()] = None,
    seed: Annotated[Optional[int], typer.Option(help="Sampling seed passed to the endpoint.")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="Override the task's max_tokens.")] = None,
    split: SplitOption = None,
    limit: LimitOption = None,
    ids: Annotated[Optional[str], typer.Option(help="Comma-separated sample ids to evaluate.")] = None,
    data: DataOption = [],
    context_length: Annotated[Optional[int], typer.Option(help="Model context in tokens for budgeting long inputs (default: ask the server).")] = None,
    data_dir: DataDirOption = None,
    concurrency: ConcurrencyOption = None,
    timeout: TimeoutOption = 120.0,
    max_retries: MaxRetriesOption = 6,
    unreachable_after: UnreachableAfterOption = 30.0,
    reuse_answers_from_other_endpoint: ReuseOtherEndpointOption = False,
    max_answer_bytes: MaxAnswerBytesOption = 16 * 1024 * 1024,
    compat: Annotated[Optional[str], typer.Option(help="Score like a reference implementation, e.g. evalscope.")] = None,
    rouge_stemmer: Annotated[bool, typer.Option(help="ROUGE with Porter stemming.")] = False,
    bertscore_model: Annotated[Optional[str], typer.Option(help="BERTScore encoder (local path or hub name).")] = None,
    bertscore_layers: Annotated[Optional[int], typer.Option(help="BERTScore layer (required for an unknown local encoder).")] = None,
    bertscore_idf: Annotated[bool, typer.Option(help="BERTScore with idf weighting.")] = False,
    bertscore_baseline: Annotated[Optional[str], typer.Option(help="BERTScore baseline file for rescaling.")] = None,
    umls_extractor: Annotated[Optional[str], typer.Option(help="UMLS concept extractor: scispacy, or none.")] = None,
    allow_external_endpoint: AllowExternalOption = False,
    run_name: RunNameOption = None,
    results_dir: ResultsDirOption = DEFAULT_ROOT,
    task_arg: TaskArgOption = [],
    embeddings_url: Annotated[Optional[str], typer.Option(help="Retrieval tasks: an OpenAI-compatible /v1 URL serving an embedding model.")] = None,
    embeddings_model: Annotated[Optional[str], typer.Option(help="Retrieval tasks: the embedding model's name at --embeddings-url.")] = None,
    embeddings_path: Annotated[Optional[str], typer.Option(help="Retrieval tasks: a local sentence-transformers model folder instead of a URL.")] = None,
    embeddings_batch_size: Annotated[Optional[int], typer.Option(help="Retrieval tasks: texts per embedding request.")] = None,
    judge: JudgeOption = [],
    judge_engine: JudgeEngineOption = None,
    judge_api_key_env: JudgeKeyOption = None,
    judge_rubric: JudgeRubricOption = [],
    mcqa_scoring: Annotated[str, typer.Option("--mcqa-scoring", help="Multiple-choice tasks: generate (parse the letter of a generated answer) or loglikelihood (score each option's letter by its log-probability after the prompt; needs /v1/completions with echo and logprobs, as vLLM serves).")] = "generate",
    prompt_variants: Annotated[Optional[str], typer.Option(help="Evaluate each prompt variant: all, or NAME[,NAME…] (`evalpipe tasks` lists them; 'default' is the canonical prompt). Spread across them: variants.json.")] = None,
    shot_orders: Annotated[int, typer.Option(help="Evaluate K orders of the shots: as selected, and K-1 seeded permutations.")] = 1,
    shots_sweep: Annotated[Optional[str], typer.Option(help="Evaluate several shot counts, e.g. 0,1,3,5 (each the first k of the largest count's shots).")] = None,
    parquet: ParquetOption = False,
    batch: Annotated[bool, typer.Option(help="Send the pending prompts through the OpenAI Batch API at --base-url (upload, poll, download; resumable: docs/hosted.md).")] = False,
    batch_retry: Annotated[str, typer.Option(help="--batch: failed lines are sent again in a new batch (batch), as direct requests (direct), or not (none).")] = "batch",
    batch_poll: Annotated[float, typer.Option(help="--batch: seconds between polls of a batch's status.")] = 30.0,
    batch_size: Annotated[int, typer.Option(help="--batch: requests per batch at most.")] = 50_000,
    batch_export: Annotated[Optional[Path], typer.Option(help="Write the pending requests as Batch API JSONL to this file and send nothing (for vllm run-batch or a provider's console; then `evalpipe batch-import`).")] = None,
    max_completion_tokens: Annotated[bool, typer.Option(help="Send the answer limit as max_completion_tokens (reasoning models; a direct run switches by itself when the endpoint asks).")] = False,
    reasoning_effort: Annotated[Optional[str], typer.Option(help="Reasoning models: reasoning_effort sent with each request (minimal, low, medium, high …).")] = None,
    structured: Annotated[bool, typer.Option(help="Ask for JSON under each task's schema (response_format json_schema) and report schema_conformance.")] = False,
    price_input: Annotated[Optional[float], typer.Option(help="USD per million input tokens (cost_usd in metrics.json).")] = None,
    price_output: Annotated[Optional[float], typer.Option(help="USD per million output tokens.")] = None,
    price_cached: Annotated[Optional[float], typer.Option(help="USD per million cached input tokens (default: the input price).")] = None,
    prices: Annotated[Optional[Path], typer.Option(help="A JSON or YAML file: model → {input, output, cached_input, batch_discount} in USD per million tokens.")] = None,
    batch_discount: Annotated[Optional[float], typer.Option(help="Share taken off the price of answers that came by batch (0.5 = half price).")] = None,
) -> None:
    """Evaluate a model on tasks; the same command resumes a run.

    Re-running an interrupted or partly failed run sends only the prompts without a stored answer.
    With --judge, its free-text answers are then rated by LLM judges.
    """
    _check_parquet(parquet)
    if not base_url and os.environ.get("EVALPIPE_BASE_URL") and engine is None:
        base_url = os.environ["EVALPIPE_BASE_URL"].split()
    try:
        task = [*task, *_user_tasks(task_file, tasks_dir)]
        specs = resolve(task, suite)
    except USER_ERRORS as exc:
        raise _fail(exc) from None
    try:
        config = build_config(
            specs, suites=tuple(suite), model=model, base_urls=base_url, endpoint=endpoint, engine=engine,
            engine_settings=dict(zip(VLLM_NAMED, (tensor_parallel_size, dtype, gpu_memory_utilization, revision))),
            engine_args=engine_arg,
            api_key_env=key_env(api_key_env, "--api-key-env"), shots=shots, fewshot_seed=fewshot_seed, fewshot_as_turns=fewshot_as_turns,
            system_role=system_role, temperature=temperature, top_p=top_p, seed=seed, max_tokens=max_tokens,
            split=split, limit=limit, ids=tuple(i.strip() for i in ids.split(",") if i.strip()) if ids else None,
            data=_parse_data(data), data_dir=str(Path(data_dir).resolve()) if data_dir else None,
            context_length=context_length, concurrency=concurrency, timeout_s=timeout,
            max_retries=max_retries, unreachable_after_s=unreachable_after,
            reuse_answers_from_other_endpoint=reuse_answers_from_other_endpoint,
            max_answer_bytes=max_answer_bytes, compat=compat, allow_external_endpoint=allow_external_endpoint,
            run_name=run_name,
            metric_options=_metric_options(rouge_stemmer, bertscore_model, bertscore_layers, bertscore_idf,
                                           bertscore_baseline, umls_extractor),
            task_args=_parse_task_args(task_arg), embeddings_url=embeddings_url, embeddings_model=embeddings_model,
            embeddings_path=embeddings_path, embeddings_batch_size=embeddings_batch_size, choice_scoring=mcqa_scoring,
            **_condition_options(prompt_variants, shot_orders, shots_sweep),
            reasoning_effort=reasoning_effort, structured=structured,
            batch=_batch_options(batch, batch_retry, batch_poll, batch_size, batch_export, max_completion_tokens),
            prices=_prices(model or "", price_input, price_output, price_cached, prices, batch_discount),
        )
    except UsageError as exc:  # a number, name or combination the run cannot use: nothing written yet
        raise typer.BadParameter(str(exc), param_hint=exc.option) from None
    if not (judge or judge_engine):
        raise typer.Exit(execute_run(config, results_dir, startup_timeout, parquet)[0])
    from evalpipe.cli.judging import judge_plan, judge_run  # (judging registers its command after these)

    panel, options = judge_plan(judge, judge_engine, judge_api_key_env, judge_rubric, allow_external_endpoint)
    try:  # the patient-data guard, before the evaluation sends anything anywhere
        from evalpipe.judging.panel import check_patient_data

        check_patient_data([s.name for s in specs if s.credentialed and s.answer_kind], panel, allow_external_endpoint)
    except USER_ERRORS as exc:
        raise _fail(exc) from None
    code, outcome = execute_run(config, results_dir, startup_timeout, parquet)
    if outcome is None:  # interrupted: nothing to judge yet
        raise typer.Exit(code)
    judged = judge_run(outcome.run_dir.path, panel, judge_engine, options, startup_timeout)
    raise typer.Exit(code or judged)


def _batch_options(batch: bool, retry: str, poll_s: float, size: int, export: Path | None = None,
                   max_completion_tokens: bool = False) -> dict[str, Any]:
    """``--batch*`` as RunConfig's ``batch`` (empty without ``--batch``/``--batch-export``), checked by
    BatchOptions' rules."""
    field = {"completion_tokens_field": "max_completion_tokens"} if max_completion_tokens else {}
    if export is not None:
        if batch:
            raise typer.BadParameter("give --batch (send to the Batch API) or --batch-export FILE (write the "
                                     "requests), not both", param_hint="--batch-export")
        return {"export": str(export.resolve()), **field}
    if not batch:
        return {}
    from evalpipe.backends.batch import RETRY_CHOICES

    if retry not in RETRY_CHOICES:
        raise typer.BadParameter(f"must be one of {', '.join(RETRY_CHOICES)}", param_hint="--batch-retry")
    if poll_s <= 0:
        raise typer.BadParameter("must be a number of seconds > 0", param_hint="--batch-poll")
    if size < 1:
        raise typer.BadParameter("must be at least 1", param_hint="--batch-size")
    return {"retry": retry, "poll_s": poll_s, "max_requests": size, **field}


def _prices(model: str, price_input: float | None, price_output: float | None, price_cached: float | None,
            prices_file: Path | None, batch_discount: float | None) -> dict[str, Any]:
    """The prices of the run's model (:mod:`evalpipe.cost`) as RunConfig's ``prices``; {} when none given."""
    from evalpipe.cost import PriceError, resolve_prices

    try:
        found = resolve_prices(model, price_input, price_output, price_cached, prices_file, batch_discount)
    except PriceError as exc:
        raise _fail(exc) from None
    return found.to_json() if found is not None else {}


def _condition_options(prompt_variants: str | None, shot_orders: int, shots_sweep: str | None) -> dict[str, Any]:
    """``--prompt-variants``, ``--shot-orders``, ``--shots-sweep`` as RunConfig fields (evalpipe.variants.conditions);
    their ranges are RunConfig's to check."""
    variants = tuple(v.strip() for v in (prompt_variants or "").split(",") if v.strip())
    if prompt_variants is not None and not variants:
        raise typer.BadParameter("expects all or NAME[,NAME…]", param_hint="--prompt-variants")
    try:
        counts = tuple(int(k) for k in (shots_sweep or "").split(",") if k.strip())
    except ValueError:
        raise typer.BadParameter(f"expects shot counts like 0,1,3,5, got {shots_sweep!r}", param_hint="--shots-sweep") from None
    if shots_sweep is not None and not counts:  # (a negative count: RunConfig says so)
        raise typer.BadParameter(f"expects shot counts like 0,1,3,5, got {shots_sweep!r}", param_hint="--shots-sweep")
    return {"prompt_variants": variants, "shot_orders": shot_orders, "shots_sweep": counts}


def _metric_options(rouge_stemmer: bool, bertscore_model: str | None, bertscore_layers: int | None,
                    bertscore_idf: bool, bertscore_baseline: str | None, umls_extractor: str | None) -> dict[str, Any]:
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


def execute_run(config: RunConfig, results_dir: Path, startup_timeout: float = 600.0,
             parquet: bool = False) -> tuple[int, RunOutcome | None]:
    """Run (starting and stopping a local engine if asked) and print the outcome.

    Returns the exit code and the outcome (None when interrupted).
    """
    from evalpipe.pipeline.progress import make_progress

    def announce(run: RunDir, total: int, pending: int) -> None:
        err.print(f"run {run.path}: {total} prompts, {total - pending} already answered, {pending} to send",
                  highlight=False)

    try:
        outcome = run_config(config, results_dir, startup_timeout=startup_timeout, progress=make_progress(err),
                             announce=announce, log=lambda line: err.print(line, highlight=False))
    except KeyboardInterrupt:
        err.print("interrupted: every answer received so far is saved; "
                  "run the same command again to resume", style="yellow")
        return EXIT_INTERRUPTED, None
    except USER_ERRORS as exc:  # (an engine that died exits 4, an endpoint gone 5: their exit_code)
        raise _fail(exc) from None
    if config.batch.get("export"):
        for note in outcome.notes:
            console.print(note, highlight=False)
        return 0, outcome
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
        raise _fail(exc) from None
    _report(outcome, compat, parquet)




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
    except USER_ERRORS as exc:
        raise _fail(exc) from None
