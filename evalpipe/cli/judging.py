"""``evalpipe judge`` and the judge options ``run`` shares: rating a run's free-text answers."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from evalpipe.store.diskfull import disk_full_message, is_disk_full
from evalpipe.engines.launch import server_spec
from evalpipe.outcome import RunError
from evalpipe.engines.server import ManagedServer
from evalpipe.engines.watch import run_watched
from evalpipe.errors import UsageError
from evalpipe.terminal import metrics_table

from evalpipe.cli.common import EXIT_FAILED_REQUESTS, EXIT_INTERRUPTED, JudgeEngineOption, JudgeKeyOption, JudgeOption, JudgeRubricOption, StartupTimeoutOption, USER_ERRORS, _fail, app, console, err, key_env


def judge_plan(judges: list[str], engine: str | None, api_key_env: str | None, rubrics: list[str],
                allow_external_endpoint: bool, **settings: Any) -> tuple[list[Any], Any]:
    """The judges given by URL and the judging options, checked (an engine judge is added once started)."""
    from evalpipe.judging.panel import parse_judge
    from evalpipe.judging.run import JudgeOptions

    if engine is not None and engine != "llamacpp":
        raise typer.BadParameter("--judge-engine must be llamacpp", param_hint="--judge-engine")
    key = key_env(api_key_env, "--judge-api-key-env")
    try:
        panel = [parse_judge(text, key) for text in judges]
    except UsageError as exc:
        raise typer.BadParameter(str(exc), param_hint="--judge") from None
    by_task: dict[str | None, str] = {}
    for text in rubrics:
        task_name, sep, path = text.partition("=")
        task_key, path = (task_name, path) if sep and not Path(text).is_file() else (None, text)
        if task_key in by_task:
            raise typer.BadParameter(f"--judge-rubric given twice for {task_key or 'every task'}",
                                     param_hint="--judge-rubric")
        # a file is recorded by its absolute path; anything else is a rubric's name under prompts/ (judge/…)
        by_task[task_key] = str(Path(path).resolve()) if Path(path).is_file() else path
    return panel, JudgeOptions(rubrics=by_task, allow_external_endpoint=allow_external_endpoint, **settings)


def judge_run(run_path: Path, panel: list[Any], engine: str | None, options: Any, startup_timeout: float = 600.0) -> int:
    """Judge a run (starting and stopping a local judge engine if asked) and print what came of it."""
    from evalpipe.judging.panel import Judge
    from evalpipe.judging.run import execute_judging, judge_backend
    from evalpipe.pipeline.progress import make_progress

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
        # watched: the judge engine, once started, stops the judging within a second if it dies
        outcome = asyncio.run(run_watched(execute_judging(run_path, panel, options, backend_factory=backends,
                                                          progress=make_progress(err)), started))
    except KeyboardInterrupt:
        err.print("interrupted: every judgement received so far is saved; run the same command again to resume",
                  style="yellow")
        return EXIT_INTERRUPTED
    except USER_ERRORS as exc:  # (an engine that died exits 4, an endpoint gone 5: their exit_code)
        raise _fail(exc) from None
    except (OSError, sqlite3.OperationalError) as exc:
        if not is_disk_full(exc):
            raise
        raise _fail(RunError(disk_full_message(exc, run_path, "judgements"))) from None
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
    run_dirs: Annotated[list[Path], typer.Argument(help="A finished run directory (results/<run>); with --pairwise, two.")],
    judge: JudgeOption = [],
    judge_engine: JudgeEngineOption = None,
    judge_api_key_env: JudgeKeyOption = None,
    judge_rubric: JudgeRubricOption = [],
    allow_external_endpoint: Annotated[bool, typer.Option(help="Allow answers of credentialed (PhysioNet) tasks to go to a judge that is not local.")] = False,
    concurrency: Annotated[int, typer.Option("--judge-concurrency", help="Requests in flight per judge.")] = 8,
    timeout: Annotated[float, typer.Option("--judge-timeout", help="Seconds per judge request attempt.")] = 120.0,
    max_retries: Annotated[int, typer.Option("--judge-max-retries", help="Retries per judge request for retryable failures.")] = 6,
    max_tokens: Annotated[int, typer.Option("--judge-max-tokens", help="Tokens a judge may write per reply.")] = 512,
    startup_timeout: StartupTimeoutOption = 600.0,
    pairwise: Annotated[bool, typer.Option("--pairwise", help="Compare two runs' answers pair by pair (each pair asked in both orders); results in <results>/pairwise/<A>__vs__<B>/.")] = False,
    human_ratings: Annotated[Optional[Path], typer.Option(help="CSV sample_id,rater,criterion,rating (the rubric's scale): check the judges against these human ratings (stored in the run).")] = None,
) -> None:
    """Rate a run's free-text answers with LLM judges (a jury); resumes; never asks the evaluated model."""
    if concurrency < 1 or max_tokens < 1:
        raise typer.BadParameter("--judge-concurrency and --judge-max-tokens must be at least 1")
    panel, options = judge_plan(judge, judge_engine, judge_api_key_env, judge_rubric, allow_external_endpoint,
                                 concurrency=concurrency, timeout_s=timeout, max_retries=max_retries,
                                 max_tokens=max_tokens,
                                 human_ratings=str(human_ratings.resolve()) if human_ratings is not None else None)
    if pairwise:
        if len(run_dirs) != 2:
            raise typer.BadParameter(f"--pairwise compares two runs: give RUN_A RUN_B (got {len(run_dirs)})")
        if judge_engine is not None or human_ratings is not None or len(options.rubrics) > 1 or (
                options.rubrics and None not in options.rubrics):
            raise typer.BadParameter("--pairwise takes --judge MODEL=URL judges and at most one --judge-rubric FILE "
                                     "(not --judge-engine, --human-ratings or TASK=FILE rubrics)")
        if not panel:
            raise typer.BadParameter("give at least one --judge MODEL=URL", param_hint="--judge")
        raise typer.Exit(pairwise_run(run_dirs[0], run_dirs[1], panel, options))
    if len(run_dirs) != 1:
        raise typer.BadParameter(f"give one run directory (or two with --pairwise; got {len(run_dirs)})")
    if not panel and judge_engine is None:
        raise typer.BadParameter("give at least one --judge MODEL=URL (or --judge-engine llamacpp)", param_hint="--judge")
    raise typer.Exit(judge_run(run_dirs[0], panel, judge_engine, options, startup_timeout))


def pairwise_run(run_a: Path, run_b: Path, panel: list[Any], options: Any) -> int:
    """Judge two runs pairwise and print the win/tie/loss and position-bias figures."""
    from evalpipe.judging.pairwise_run import execute_pairwise
    from evalpipe.judging.run import judge_backend

    try:
        outcome = asyncio.run(execute_pairwise(
            run_a, run_b, panel, rubric=options.rubrics.get(None), allow_external_endpoint=options.allow_external_endpoint,
            params=options.params, concurrency=options.concurrency,
            backend_factory=lambda judge: judge_backend(judge, options)))
    except KeyboardInterrupt:
        err.print("interrupted: every verdict received so far is saved; run the same command again to resume",
                  style="yellow")
        return EXIT_INTERRUPTED
    except USER_ERRORS as exc:
        raise _fail(exc) from None
    if outcome.metrics:
        console.print(metrics_table(outcome.metrics, title=f"{outcome.folder} · pairwise (A = {Path(run_a).name})"))
    console.print(f"pairwise: {outcome.folder}  (judge requests sent {outcome.sent}, verdicts from store "
                  f"{outcome.from_store})", highlight=False)
    for note in outcome.notes:
        err.print(f"note: {note}", highlight=False)
    if outcome.failed_requests:
        err.print(f"{outcome.failed_requests} judge request(s) failed for good (counted in the failures); "
                  "re-run the same command to retry only those", style="yellow")
        return EXIT_FAILED_REQUESTS
    return 0
