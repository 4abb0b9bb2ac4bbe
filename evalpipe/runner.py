"""Wire the stages together: load → render → (store | backend) → parse → score → results.

The runner knows no task by name; everything task-specific comes from the :class:`TaskSpec`.
Order of work is chosen so that mistakes cost nothing:

1. load and validate every task's data, select shots, render every prompt (bad data or a broken
   template fails here, before any request);
2. write the plan (sample → cache key, each distinct prompt once) into the run's response store;
3. look every key up in the store; only the missing ones are sent (that is resume);
4. send them concurrently; each answer is committed to the store the moment it arrives (in groups,
   :mod:`evalpipe.answer_writer`: an answer is counted only once it is committed);
5. parse and score everything, write ``samples.jsonl``, ``metrics.json`` and ``summary.json``.

Memory: a prepared task holds its examples, its keys and its prompts *packed* — the form the store
keeps (:mod:`evalpipe.prompt_pack`: the text all its prompts share, once, and each prompt's own
part) — never its rendered prompts: 47,000 rendered 5-shot prompts are ~300 MB in Python objects,
packed ~15 MB. Each prompt is rendered once; a pending one is unpacked when it is sent. Records are
built as ``samples.jsonl`` is written.

``evalpipe score`` is steps 3 and 5 without a backend, reading the plan from the store
(:mod:`evalpipe.rescoring`); parsing and scoring one task is :mod:`evalpipe.scoring`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
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
from evalpipe.answer_writer import AnswerWriter
from evalpipe.heap import frozen_heap
from evalpipe.prompt_pack import LEARN, Packer, unpack
from evalpipe.cache import ResponseStore, cache_key
from evalpipe.conditions import Condition, TaskConditions, plan_name, shot_permutation, task_conditions
from evalpipe.config import RunConfig, load_options, local_model_fingerprint, task_args_for
from evalpipe.data.digest import file_sha256
from evalpipe.data.errors import DataError
from evalpipe.endpoints import is_local_url, redact_url
from evalpipe.metrics.options import MetricOptions
from evalpipe.prompting import (
    DEFAULT_VARIANT,
    PromptOptions,
    PromptRenderer,
    inputs_fingerprint,
    select_shots,
    template_path,
    template_sha256,
    variant_templates,
)
from evalpipe.backends.embeddings import Embedder, make_embedder
from evalpipe.backends.ranking import RankingBackend, pool_digest
from evalpipe.records import Completion, Example, GenerationParams, Prompt, to_jsonable
from evalpipe.outcome import RunError, RunOutcome, write_outcome
from evalpipe.results import Budget, RunDir, RunInfo, git_commit
from evalpipe.robustness import ConditionOutcome, combine_tasks
from evalpipe.scoring import answer_prefix, score_task
from evalpipe.tasks.base import LOGLIKELIHOOD, LoadOptions, TaskData, TaskSpec
from evalpipe.tasks.registry import get_task

from evalpipe.paths import REPO_ROOT


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
    #: renders one example's prompt (deterministic: the same example always gives the same prompt)
    make_prompt: Callable[[Example], Prompt]
    keys: tuple[str, ...]
    #: each example's prompt, packed (JSON text; the shared texts are the packer's)
    packed: tuple[str, ...]
    packer: Packer
    max_tokens: int
    #: None for a retrieval task (its prompts are query texts, not rendered from a template)
    renderer: PromptRenderer | None
    model: str
    #: tokens cut from the task's long field per sample (context budgeting); all 0 if none
    truncated: tuple[int, ...] = ()
    #: a retrieval task's candidate pool (empty for generation tasks)
    pool: tuple[str, ...] = ()
    #: the prompt condition rendered (variant, shot count, shot order); None = the run asks for none
    condition: Condition | None = None
    #: the variant's template under prompts/ (None = the task's canonical template)
    template: str | None = None

    def truncated_tokens(self) -> tuple[int, ...]:
        return self.truncated or (0,) * len(self.examples)

    def prompt(self, i: int) -> Prompt:
        """The prompt of the ``i``-th example (unpacked now: the module docstring says why)."""
        return Prompt.from_json(self.prompt_json(i))

    def prompt_json(self, i: int) -> dict[str, Any]:
        """The JSON form of the ``i``-th example's prompt."""
        return unpack(json.loads(self.packed[i]), self.packer.texts)

    @property
    def prompts(self) -> Sequence[Prompt]:
        """Every example's prompt, each unpacked when read."""
        return _Rendered(self)

    @property
    def plan_name(self) -> str:
        """Under which name the store keeps this task's (condition's) plan."""
        return plan_name(self.spec.name, self.condition)


class _Rendered(Sequence[Prompt]):
    def __init__(self, task: PreparedTask) -> None:
        self._task = task

    def __len__(self) -> int:
        return len(self._task.examples)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self._task.prompt(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._task.prompt(index)


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


def _load_task(spec: TaskSpec, config: RunConfig, context_length: int | None = None,
               token_counter: Callable[[str], int] | None = None,
               ) -> tuple[TaskData, tuple[Example, ...], LoadOptions]:
    try:
        args = task_args_for(config, spec)
    except ValueError as exc:
        raise RunError(str(exc)) from None
    options = load_options(config, spec.name, args=args)
    if context_length is not None:
        options = replace(options, context_length=context_length, token_counter=token_counter)
    data = spec.load(options).materialized()  # a stream read whole (until issue 15's runner streams)
    return data, _subset(data.examples, config, spec.name), options


def _select_shots(spec: TaskSpec, config: RunConfig, data: TaskData, k: int) -> tuple[Example, ...]:
    # fingerprints serialise every evaluated input (LongHealth: tens of MB): only when shots are drawn
    fingerprints = {inputs_fingerprint(ex) for ex in data.examples} if k > 0 else set()
    seed = config.fewshot_seed if config.fewshot_seed is not None else spec.fewshot_seed
    try:
        return select_shots(data.shot_pool, k, seed, {ex.id for ex in data.examples}, fingerprints)
    except ValueError as exc:
        raise RunError(f"task {spec.name}: {exc}") from None


def prepare_task(
    spec: TaskSpec,
    config: RunConfig,
    context_length: int | None = None,
    token_counter: Callable[[str], int] | None = None,
    condition: Condition | None = None,
) -> PreparedTask:
    """Load, subset and render one task (under ``condition``, if the run asks for conditions).
    ``context_length``/``token_counter`` override what the loader is told (for tasks
    ``sized_by_context``, once the budget is known)."""
    data, examples, options = _load_task(spec, config, context_length, token_counter)
    if spec.ranking is not None:
        return _prepare_ranking(spec, config, data, examples, options)
    shots = _select_shots(spec, config, data, _shots_drawn(spec, config, condition))
    return _render_task(spec, config, data, examples, shots, condition)


def _render_task(spec: TaskSpec, config: RunConfig, data: TaskData, examples: tuple[Example, ...],
                 shots: tuple[Example, ...], condition: Condition | None = None) -> PreparedTask:
    template = None
    if condition is not None:  # ---- prompt conditions (evalpipe.conditions) ----
        k = _run_shots(spec, config) if condition.shots is None else condition.shots
        seed = config.fewshot_seed if config.fewshot_seed is not None else spec.fewshot_seed
        shots = tuple(shots[i] for i in shot_permutation(k, condition.order, seed))
        if condition.variant != DEFAULT_VARIANT:
            template = variant_templates(spec)[condition.variant]
    override = config.generation.get(spec.name, {})  # per-task settings (the demo's caps)
    max_tokens = override.get("max_tokens") or config.max_tokens or spec.max_tokens
    params = GenerationParams(
        max_tokens=max_tokens, temperature=config.temperature, top_p=config.top_p, seed=config.seed,
        stop=tuple(override.get("stop") or ()),
    )
    by_choices = config.choice_scoring == LOGLIKELIHOOD and spec.choice_scoring is not None
    renderer = PromptRenderer(
        spec, shots, params,
        # options are scored as continuations of the plain completion form (a chat API returns no
        # prompt log-probabilities)
        PromptOptions(endpoint="completions" if by_choices else config.endpoint,
                      fewshot_as_turns=config.fewshot_as_turns, system_role=config.system_role),
        template=template,
    )
    make_prompt: Callable[[Example], Prompt] = renderer.render
    if by_choices:
        assert spec.choice_scoring is not None
        make_prompt = functools.partial(
            _with_choices, renderer.render, GenerationParams(max_tokens=1, temperature=0.0, seed=config.seed),
            spec.choice_scoring.continuations)
    # every prompt is rendered here, before anything is sent: a template error costs nothing
    keys, packed, packer = _render_all(config.model, examples, make_prompt)
    return PreparedTask(spec, data, examples, shots, make_prompt, keys, packed, packer, max_tokens, renderer,
                        config.model, condition=condition, template=template)


def _render_all(model: str, examples: Sequence[Example], make_prompt: Callable[[Example], Prompt],
                ) -> tuple[tuple[str, ...], tuple[str, ...], Packer]:
    """Every example's cache key and packed prompt, each prompt rendered once (the first
    :data:`~evalpipe.prompt_pack.LEARN` twice: the text they share is learnt from them)."""
    packer = Packer()
    packer.learn(to_jsonable(make_prompt(ex)) for ex in examples[:LEARN])
    keys, packed = [], []
    for example in examples:
        prompt = make_prompt(example)
        keys.append(cache_key(model, prompt))
        packed.append(_dumps(packer.pack(to_jsonable(prompt))))
    return tuple(keys), tuple(packed), packer


def _dumps(packed: Any) -> str:
    return json.dumps(packed, ensure_ascii=False)


def _with_choices(render: Callable[[Example], Prompt], params: GenerationParams,
                  continuations: Callable[[Example], tuple[str, ...]], example: Example) -> Prompt:
    """A log-likelihood request: the completion prompt, scored over the options' continuations."""
    return replace(render(example), params=params, choices=continuations(example))


def _ranking_query(params: GenerationParams, query: Callable[[Example], str], example: Example) -> Prompt:
    return Prompt(params=params, text=query(example))


# ---- prompt conditions (evalpipe.conditions): variants × shot counts × shot orders ----------

def _run_shots(spec: TaskSpec, config: RunConfig) -> int:
    return spec.default_shots if config.shots is None else config.shots


def _shots_drawn(spec: TaskSpec, config: RunConfig, condition: Condition | None) -> int:
    """How many shots are selected: a sweep's counts all take a prefix of its largest count's shots."""
    if condition is not None and config.shots_sweep:
        return max(config.shots_sweep)
    return _run_shots(spec, config)


def conditions_of(spec: TaskSpec, config: RunConfig) -> TaskConditions:
    """The task's conditions under the run's options (a retrieval task has only its canonical one)."""
    if spec.ranking is not None or not config.has_conditions:
        return TaskConditions((Condition(),))
    try:
        return task_conditions(spec.name, list(variant_templates(spec)), config.prompt_variants,
                               config.shot_orders, config.shots_sweep, _run_shots(spec, config))
    except ValueError as exc:
        raise RunError(str(exc)) from None


def prepare_conditions(spec: TaskSpec, config: RunConfig, notes: list[str] | None = None) -> list[PreparedTask]:
    """One prepared task per condition the run asks for (loaded once, rendered per condition); a
    task evaluated under its canonical condition only is prepared exactly as without conditions."""
    asked = conditions_of(spec, config)
    if notes is not None:
        notes.extend(asked.notes)
    if not asked.varied:
        return [prepare_task(spec, config)]
    data, examples, _ = _load_task(spec, config)
    shots = _select_shots(spec, config, data, _shots_drawn(spec, config, asked.conditions[0]))
    return [_render_task(spec, config, data, examples, shots, c) for c in asked.conditions]


def ranking_identity(config: RunConfig, pool: Sequence[str], depth: int) -> str:
    """What a retrieval answer depends on, as the "model" of its cache key: the embedding model (a
    local folder by its fingerprint), the candidate pool and the ranking depth."""
    if config.embeddings_path:
        embedder = f"path:{Path(config.embeddings_path).name}@{local_model_fingerprint(config.embeddings_path)}"
    else:
        embedder = f"model:{config.embeddings_model}"
    return f"embeddings[{embedder}]|pool:{pool_digest(pool)}|depth:{depth}"


def _prepare_ranking(spec: TaskSpec, config: RunConfig, data: TaskData, examples: tuple[Example, ...],
                     options: LoadOptions) -> PreparedTask:
    """A retrieval task: its pool, and one query "prompt" per example (answered by a ranker)."""
    assert spec.ranking is not None
    try:
        planned = spec.ranking.plan(data, examples, options)
    except ValueError as exc:
        raise RunError(f"task {spec.name}: {exc}") from None
    make_prompt = functools.partial(_ranking_query, GenerationParams(max_tokens=spec.ranking.depth),
                                    spec.ranking.query)
    identity = ranking_identity(config, planned.pool, spec.ranking.depth)
    keys, packed, packer = _render_all(identity, planned.examples, make_prompt)
    return PreparedTask(spec, data, planned.examples, (), make_prompt, keys, packed, packer, spec.ranking.depth,
                        None, identity, pool=planned.pool)


async def apply_budget(p: PreparedTask, context_length: int, counter: TokenCounter) -> PreparedTask:
    """Shorten the task's long field where a prompt would not fit the context (see evalpipe.budget)."""
    if p.spec.long_field is None:
        return p
    prompts = list(p.prompts)
    fitted = await asyncio.gather(*(fit_prompt(ex, p.make_prompt, p.spec.long_field, context_length, counter,
                                               prompt=prompt) for ex, prompt in zip(p.examples, prompts)))
    # an untouched prompt keeps the key and packed form prepare_task computed
    changed = [not (f.truncated_tokens == 0 and f.prompt is prompt) for f, prompt in zip(fitted, prompts)]
    return replace(
        p,
        examples=tuple(f.example for f in fitted),
        keys=tuple(cache_key(p.model, f.prompt) if c else key for f, c, key in zip(fitted, changed, p.keys)),
        packed=tuple(_dumps(p.packer.pack(to_jsonable(f.prompt))) if c else packed
                     for f, c, packed in zip(fitted, changed, p.packed)),
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
        return await asyncio.to_thread(prepare_task, p.spec, config, context_length, count, p.condition)

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


def check_data_options(config: RunConfig) -> None:
    """``--data`` keys must name a task of this run and a data role that task declares, and
    ``--data-dir`` must exist: a typo must not silently evaluate the shipped data instead of the
    user's file, nor make a suite run skip every task whose data is not shipped."""
    if config.data_dir and not Path(config.data_dir).is_dir():
        raise RunError(f"--data-dir {config.data_dir}: does not exist (or is not a folder)")
    for key, path in config.data.items():
        task, _, role = key.partition(":")
        if task not in config.tasks:
            raise RunError(f"--data {key}={path}: {task!r} is not a task of this run "
                           f"(tasks: {', '.join(config.tasks)})")
        roles = {r.name: r for r in get_task(task).data_roles}
        if (role or "eval") not in roles:
            known = ", ".join(f"{r.name} ({r.description})" for r in roles.values())
            raise RunError(f"--data {key}={path}: task {task} has no data role {role!r}; its roles: {known}")
        if not Path(path).exists():
            raise DataError(path, None, None, f"file not found (given as --data {key})")


def prepare(config: RunConfig, skipped: dict[str, str] | None = None,
            notes: list[str] | None = None) -> list[PreparedTask]:
    """Load, validate and render every task (once per prompt condition the run asks for; what the
    user should know about those goes into ``notes``).

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
        spec = get_task(name).scored_by(config.choice_scoring)
        if config.suites:
            problem = _missing_data(spec, config)
            if problem is None:
                try:
                    prepared.extend(prepare_conditions(spec, config, notes))
                    continue
                except DataError as exc:
                    if exc.line is not None or Path(exc.path).exists():
                        raise
                    problem = str(exc)
            skipped[name] = problem
            continue
        prepared.extend(prepare_conditions(spec, config, notes))
    if not prepared:
        lines = "\n".join(f"  {name}: {why}" for name, why in skipped.items())
        raise RunError(f"no task of the suite has its data:\n{lines}")
    return prepared


def check_endpoint_policy(prepared: Sequence[PreparedTask], config: RunConfig) -> None:
    """Refuse to send credentialed data to a non-local endpoint unless explicitly allowed."""
    credentialed = [p.spec.name for p in prepared if p.spec.credentialed]
    if not credentialed or config.allow_external_endpoint:
        return
    urls = (config.base_url, *config.replicas, config.embeddings_url)  # every replica, and the embedder
    for url in [u for u in urls if u]:
        if not is_local_url(url):
            raise RunError(
                f"task(s) {', '.join(credentialed)} use credentialed data (PhysioNet DUA) and "
                f"{redact_url(url)} is not a loopback or private address; pass --allow-external-endpoint "
                "only if your data use agreement permits sending the data there"
            )


def _shown_path(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def _task_record(p: PreparedTask, config: RunConfig) -> dict[str, Any]:
    template = template_path(p.spec, template=p.template) if p.renderer is not None else None
    return {
        "template": _shown_path(template) if template is not None else None,
        "template_sha256": template_sha256(p.spec, template=p.template) if template is not None else None,
        **({"pool_size": len(p.pool), "pool_digest": pool_digest(p.pool)} if p.pool else {}),
        "data_files": {str(f): file_sha256(Path(f)) for f in p.data.files},
        "split": p.data.split,
        "n": len(p.examples),
        "shots": [s.id for s in p.shots],
        "fewshot_seed": config.fewshot_seed if config.fewshot_seed is not None else p.spec.fewshot_seed,
        # a task defined by a task file: where, and its sha256 (`evalpipe score` builds it again from there)
        **({"task_file": str(p.spec.task_file), "task_file_sha256": file_sha256(p.spec.task_file)}
           if p.spec.task_file is not None else {}),
        "max_tokens": p.max_tokens,
        "credentialed": p.spec.credentialed,
        # what judges rate (evalpipe.judging reads it from here, so judging needs only the run directory)
        "answer_kind": p.spec.answer_kind,
        "judge_rubric": p.spec.judge_rubric,
        # what a report says about the task, recorded so that the report needs only the run directory
        "description": p.spec.description,
        "metrics": list(p.spec.metrics),
        "primary_metric": p.spec.primary_metric,
        "metric_definitions": dict(p.spec.metric_definitions),
        "citation": p.spec.citation,
    }


def _task_records(prepared: Sequence[PreparedTask], config: RunConfig) -> dict[str, dict[str, Any]]:
    """``config.json``'s ``tasks``: one record per task; a task with prompt conditions records the
    reference condition's as its own, and each condition (template, its sha256, the shots in order)."""
    records: dict[str, dict[str, Any]] = {}
    for p in prepared:
        if p.spec.name not in records:
            records[p.spec.name] = _task_record(p, config)
        if p.condition is not None:
            records[p.spec.name].setdefault("conditions", []).append({
                **p.condition.to_json(), "shot_count": len(p.shots),
                "template": _shown_path(template_path(p.spec, template=p.template)),
                "template_sha256": template_sha256(p.spec, template=p.template),
                "shot_ids": [s.id for s in p.shots], "plan": p.plan_name,
            })
    return records


def write_config(run: RunDir, config: RunConfig, prepared: Sequence[PreparedTask],
                 backends: Sequence[Backend] = (), skipped: Mapping[str, str] | None = None,
                 budget: Any = None) -> None:
    previous = run.read_config() if run.exists() else {}
    ran = replace(
        config,
        tasks=tuple(dict.fromkeys(p.spec.name for p in prepared)),
        base_url=redact_url(config.base_url) if config.base_url else None,
        replicas=tuple(redact_url(u) for u in config.replicas),
    )
    run.write_json(run.config_path, {
        "config": ran.to_json(),
        "skipped_tasks": dict(skipped or {}),
        "budget": budget if budget is not None else previous.get("budget"),
        "evalpipe_version": __version__,
        "git_commit": git_commit(REPO_ROOT),
        "tasks": _task_records(prepared, config),
        # the generating model's backend, and each retrieval task's ranker (embedder, pool), as they describe
        # themselves (never an API key); a run answered wholly from the store keeps what was recorded
        "backend": next((dict(b.describe()) for b in backends if not isinstance(b, RankingBackend)),
                        previous.get("backend")),
        "rankers": [dict(b.describe()) for b in backends if isinstance(b, RankingBackend)] or previous.get("rankers"),
        "allow_external_endpoint": config.allow_external_endpoint,
        # the judges and rubrics of `evalpipe judge` (written by evalpipe.judging), kept across re-runs
        **({"judging": previous["judging"]} if previous.get("judging") else {}),
        "created": previous.get("created", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })


# ---- 3./4. fetch -----------------------------------------------------------------------------

#: a pending request: its prompt, rendered when it is sent
PromptSource = Callable[[], Prompt]


class _PromptAt:
    """The prompt of one example of a prepared task, rendered when called (a small object: one per
    pending request)."""

    __slots__ = ("task", "index")

    def __init__(self, task: PreparedTask, index: int) -> None:
        self.task, self.index = task, index

    def __call__(self) -> Prompt:
        return self.task.prompt(self.index)


async def fetch_answers(
    pending: Mapping[str, PromptSource],
    backend: Backend,
    store: ResponseStore,
    progress: ProgressSink,
    workers: int = 128,
    writer: AnswerWriter | None = None,
    results: dict[str, Completion] | None = None,
) -> dict[str, Completion]:
    """Send every pending prompt once; commit each good answer to the store on arrival.

    An answer is counted — in the results, and by ``progress`` — only once it is committed
    (``writer`` groups the commits of answers that arrive together: :mod:`evalpipe.answer_writer`).
    A fixed pool of worker coroutines (not one task per prompt) pulls prompts from a shared
    iterator: with tens of thousands of prompts, one task each makes every garbage collection walk
    them all (measured: ~20 % more client CPU per request). The backend still decides how many
    requests are really in flight; ``workers`` only has to be at least that. Answers go into
    ``results`` (a new dict unless given), which is returned.
    """
    results = {} if results is None else results
    items = iter(pending.items())
    writer = writer if writer is not None else AnswerWriter(store, backend.model)

    async def worker() -> None:
        for key, source in items:
            completion = await backend.complete(source())
            if completion.ok:
                await writer.put(key, completion)
            results[key] = completion
            progress.advance(completion)

    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, min(workers, len(pending))))]
    try:
        with store.checkpoints_deferred():  # none between requests: see ResponseStore.checkpoints_deferred
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    return results


# ---- the two entry points --------------------------------------------------------------------

def run_dir_for(config: RunConfig, results_root: Path) -> RunDir:
    return RunDir(results_root / (config.run_name or config.default_run_name()))


EmbedderFactory = Callable[[RunConfig], Embedder]


async def execute(
    config: RunConfig,
    backend_factory: Callable[[RunConfig], Backend],
    results_root: Path,
    progress: ProgressSink | None = None,
    on_prepared: Callable[[RunDir, int, int], None] | None = None,
    embedder_factory: EmbedderFactory | None = None,
) -> RunOutcome:
    """Run (or resume) an evaluation and write its results. Raises RunError/BackendError early.

    ``backend_factory`` makes the generating model's backend; ``embedder_factory`` the embedding
    model of retrieval tasks (default: from the run's ``--embeddings-*`` options). Each is asked
    for only when some of its prompts have no stored answer."""
    progress = progress or NullProgress()
    skipped: dict[str, str] = {}
    notes: list[str] = []
    prepared = prepare(config, skipped, notes)
    check_endpoint_policy(prepared, config)
    run = run_dir_for(config, results_root)
    previous_budget = run.read_config().get("budget") if run.exists() else None
    shared = OnceFactory(backend_factory)  # budgeting and fetching share one backend
    try:
        prepared, budget_info = await budget_all(prepared, config, previous_budget, shared)
        for p in prepared:
            p.spec.scoring(config.compat)  # an unknown --compat fails before any request
        with run.lock():
            return await _execute_locked(config, run, prepared, skipped, budget_info, shared, progress, on_prepared,
                                         embedder_factory or embedder_for, notes)
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
    embedder_factory: EmbedderFactory,
    prepare_notes: Sequence[str] = (),
) -> RunOutcome:
    store = ResponseStore(run.store_path)
    backends: list[tuple[Backend, dict[str, PromptSource]]] = []
    notes: list[str] = list(prepare_notes)
    heap = contextlib.ExitStack()
    try:
        # the prepared tasks live until the end: out of the garbage collector's sight (evalpipe.heap)
        settle = heap.enter_context(frozen_heap())
        for p in prepared:
            before = store.plan_size(p.plan_name)
            if before > len(p.examples):
                notes.append(f"{p.plan_name}: this run directory held {before} samples; its results now cover "
                             f"{len(p.examples)} (--limit/--ids). All answers stay stored: run without them "
                             "to restore the full results")
            store.write_plan(p.plan_name, [(ex.id, key) for ex, key in zip(p.examples, p.keys)], p.packed,
                             p.packer.texts, [{"truncated_tokens": t} for t in p.truncated_tokens()])
        all_keys = list(dict.fromkeys(k for p in prepared for k in p.keys))
        answers: dict[str, Completion] = store.get_many(all_keys)
        pending: dict[str, PromptSource] = {}
        for p in prepared:
            for i, key in enumerate(p.keys):
                if key not in answers and key not in pending:
                    pending[key] = _PromptAt(p, i)
        if on_prepared is not None:
            on_prepared(run, len(all_keys), len(pending))
        scored_by_choices = [p for p in prepared if p.examples and p.prompt(0).choices is not None]
        for backend, todo in _answerers(config, prepared, pending, store, backend_factory, embedder_factory):
            backends.append((backend, todo))
            await backend.preflight()
            if any(key in todo for p in scored_by_choices for key in p.keys):
                await check_choice_scoring(backend)
        write_config(run, config, prepared, [b for b, _ in backends], skipped, budget_info.get("budget"))
        sent = 0
        fetch_s = 0.0
        stats: dict[str, Any] = {}
        if pending:
            progress.start(total=len(all_keys), cached=len(all_keys) - len(pending))
            fetch_started = time.monotonic()
            try:
                for backend, todo in backends:
                    writer = AnswerWriter(store, backend.model)
                    await fetch_answers(todo, backend, store, progress, results=answers, writer=writer,
                                        workers=2 * max(config.concurrency, 1) * (1 + len(config.replicas)))
                    commits = stats.setdefault("store", {"answers": 0, "commits": 0, "longest_commit_ms": 0.0})
                    commits["answers"] += writer.stats.answers
                    commits["commits"] += writer.stats.commits
                    commits["longest_commit_ms"] = round(max(commits["longest_commit_ms"],
                                                             writer.stats.longest_commit_s * 1e3), 3)
                    if isinstance(backend, RankingBackend):
                        stats.setdefault("ranking", {}).update(backend.stats())
                    else:
                        stats.update(backend.stats())
            finally:
                progress.close()
            fetch_s = time.monotonic() - fetch_started
            sent = len(pending)
            settle()  # the answers live until the end too
        outcome = RunOutcome(run_dir=run, tasks=[], sent=sent, cached=len(all_keys) - sent,
                             skipped=skipped, budget=Budget.from_json(budget_info.get("budget")), notes=notes)
        options = MetricOptions.from_json(config.metric_options)
        # one scored outcome per task and prompt condition; a task's conditions become one task (robustness)
        outcome.tasks.extend(combine_tasks([ConditionOutcome(p.spec, p.condition, len(p.shots), score_task(
            p.spec, p.examples, p.keys, [answers.get(k) for k in p.keys],
            config.compat, options, p.truncated_tokens(), answer_prefix(p.spec, config),
        )) for p in prepared]))
        outcome.add_aggregates(config.suites, subset=config.limit is not None or config.ids is not None)
        write_outcome(run, outcome, config.compat, RunInfo(
            sent=outcome.sent, cached=outcome.cached, incomplete_suites=outcome.incomplete,
            skipped_tasks=outcome.skipped, backend=dict(stats), fetch_seconds=fetch_s, budget=outcome.budget,
            metric_options=options.to_json(), notes=list(notes)))
        return outcome
    finally:
        heap.close()
        for backend, _ in backends:
            await backend.aclose()
        store.close()


async def check_choice_scoring(backend: Backend) -> None:
    """Log-likelihood scoring needs an endpoint that returns prompt log-probabilities; say so before
    any request when this one cannot (the backend's own check: one short probe)."""
    check = getattr(backend, "check_choice_scoring", None)
    if check is None:
        raise RunError(f"--mcqa-scoring loglikelihood needs an OpenAI-compatible /v1/completions endpoint that "
                       f"returns prompt log-probabilities (echo with logprobs, as vLLM's server does); the "
                       f"{backend.describe().get('backend', type(backend).__name__)} backend cannot — "
                       "use --mcqa-scoring generate, or serve the model with `vllm serve`")
    await check()


def embedder_for(config: RunConfig) -> Embedder:
    """The embedding model of a run's retrieval tasks, from its ``--embeddings-*`` options."""
    if not config.embeddings_url and not config.embeddings_path:
        raise RunError("retrieval tasks need an embedding model: --embeddings-url URL --embeddings-model NAME "
                       "(an OpenAI-compatible /v1 endpoint) or --embeddings-path DIR (a local sentence-transformers "
                       "folder)")
    return make_embedder(url=config.embeddings_url, model=config.embeddings_model, path=config.embeddings_path,
                         api_key_env=config.api_key_env, batch_size=config.embeddings_batch_size,
                         timeout_s=config.timeout_s)


def _answerers(config: RunConfig, prepared: Sequence[PreparedTask], pending: Mapping[str, PromptSource],
               store: ResponseStore, backend_factory: Callable[[RunConfig], Backend],
               embedder_factory: EmbedderFactory) -> list[tuple[Backend, dict[str, PromptSource]]]:
    """Who answers which pending prompts: the generating model answers every generation task; each
    retrieval task gets a ranker over its own pool. Nothing is built for work that is all stored."""
    out: list[tuple[Backend, dict[str, PromptSource]]] = []
    generation = {k: pending[k] for p in prepared if p.pool == () for k in p.keys if k in pending}
    if generation:
        out.append((backend_factory(config), generation))
    for p in prepared:
        todo = {k: pending[k] for k in p.keys if k in pending} if p.pool else {}
        if todo:
            assert p.spec.ranking is not None
            ranker = RankingBackend(embedder_factory(config), p.pool, p.spec.ranking.depth, store,
                                    batch_size=config.embeddings_batch_size or 64)
            out.append((ranker, todo))
    return out
