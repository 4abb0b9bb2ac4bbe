"""The Python API: evaluate a model, re-score a run, read a run — from a notebook or a script.

Thin on purpose: :func:`evaluate` builds its :class:`~evalpipe.config.RunConfig` with the very function
``evalpipe run`` uses (:func:`evalpipe.configure.build_config`) and runs it with the very function
``evalpipe run`` runs (:func:`evalpipe.execution.run_config`), so a run made here is the run the
command would make — same run directory, resumable by either, re-scorable by ``evalpipe score``. A
mistake is an :class:`~evalpipe.errors.EvalpipeError` (options: a ``UsageError``) with the message the
command line would print. See docs/python-api.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from evalpipe.config import RunConfig
from evalpipe.errors import InputError, UsageError
from evalpipe.results import RunDir, RunSummary, TaskSummary

__all__ = ["EvalResult", "evaluate", "load_run", "rescore"]

#: options of :func:`evaluate` that are not RunConfig fields (build_config's own)
_BUILD_OPTIONS = ("engine_settings", "engine_args", "concurrency", "embeddings_url", "embeddings_model",
                  "embeddings_path", "suites")
#: RunConfig fields :func:`evaluate` sets itself, from its named arguments or from the tasks
_SET_HERE = ("tasks", "model", "base_url", "replicas", "engine", "engine_options", "limit")


@dataclass(frozen=True)
class EvalResult:
    """What a run measured, read back from its run directory (the files are the truth: a result
    from :func:`evaluate`, :func:`rescore` or :func:`load_run` of the same run are equal).

    ``metrics``: task (or suite aggregate) → metric → value; None is a metric not computed (no
    answered sample; ``summary.tasks[task].not_computed`` says why), never a 0. ``summary``: per task,
    coverage (answered, unanswered and why), parse failures, errors by kind, latency, notes; per run,
    answers sent and taken from the store. ``config``: the options the run was made with."""

    run_dir: Path
    metrics: Mapping[str, Mapping[str, float | None]]
    summary: RunSummary
    config: RunConfig
    #: the compatibility scoring these numbers are (None: evalpipe's own)
    compat: str | None = None

    @property
    def tasks(self) -> tuple[str, ...]:
        """The tasks the run evaluated, in the order given."""
        return self.config.tasks

    def coverage(self, task: str) -> Mapping[str, Any]:
        """How many of ``task``'s samples were answered and why the others were not
        (:meth:`evalpipe.coverage.Coverage.to_json`)."""
        return self.task_summary(task).coverage

    def task_summary(self, task: str) -> TaskSummary:
        """``summary.json`` about one task; a task the run does not hold is a ``UsageError``."""
        try:
            return self.summary.tasks[task]
        except KeyError:
            raise UsageError(f"run {self.run_dir} has no task {task!r}; its tasks: "
                             f"{', '.join(self.summary.tasks) or 'none'}") from None

    @property
    def unanswered(self) -> int:
        """Samples without an answer (failed requests): re-running the same call retries only those."""
        return sum(int(values.get("errors") or 0) for name, values in self.metrics.items()
                   if name in self.summary.tasks)


def _frozen(metrics: Mapping[str, Mapping[str, float | None]]) -> Mapping[str, Mapping[str, float | None]]:
    return MappingProxyType({task: MappingProxyType(dict(values)) for task, values in metrics.items()})


def load_run(run_dir: str | Path, compat: str | None = None) -> EvalResult:
    """Read a run directory's results (``metrics.json``, ``summary.json``, ``config.json``; with
    ``compat``, that compatibility scoring's files). Nothing is scored, nothing is sent."""
    run = RunDir(Path(run_dir))
    recorded = run.read_config()
    if not isinstance(recorded.get("config"), Mapping):
        raise InputError(f"{run.config_path}: no \"config\" object; is {run.path} a run directory?")
    summary = run.read_summary(compat)
    if summary is None:
        raise InputError(f"{run.summary_path(compat)}: not there; `evalpipe score {run.path}"
                         f"{f' --compat {compat}' if compat else ''}` writes it")
    return EvalResult(run_dir=run.path, metrics=_frozen(run.read_metrics(compat)), summary=summary,
                      config=RunConfig.from_json(dict(recorded["config"])), compat=compat)


def rescore(run_dir: str | Path, compat: str | None = None, **metric_options: Any) -> EvalResult:
    """Re-parse and re-score a run's stored answers, as ``evalpipe score`` does: no model, no network.

    ``compat``: score like a reference implementation (a task's compatibility mode, e.g. evalscope).
    ``metric_options``: scoring settings for this scoring (``rouge_stemmer=True``, ``bertscore_model=…``;
    see :class:`evalpipe.metrics.options.MetricOptions`)."""
    from evalpipe.rescoring import rescore as rescore_run

    rescore_run(Path(run_dir), compat, metric_options)
    return load_run(run_dir, compat)


def evaluate(
    tasks: str | Sequence[str],
    *,
    model: str | None,
    base_url: str | Sequence[str] | None = None,
    engine: str | None = None,
    limit: int | None = None,
    results_dir: str | Path = "results",
    task_files: Sequence[str | Path] = (),
    startup_timeout: float = 600.0,
    progress: bool = False,
    **options: Any,
) -> EvalResult:
    """Evaluate ``model`` on ``tasks`` (names, as ``evalpipe tasks`` lists them) and return what it
    measured; the same call resumes the run (only prompts without a stored answer are sent).

    ``base_url``: an OpenAI-compatible ``/v1`` URL (a list: replicas of one model), or ``engine``:
    ``llamacpp``, ``vllm``, ``vllm-inprocess`` (started and stopped here). ``task_files``: your own
    task files (YAML), run beside ``tasks``. ``options``: any other option of ``evalpipe run``, as
    the :class:`~evalpipe.config.RunConfig` field it sets — ``temperature=0.7``, ``shots=3``,
    ``endpoint="completions"``, ``concurrency=8``, ``data={"medqa": "/path/test.jsonl"}``,
    ``suites=["cblue"]``, ``engine_settings={"dtype": "bfloat16"}``, ``engine_args=["max-num-seqs=64"]``.

    The API key is read from the environment variable ``api_key_env`` names (default
    ``OPENAI_API_KEY``; unset sends "EMPTY"), never passed as a value. Raises a ``UsageError`` for
    an option the run cannot use, before anything is written or sent; other
    :class:`~evalpipe.errors.EvalpipeError` subclasses for bad data, an unreachable endpoint, a busy
    run directory. Failed requests are not an exception: see :attr:`EvalResult.unanswered`.
    ``progress``: show the requests' progress on stderr, as ``evalpipe run`` does (default: quiet).
    """
    from evalpipe.configure import build_config
    from evalpipe.execution import run_config
    from evalpipe.tasks.registry import register_task_file, resolve

    known = {f.name for f in fields(RunConfig)} - set(_SET_HERE) | set(_BUILD_OPTIONS)
    unknown = sorted(set(options) - known)
    if unknown:
        raise UsageError(f"evaluate() got unknown option(s) {', '.join(unknown)}; options: {', '.join(sorted(known))}")
    if options.get("api_key_env") and not os.environ.get(options["api_key_env"]):
        # named, it must hold a key: unset it would silently send "EMPTY" (as `--api-key-env` refuses)
        raise UsageError(f"environment variable {options['api_key_env']} is not set (or is empty); export the "
                         "API key there, or leave api_key_env out for a server that needs no key")
    names = [tasks] if isinstance(tasks, str) else list(tasks)
    names += [register_task_file(Path(path)).name for path in task_files]
    suites = list(options.pop("suites", ()))
    if not names and not suites:
        raise UsageError("evaluate() needs at least one task (or suites=[…])")
    specs = resolve(names, suites)
    urls = [base_url] if isinstance(base_url, str) else list(base_url or ())
    options = _stored_forms(options)
    config = build_config(specs, suites=tuple(suites), model=model, base_urls=urls, engine=engine, limit=limit,
                          **options)
    outcome = run_config(config, Path(results_dir), startup_timeout=startup_timeout,
                         progress=_stderr_progress() if progress else None)
    return load_run(outcome.run_dir.path, config.compat)


def _stderr_progress() -> Any:
    from rich.console import Console

    from evalpipe.pipeline.progress import make_progress

    return make_progress(Console(stderr=True))


def _stored_forms(options: dict[str, Any]) -> dict[str, Any]:
    """Options as RunConfig stores them: sequences as tuples, file paths absolute (the CLI resolves
    ``--data`` and ``--data-dir`` the same way, so both name the same run directory)."""
    out = dict(options)
    for name in ("ids", "prompt_variants", "shots_sweep"):
        if out.get(name) is not None and not isinstance(out[name], str):
            out[name] = tuple(out[name])
    for name in ("ids", "prompt_variants"):
        if isinstance(out.get(name), str):
            out[name] = (out[name],)
    if out.get("data"):
        out["data"] = {str(key): str(Path(value).resolve()) for key, value in dict(out["data"]).items()}
    if out.get("data_dir"):
        out["data_dir"] = str(Path(out["data_dir"]).resolve())
    if "engine_args" in out:
        out["engine_args"] = list(out["engine_args"])
    return out
