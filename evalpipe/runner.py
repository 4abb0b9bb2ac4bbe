"""Wire the stages together: load → render → (store | backend) → parse → score → results.

The runner knows no task by name; everything task-specific comes from the :class:`TaskSpec`.
Order of work is chosen so that mistakes cost nothing:

1. load and validate every task's data, select shots, render every prompt (bad data or a broken
   template fails here, before any request);
2. write the plan (sample → prompt → cache key) into the run's response store;
3. look every key up in the store; only the missing ones are sent (that is resume);
4. send them concurrently; each answer is committed to the store the moment it arrives;
5. parse and score everything, write ``samples.jsonl``, ``metrics.json`` and ``summary.json``.

``evalpipe score`` is steps 3 and 5 without a backend, reading the plan from the store
(:mod:`evalpipe.rescoring`); parsing and scoring one task is :mod:`evalpipe.scoring`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from evalpipe import __version__
from evalpipe.backends.base import Backend
from evalpipe.backends.factory import OnceFactory
from evalpipe.budget import (
    EstimateCounter,
    HFTokenizerCounter,
    TokenCounter,
    detect_counter,
    fit_prompt,
    model_context_length,
)
from evalpipe.cache import ResponseStore, cache_key
from evalpipe.config import RunConfig, data_paths_for
from evalpipe.data.digest import file_sha256
from evalpipe.data.errors import DataError
from evalpipe.endpoints import is_local_url, redact_url
from evalpipe.metrics.options import MetricOptions
from evalpipe.prompting import (
    PromptOptions,
    PromptRenderer,
    inputs_fingerprint,
    select_shots,
    template_path,
    template_sha256,
)
from evalpipe.records import Completion, Example, GenerationParams, Prompt, to_jsonable
from evalpipe.results import RunDir, git_commit
from evalpipe.scoring import TaskOutcome, answer_prefix, score_task
from evalpipe.tasks.base import IncompleteSuite, LoadOptions, PartialSuite, TaskData, TaskSpec
from evalpipe.tasks.registry import get_task, suites

REPO_ROOT = Path(__file__).resolve().parent.parent


class RunError(RuntimeError):
    """A user-facing problem that stops a run before (or instead of) sending requests."""


class ProgressSink(Protocol):
    def start(self, total: int, cached: int) -> None: ...
    def advance(self, completion: Completion) -> None: ...
    def close(self) -> None: ...


class NullProgress:
    def start(self, total: int, cached: int) -> None: ...
    def advance(self, completion: Completion) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class PreparedTask:
    spec: TaskSpec
    data: TaskData
    examples: tuple[Example, ...]
    shots: tuple[Example, ...]
    prompts: tuple[Prompt, ...]
    keys: tuple[str, ...]
    max_tokens: int
    renderer: PromptRenderer
    model: str
    #: tokens cut from the task's long field per sample (context budgeting); all 0 if none
    truncated: tuple[int, ...] = ()

    def truncated_tokens(self) -> tuple[int, ...]:
        return self.truncated or (0,) * len(self.examples)


@dataclass
class RunOutcome:
    run_dir: RunDir
    tasks: list[TaskOutcome]
    sent: int = 0
    cached: int = 0
    #: suite name → aggregate metrics (e.g. CLUE level scores)
    aggregates: dict[str, dict[str, float]] = field(default_factory=dict)
    #: suite name → why its aggregate was not (fully) computed
    incomplete: dict[str, str] = field(default_factory=dict)
    #: task name → why it was skipped (suite run without its data)
    skipped: dict[str, str] = field(default_factory=dict)
    #: how long inputs were fitted to the context (None: no task has a long field)
    budget: Any = None
    #: things the user should know about this run (printed after the table)
    notes: list[str] = field(default_factory=list)

    @property
    def metrics(self) -> dict[str, dict[str, float]]:
        return {**{t.name: t.metrics for t in self.tasks}, **self.aggregates}

    def add_aggregates(self, suite_names: Sequence[str], subset: bool = False) -> None:
        """Suite aggregates over the tasks scored; say so when they cannot be compared to a paper.

        An aggregate over a subset (``--limit``/``--ids``) or over tasks with failed requests is
        still computed — it is what was measured — but flagged in ``incomplete``.
        """
        by_task = {t.name: t.metrics for t in self.tasks}
        known = suites()
        for name in suite_names:
            suite = known.get(name)
            if suite is None or suite.aggregate is None:
                continue
            try:
                self.aggregates[name] = suite.aggregate(by_task)
            except PartialSuite as exc:
                self.aggregates[name] = exc.partial
                self.incomplete[name] = str(exc)
                continue
            except IncompleteSuite as exc:
                self.incomplete[name] = str(exc)
                continue
            failed = [t for t in suite.tasks if by_task.get(t, {}).get("errors", 0)]
            caveats = []
            if subset:
                caveats.append("computed on a subset of samples (--limit/--ids)")
            if failed:
                caveats.append(f"tasks with failed requests: {', '.join(failed)}")
            if caveats:
                self.incomplete[name] = "; ".join(caveats) + " — not comparable to published scores"


# ---- 1. prepare ------------------------------------------------------------------------------

def _subset(examples: tuple[Example, ...], config: RunConfig, task: str) -> tuple[Example, ...]:
    if config.ids is not None:
        wanted = list(dict.fromkeys(config.ids))
        by_id = {ex.id: ex for ex in examples}
        missing = [i for i in wanted if i not in by_id]
        if missing:
            shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
            raise RunError(f"task {task}: unknown sample id(s): {shown} (ids look like {examples[0].id!r})")
        examples = tuple(by_id[i] for i in wanted)
    if config.limit is not None:
        examples = examples[: config.limit]
    return examples


def load_options(config: RunConfig, task: str, split: str | None = None) -> LoadOptions:
    return LoadOptions(
        split=split if split is not None else config.split,
        paths=data_paths_for(config, task),
        data_dir=Path(config.data_dir) if config.data_dir else None,
        seed=config.seed if config.seed is not None else 0,
        context_length=config.context_length,
    )


def prepare_task(
    spec: TaskSpec,
    config: RunConfig,
    context_length: int | None = None,
    token_counter: Callable[[str], int] | None = None,
) -> PreparedTask:
    """Load, subset and render one task. ``context_length``/``token_counter`` override what the
    loader is told (for tasks ``sized_by_context``, once the budget is known)."""
    options = load_options(config, spec.name)
    if context_length is not None:
        options = replace(options, context_length=context_length, token_counter=token_counter)
    data = spec.load(options)
    examples = _subset(data.examples, config, spec.name)
    k = spec.default_shots if config.shots is None else config.shots
    # fingerprints serialise every evaluated input (LongHealth: tens of MB): only when shots are drawn
    fingerprints = {inputs_fingerprint(ex) for ex in data.examples} if k > 0 else set()
    try:
        shots = select_shots(data.shot_pool, k, config.fewshot_seed, {ex.id for ex in data.examples}, fingerprints)
    except ValueError as exc:
        raise RunError(f"task {spec.name}: {exc}") from None
    max_tokens = config.max_tokens or spec.max_tokens
    params = GenerationParams(
        max_tokens=max_tokens, temperature=config.temperature, top_p=config.top_p, seed=config.seed
    )
    renderer = PromptRenderer(
        spec, shots, params,
        PromptOptions(endpoint=config.endpoint, fewshot_as_turns=config.fewshot_as_turns,
                      system_role=config.system_role),
    )
    prompts = tuple(renderer.render(ex) for ex in examples)
    keys = tuple(cache_key(config.model, p) for p in prompts)
    return PreparedTask(spec, data, examples, shots, prompts, keys, max_tokens, renderer, config.model)


async def apply_budget(p: PreparedTask, context_length: int, counter: TokenCounter) -> PreparedTask:
    """Shorten the task's long field where a prompt would not fit the context (see evalpipe.budget)."""
    if p.spec.long_field is None:
        return p
    fitted = await asyncio.gather(*(fit_prompt(ex, p.renderer.render, p.spec.long_field, context_length, counter,
                                               prompt=prompt) for ex, prompt in zip(p.examples, p.prompts)))
    prompts = tuple(f.prompt for f in fitted)
    return replace(
        p,
        examples=tuple(f.example for f in fitted),
        prompts=prompts,
        # an untouched prompt keeps the key prepare_task computed
        keys=tuple(key if f.truncated_tokens == 0 and f.prompt is prompt else cache_key(p.model, f.prompt)
                   for f, prompt, key in zip(fitted, p.prompts, p.keys)),
        truncated=tuple(f.truncated_tokens for f in fitted),
    )


async def budget_all(
    prepared: list[PreparedTask], config: RunConfig, previous: Mapping[str, Any] | None = None,
    backend_factory: Callable[[RunConfig], Backend] | None = None,
) -> tuple[list[PreparedTask], dict[str, Any]]:
    """Apply context budgeting to every task with a long field or sized by context; say how.

    A task with a long field has it shortened where a prompt would not fit (:func:`apply_budget`).
    A task ``sized_by_context`` (LongHealth) is loaded again with the context length and tokenizer
    found here, unless its first load already had both (an estimate and the context the user gave).

    Nothing is counted before :func:`check_endpoint_policy` has passed: counting sends the texts
    to the server's tokenize endpoint.

    ``previous`` is the budget recorded by an earlier run in the same directory. Resuming must
    render the very same prompts (or every answer would be asked again), so its context length is
    reused, and a run budgeted with the server's tokenizer refuses to continue with the estimate.
    """
    if not any(p.spec.long_field or p.spec.sized_by_context for p in prepared):
        return prepared, {}
    previous = previous if isinstance(previous, Mapping) else {}
    in_process = config.engine == "vllm-inprocess"
    backend = backend_factory(config) if backend_factory is not None and config.base_url and not in_process else None
    context_length = config.context_length or previous.get("context_length") or (
        model_context_length(config.model) if in_process
        else await backend.context_length() if backend is not None else None
    )
    if context_length is None:
        return prepared, {"budget": "not applied: the context length is unknown (pass --context-length); "
                                    "prompts longer than the model's context will fail"}
    counter: TokenCounter
    if in_process:
        try:
            counter = HFTokenizerCounter(config.model)
        except Exception:  # no local tokenizer files: fall back to the documented estimate
            counter = EstimateCounter()
    else:
        counter = await detect_counter(backend) if backend is not None else EstimateCounter()
    if previous.get("token_counter") == "server" and counter.kind != "server":
        raise RunError(
            "this run's long inputs were fitted with the server's tokenizer, which does not answer now; "
            "resume when the server is up (with the estimate the prompts — and their stored answers — "
            "would not match)"
        )
    measured = counter.kind == "server"
    loop = asyncio.get_running_loop()
    # the loader counts synchronously, in a worker thread; the counts run on this loop's client.
    # LongHealth measures the same letters again and again (three tasks, many questions each)
    count = functools.lru_cache(maxsize=None)(
        lambda text: asyncio.run_coroutine_threadsafe(counter.count(text), loop).result()) if measured else None

    async def sized(p: PreparedTask) -> PreparedTask:
        if not p.spec.sized_by_context or (not measured and context_length == config.context_length):
            return p
        return await asyncio.to_thread(prepare_task, p.spec, config, context_length, count)

    budgeted = [await apply_budget(await sized(p), context_length, counter) for p in prepared]
    info: dict[str, Any] = {"context_length": context_length, "token_counter": counter.kind}
    if getattr(counter, "chat_template", False) is True:
        info["chat_counting"] = "template"
    if getattr(counter, "fallbacks", 0):
        info["estimated_counts"] = counter.fallbacks
    return budgeted, {"budget": info}


def _missing_data(spec: TaskSpec, config: RunConfig) -> str | None:
    """Why the task's data is absent (cheap check), or None."""
    if spec.data_problem is None:
        return None
    return spec.data_problem(load_options(config, spec.name))


#: file roles a task may read besides its evaluated file (``--data TASK:ROLE=PATH``)
DATA_ROLES = {"eval": "the evaluated file", "shots": "the file shots are drawn from",
              "schema": "CMeIE's relation schema", "cdn_terms": "CHIP-CDN's ICD-10 term table"}


def check_data_options(config: RunConfig) -> None:
    """``--data`` keys must name a task of this run and a known role: a typo must not silently
    evaluate the shipped data instead of the user's file."""
    for key, path in config.data.items():
        task, _, role = key.partition(":")
        if task not in config.tasks:
            raise RunError(f"--data {key}={path}: {task!r} is not a task of this run "
                           f"(tasks: {', '.join(config.tasks)})")
        if role and role not in DATA_ROLES:
            known = ", ".join(f"{r} ({what})" for r, what in DATA_ROLES.items())
            raise RunError(f"--data {key}={path}: unknown role {role!r}; roles: {known}")
        if not Path(path).exists():
            raise DataError(path, None, None, f"file not found (given as --data {key})")


def prepare(config: RunConfig, skipped: dict[str, str] | None = None) -> list[PreparedTask]:
    """Load, validate and render every task.

    In a suite run (``config.suites``) a task whose data files are absent is skipped and the
    reason put in ``skipped`` — users rarely hold every credentialed data set. A file that exists
    but is malformed is always an error, and so is a missing file for a task asked for alone.
    """
    if not config.tasks:
        raise RunError("no task given (use --task NAME or --suite NAME; `evalpipe tasks` lists them)")
    check_data_options(config)
    skipped = {} if skipped is None else skipped
    prepared = []
    for name in config.tasks:
        spec = get_task(name)
        if config.suites:
            problem = _missing_data(spec, config)
            if problem is None:
                try:
                    prepared.append(prepare_task(spec, config))
                    continue
                except DataError as exc:
                    if exc.line is not None or Path(exc.path).exists():
                        raise
                    problem = str(exc)
            skipped[name] = problem
            continue
        prepared.append(prepare_task(spec, config))
    if not prepared:
        lines = "\n".join(f"  {name}: {why}" for name, why in skipped.items())
        raise RunError(f"no task of the suite has its data:\n{lines}")
    return prepared


def check_endpoint_policy(prepared: Sequence[PreparedTask], config: RunConfig) -> None:
    """Refuse to send credentialed data to a non-local endpoint unless explicitly allowed."""
    credentialed = [p.spec.name for p in prepared if p.spec.credentialed]
    if not credentialed or config.allow_external_endpoint:
        return
    for url in [u for u in (config.base_url, *config.replicas) if u]:  # every replica, not just the first
        if not is_local_url(url):
            raise RunError(
                f"task(s) {', '.join(credentialed)} use credentialed data (PhysioNet DUA) and "
                f"{redact_url(url)} is not a loopback or private address; pass --allow-external-endpoint "
                "only if your data use agreement permits sending the data there"
            )


def _task_record(p: PreparedTask, config: RunConfig) -> dict[str, Any]:
    return {
        "template": str(template_path(p.spec).relative_to(REPO_ROOT))
        if template_path(p.spec).is_relative_to(REPO_ROOT) else str(template_path(p.spec)),
        "template_sha256": template_sha256(p.spec),
        "data_files": {str(f): file_sha256(Path(f)) for f in p.data.files},
        "split": p.data.split,
        "n": len(p.examples),
        "shots": [s.id for s in p.shots],
        "fewshot_seed": config.fewshot_seed,
        "max_tokens": p.max_tokens,
        "credentialed": p.spec.credentialed,
    }


def write_config(run: RunDir, config: RunConfig, prepared: Sequence[PreparedTask],
                 backend: Backend | None, skipped: Mapping[str, str] | None = None,
                 budget: Any = None) -> None:
    previous = run.read_config() if run.exists() else {}
    ran = replace(
        config,
        tasks=tuple(p.spec.name for p in prepared),
        base_url=redact_url(config.base_url) if config.base_url else None,
        replicas=tuple(redact_url(u) for u in config.replicas),
    )
    run.write_json(run.config_path, {
        "config": ran.to_json(),
        "skipped_tasks": dict(skipped or {}),
        "budget": budget if budget is not None else previous.get("budget"),
        "evalpipe_version": __version__,
        "git_commit": git_commit(REPO_ROOT),
        "tasks": {p.spec.name: _task_record(p, config) for p in prepared},
        "backend": dict(backend.describe()) if backend is not None else previous.get("backend"),
        "allow_external_endpoint": config.allow_external_endpoint,
        "created": previous.get("created", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })


def _prompt_json(prompt: Prompt) -> str:
    return json.dumps(to_jsonable(prompt), ensure_ascii=False)


# ---- 3./4. fetch -----------------------------------------------------------------------------

async def fetch_answers(
    pending: Mapping[str, Prompt],
    backend: Backend,
    store: ResponseStore,
    progress: ProgressSink,
    workers: int = 128,
) -> dict[str, Completion]:
    """Send every pending prompt once; commit each good answer to the store on arrival.

    A fixed pool of worker coroutines (not one task per prompt) pulls prompts from a shared
    iterator: with tens of thousands of prompts, one task each makes every garbage collection walk
    them all (measured: ~20 % more client CPU per request). The backend still decides how many
    requests are really in flight; ``workers`` only has to be at least that.
    """
    results: dict[str, Completion] = {}
    items = iter(pending.items())

    async def worker() -> None:
        for key, prompt in items:
            completion = await backend.complete(prompt)
            if completion.ok:
                store.put(key, backend.model, completion)
            results[key] = completion
            progress.advance(completion)

    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, min(workers, len(pending))))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    return results


# ---- 5. results ------------------------------------------------------------------------------

def write_outcome(run: RunDir, outcome: RunOutcome, compat: str | None, extra: Mapping[str, Any]) -> None:
    run.write_samples((r for t in outcome.tasks for r in t.records), compat)
    run.write_json(run.metrics_path(compat), outcome.metrics)
    run.write_json(run.summary_path(compat), {
        **{t.name: t.summary for t in outcome.tasks},
        "_run": {"sent": outcome.sent, "cached": outcome.cached, "incomplete_suites": outcome.incomplete,
                 "skipped_tasks": outcome.skipped, **extra},
    })


# ---- the two entry points --------------------------------------------------------------------

def run_dir_for(config: RunConfig, results_root: Path) -> RunDir:
    return RunDir(results_root / (config.run_name or config.default_run_name()))


async def execute(
    config: RunConfig,
    backend_factory: Callable[[RunConfig], Backend],
    results_root: Path,
    progress: ProgressSink | None = None,
    on_prepared: Callable[[RunDir, int, int], None] | None = None,
) -> RunOutcome:
    """Run (or resume) an evaluation and write its results. Raises RunError/BackendError early."""
    progress = progress or NullProgress()
    skipped: dict[str, str] = {}
    prepared = prepare(config, skipped)
    check_endpoint_policy(prepared, config)
    run = run_dir_for(config, results_root)
    previous_budget = run.read_config().get("budget") if run.exists() else None
    shared = OnceFactory(backend_factory)  # budgeting and fetching share one backend
    try:
        prepared, budget_info = await budget_all(prepared, config, previous_budget, shared)
        for p in prepared:
            p.spec.scoring(config.compat)  # an unknown --compat fails before any request
        with run.lock():
            return await _execute_locked(config, run, prepared, skipped, budget_info, shared, progress, on_prepared)
    finally:
        await shared.aclose()


async def _execute_locked(
    config: RunConfig,
    run: RunDir,
    prepared: list[PreparedTask],
    skipped: dict[str, str],
    budget_info: dict[str, Any],
    backend_factory: Callable[[RunConfig], Backend],
    progress: ProgressSink,
    on_prepared: Callable[[RunDir, int, int], None] | None,
) -> RunOutcome:
    store = ResponseStore(run.store_path)
    backend: Backend | None = None
    notes: list[str] = []
    # serialised once: the plan stores them and every sample record carries them
    prompts_json = {p.spec.name: [_prompt_json(prompt) for prompt in p.prompts] for p in prepared}
    try:
        for p in prepared:
            before = store.plan_size(p.spec.name)
            if before > len(p.examples):
                notes.append(f"{p.spec.name}: this run directory held {before} samples; its results now cover "
                             f"{len(p.examples)} (--limit/--ids). All answers stay stored: run without them "
                             "to restore the full results")
            store.write_plan(
                p.spec.name,
                [(ex.id, key, pj) for ex, key, pj in zip(p.examples, p.keys, prompts_json[p.spec.name])],
                [{"truncated_tokens": t} for t in p.truncated_tokens()],
            )
        all_keys = [k for p in prepared for k in p.keys]
        answers: dict[str, Completion] = store.get_many(all_keys)
        pending = {k: prompt for p in prepared for k, prompt in zip(p.keys, p.prompts) if k not in answers}
        if on_prepared is not None:
            on_prepared(run, len(dict.fromkeys(all_keys)), len(pending))
        if pending:
            backend = backend_factory(config)
            await backend.preflight()
        write_config(run, config, prepared, backend, skipped, budget_info.get("budget"))
        sent = 0
        fetch_s = 0.0
        stats: Mapping[str, Any] = {}
        if pending:
            assert backend is not None
            progress.start(total=len(dict.fromkeys(all_keys)), cached=len(dict.fromkeys(all_keys)) - len(pending))
            fetch_started = time.monotonic()
            try:
                fresh = await fetch_answers(pending, backend, store, progress,
                                            workers=2 * max(config.concurrency, 1) * (1 + len(config.replicas)))
            finally:
                progress.close()
            fetch_s = time.monotonic() - fetch_started
            answers.update(fresh)
            sent = len(pending)
            stats = backend.stats()
        outcome = RunOutcome(run_dir=run, tasks=[], sent=sent, cached=len(dict.fromkeys(all_keys)) - sent,
                             skipped=skipped, budget=budget_info.get("budget"), notes=notes)
        options = MetricOptions.from_json(config.metric_options)
        for p in prepared:
            outcome.tasks.append(score_task(
                p.spec, p.examples, prompts_json[p.spec.name], [answers.get(k) for k in p.keys],
                config.compat, options, p.truncated_tokens(), answer_prefix(p.spec, config),
            ))
        outcome.add_aggregates(config.suites, subset=config.limit is not None or config.ids is not None)
        write_outcome(run, outcome, config.compat,
                      {"backend": dict(stats), "fetch_seconds": fetch_s, **budget_info})
        return outcome
    finally:
        if backend is not None:
            await backend.aclose()
        store.close()
