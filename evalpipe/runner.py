"""Wire the stages together: load → render → (store | backend) → parse → score → results.

The runner knows no task by name; everything task-specific comes from the :class:`TaskSpec`.
Order of work is chosen so that mistakes cost nothing:

1. load and validate every task's data, select shots, render every prompt (bad data or a broken
   template fails here, before any request) into a stage on disk (:mod:`evalpipe.pipeline.stage`);
2. under the run directory's lock, the store copies the staged plan (sample → cache key, each
   distinct prompt once) and queues every key it has no answer for (that is resume);
3. the queued prompts are sent concurrently, read from the queue a page at a time; each answer is
   committed to the store the moment it arrives (in groups, :mod:`evalpipe.pipeline.answer_writer`: an
   answer is counted only once it is committed);
4. each task is parsed and scored — a samplewise scoring a page of the plan at a time, its
   examples read again from the data (:func:`evalpipe.scoring.score_task_chunked`) — and
   ``samples.jsonl``, ``metrics.json`` and ``summary.json`` are written.

Memory is flat in the number of samples: no stage holds a sample from one stage to the next. A
prepared task keeps its settings, its shots and the text its prompts share; its examples are a
stream read again where needed (a loader that cannot stream gives a tuple), its keys and packed
prompts are on disk (stage, then store), and a pending prompt is unpacked when it is sent
(``docs/architecture.md``, "Memory flat in N").

``evalpipe score`` is step 4 without a backend, reading the plan from the store
(:mod:`evalpipe.rescoring`); parsing and scoring one task is :mod:`evalpipe.scoring`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from evalpipe import __version__
from evalpipe.store import endpoint_identity
from evalpipe.backends.base import Backend, BackendError
from evalpipe.backends.factory import OnceFactory
from evalpipe.context_fit import (
    ContextTooSmall,
    EstimateCounter,
    Fitted,
    HFTokenizerCounter,
    TokenCounter,
    check_context,
    detect_counter,
    fit_prompt,
    model_context_length,
)
from evalpipe.pipeline.answer_writer import AnswerWriter
from evalpipe.heap import frozen_heap
from evalpipe.pipeline.stage import DuplicateSample, PlanStage, info_json
from evalpipe.store.prompt_pack import LEARN, Packer, unpack
from evalpipe.store.answers import ResponseStore
from evalpipe.store.keys import cache_key
from evalpipe.cost import Prices, attach_costs
from evalpipe.variants.conditions import Condition, TaskConditions, plan_name, shot_permutation, task_conditions
from evalpipe.config import RunConfig, load_options, local_model_fingerprint, task_args_for
from evalpipe.data.digest import file_sha256
from evalpipe.task_identity import definitions_tag
from evalpipe.data.errors import DataError
from evalpipe.endpoints import redact_url, route_problem
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
from evalpipe.results import Budget, RunDir, RunDirError, RunInfo, git_commit, os_problem
from evalpipe.rescoring import plan_chunks
from evalpipe.variants.robustness import ConditionOutcome, combine_tasks
from evalpipe.scoring import answer_prefix, score_task_chunked
from evalpipe.structured import structured_format, structured_spec
from evalpipe.tasks.base import LOGLIKELIHOOD, Examples, ExampleStream, LoadOptions, TaskData, TaskSpec
from evalpipe.tasks.registry import boards, get_task, suite_records

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
    #: the evaluated examples (a stream re-reads the data each time it is iterated: never all held)
    examples: Examples
    shots: tuple[Example, ...]
    #: renders one example's prompt (deterministic: the same example always gives the same prompt)
    make_prompt: Callable[[Example], Prompt]
    #: where the rendered plan waits for the run directory's lock (keys, packed prompts, infos)
    stage: PlanStage
    #: how many samples the plan has
    size: int
    packer: Packer
    max_tokens: int
    #: None for a retrieval task (its prompts are query texts, not rendered from a template)
    renderer: PromptRenderer | None
    model: str
    #: a retrieval task's candidate pool (empty for generation tasks)
    pool: tuple[str, ...] = ()
    #: the prompt condition rendered (variant, shot count, shot order); None = the run asks for none
    condition: Condition | None = None
    #: the variant's template under prompts/ (None = the task's canonical template)
    template: str | None = None
    #: the sha256 of each data file as the prompts were rendered from it (a stream reads the file again)
    data_digests: Mapping[str, str] = field(default_factory=dict)

    def keys(self) -> Iterator[str]:
        """Every sample's cache key, in evaluation order (read from the stage)."""
        return (key for _, key, _, _ in self.stage.rows(self.plan_name))

    def prompt(self, i: int) -> Prompt:
        """The prompt of the ``i``-th example (unpacked now: the module docstring says why)."""
        return Prompt.from_json(self.prompt_json(i))

    def prompt_json(self, i: int) -> dict[str, Any]:
        """The JSON form of the ``i``-th example's prompt."""
        return unpack(json.loads(self.stage.row(self.plan_name, i)[2]), self.packer.texts)

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
        return self._task.size

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._task.prompt(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._task.prompt(index)

    def __iter__(self) -> Iterator[Prompt]:
        texts = self._task.packer.texts
        return (Prompt.from_json(unpack(json.loads(packed), texts))
                for _, _, packed, _ in self._task.stage.rows(self._task.plan_name))


# ---- 1. prepare ------------------------------------------------------------------------------

def _subset(examples: Examples, config: RunConfig, task: str) -> Examples:
    """The examples ``--ids`` and ``--limit`` select; a stream stays a stream under ``--limit``."""
    if config.ids is not None:
        wanted = list(dict.fromkeys(config.ids))
        asked = set(wanted)
        by_id: dict[str, Example] = {}
        first: Example | None = None
        for ex in examples:  # one pass, keeping only the asked ones
            first = first or ex
            if ex.id in asked:
                by_id.setdefault(ex.id, ex)
        missing = [i for i in wanted if i not in by_id]
        if missing:
            shown = ", ".join(missing[:5]) + (" …" if len(missing) > 5 else "")
            seen = f" (ids look like {first.id!r})" if first is not None else ""
            raise RunError(f"task {task}: unknown sample id(s): {shown}{seen}")
        examples = tuple(by_id[i] for i in wanted)
    if config.limit is not None:
        examples = examples[: config.limit] if isinstance(examples, tuple) else _first(examples, config.limit)
    return examples


def _first(examples: Examples, n: int) -> ExampleStream:
    """The first ``n`` examples of a stream (``--limit``), a stream too: read again on each pass."""
    return ExampleStream(lambda: itertools.islice(iter(examples), n))


def _load_task(spec: TaskSpec, config: RunConfig, context_length: int | None = None,
               token_counter: Callable[[str], int] | None = None,
               ) -> tuple[TaskData, Examples, LoadOptions]:
    try:
        args = task_args_for(config, spec)
    except ValueError as exc:
        raise RunError(str(exc)) from None
    options = load_options(config, spec.name, args=args)
    if context_length is not None:
        options = replace(options, context_length=context_length, token_counter=token_counter)
    data = spec.load(options)
    return data, _subset(data.examples, config, spec.name), options


class _PoolOverlap:
    """Which evaluated examples are also in the shot pool (same id, or same inputs: a shot that is
    also a test item leaks its answer), learnt as the examples stream by. Only the pool's ids and
    input fingerprints are held (fingerprints serialise every input — LongHealth: tens of MB — so
    only when shots are drawn)."""

    def __init__(self, pool: Sequence[Example], fingerprints: bool) -> None:
        self.pool_ids = {ex.id for ex in pool}
        self.pool_prints = {inputs_fingerprint(ex) for ex in pool} if fingerprints and pool else set()
        self.ids: set[str] = set()
        self.prints: set[str] = set()

    def see(self, example: Example) -> None:
        if example.id in self.pool_ids:
            self.ids.add(example.id)
        if self.pool_prints:
            fingerprint = inputs_fingerprint(example)
            if fingerprint in self.pool_prints:
                self.prints.add(fingerprint)


def _choose_shots(spec: TaskSpec, config: RunConfig, data: TaskData, k: int,
                  overlap: _PoolOverlap | None) -> tuple[Example, ...]:
    seed = config.fewshot_seed if config.fewshot_seed is not None else spec.fewshot_seed
    try:
        return select_shots(data.shot_pool, k, seed, overlap.ids if overlap else set(),
                            overlap.prints if overlap else set())
    except ValueError as exc:
        raise RunError(f"task {spec.name}: {exc}") from None


def _select_shots(spec: TaskSpec, config: RunConfig, data: TaskData, k: int) -> tuple[Example, ...]:
    """``k`` shots from the task's pool, none of them an evaluated example (a pass over the data)."""
    overlap = _PoolOverlap(data.shot_pool, fingerprints=k > 0)
    if overlap.pool_ids and k > 0:
        for example in data.examples:
            overlap.see(example)
    return _choose_shots(spec, config, data, k, overlap)


def _shots_and_render(spec: TaskSpec, config: RunConfig, data: TaskData, examples: Examples, k: int,
                      render: Callable[[tuple[Example, ...], Callable[[Example], None] | None], PreparedTask],
                      ) -> tuple[tuple[Example, ...], PreparedTask]:
    """Select the shots and render the first prompts with them, in as few passes over the data as
    the selection allows.

    Where every evaluated example is rendered (no ``--limit``/``--ids``), the pass that renders
    also learns which examples the pool shares: the shots drawn as if it shared none are right
    unless it does, and then (rarely: one file given as both test and shot file) they are drawn
    again and the prompts rendered again. Otherwise the data is read once for the overlap first.
    """
    if k == 0 or not data.shot_pool:
        shots = _choose_shots(spec, config, data, k, None)
        return shots, render(shots, None)
    if config.limit is not None or config.ids is not None:
        shots = _select_shots(spec, config, data, k)
        return shots, render(shots, None)
    overlap = _PoolOverlap(data.shot_pool, fingerprints=True)
    guess = _choose_shots(spec, config, data, k, None)
    prepared = render(guess, overlap.see)
    if not (overlap.ids or overlap.prints):
        return guess, prepared
    shots = _choose_shots(spec, config, data, k, overlap)
    return shots, (prepared if shots == guess else render(shots, None))


def prepare_task(
    spec: TaskSpec,
    config: RunConfig,
    context_length: int | None = None,
    token_counter: Callable[[str], int] | None = None,
    condition: Condition | None = None,
    stage: PlanStage | None = None,
) -> PreparedTask:
    """Load, subset and render one task (under ``condition``, if the run asks for conditions) into
    ``stage`` (a new one in the temporary folder if None). ``context_length``/``token_counter``
    override what the loader is told (for tasks ``sized_by_context``, once the budget is known)."""
    stage = stage if stage is not None else PlanStage()
    data, examples, options = _load_task(spec, config, context_length, token_counter)
    if spec.ranking is not None:
        return _prepare_ranking(spec, config, data, tuple(examples), options, stage)
    digests = _digests(data)  # before the data is read (a stream reads it again to score)
    _, prepared = _shots_and_render(
        spec, config, data, examples, _shots_drawn(spec, config, condition),
        lambda shots, watch: _render_task(spec, config, data, examples, shots, stage, condition, watch, digests))
    return prepared


def _render_task(spec: TaskSpec, config: RunConfig, data: TaskData, examples: Examples,
                 shots: tuple[Example, ...], stage: PlanStage, condition: Condition | None = None,
                 watch: Callable[[Example], None] | None = None,
                 digests: Mapping[str, str] | None = None) -> PreparedTask:
    """Render every example's prompt under ``condition`` with ``shots`` into ``stage``; ``watch``
    sees each example as it is rendered. ``digests``: the data files' sha256 if already taken (a
    task's conditions share one load)."""
    template = None
    if condition is not None:  # ---- prompt conditions (evalpipe.variants.conditions) ----
        k = _run_shots(spec, config) if condition.shots is None else condition.shots
        seed = config.fewshot_seed if config.fewshot_seed is not None else spec.fewshot_seed
        shots = tuple(shots[i] for i in shot_permutation(k, condition.order, seed))
        if condition.variant != DEFAULT_VARIANT:
            template = variant_templates(spec)[condition.variant]
    override = config.generation.get(spec.name, {})  # per-task settings (the demo's caps)
    by_choices = config.choice_scoring == LOGLIKELIHOOD and spec.choice_scoring is not None
    # a chat answer gets the task's reasoning budget (a <think> block comes first); --max-tokens wins.
    # Not where the input is fitted to the context: a budget reserved for reasoning must not cut the document
    chat = (config.endpoint != "completions" and not by_choices and spec.long_field is None
            and not spec.sized_by_context)
    task_tokens = (spec.chat_max_tokens or spec.max_tokens) if chat else spec.max_tokens
    max_tokens = override.get("max_tokens") or config.max_tokens or task_tokens
    params = GenerationParams(
        max_tokens=max_tokens, temperature=config.temperature, top_p=config.top_p, seed=config.seed,
        stop=tuple(override.get("stop") or ()), reasoning_effort=config.reasoning_effort,
        response_format=structured_format(spec) if config.structured else None,
    )
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
    name = plan_name(spec.name, condition)
    size, packer = _stage_all(stage, name, config.model, examples, make_prompt, watch)
    return PreparedTask(spec, data, examples, shots, make_prompt, stage, size, packer, max_tokens, renderer,
                        config.model, condition=condition, template=template,
                        data_digests=digests if digests is not None else _digests(data))


def _digests(data: TaskData) -> dict[str, str]:
    """Each data file's sha256, taken before the examples are read (recorded in config.json, and
    checked again before a streamed task is scored)."""
    return {str(f): file_sha256(Path(f)) for f in data.files}


def check_unchanged(prepared: Sequence[PreparedTask]) -> None:
    """A streamed task's data is read again for scoring: it must be the data its prompts were
    rendered from, or answers would be scored against other gold (each file hashed once, however
    many of the run's tasks and conditions read it)."""
    recorded = {path: digest for p in prepared if isinstance(p.examples, ExampleStream)
                for path, digest in p.data_digests.items()}
    for path, digest in recorded.items():
        if not Path(path).is_file() or file_sha256(Path(path)) != digest:
            raise RunError(f"{path}: changed while the run was going (its prompts were rendered from the earlier "
                           "contents). Every answer is stored: put the file back and run `evalpipe score` on the "
                           "run directory, or run again to ask about the new contents")


def _stage_all(stage: PlanStage, plan: str, model: str, examples: Examples,
               make_prompt: Callable[[Example], Prompt],
               watch: Callable[[Example], None] | None = None) -> tuple[int, Packer]:
    """Render every example's prompt once (the first :data:`~evalpipe.store.prompt_pack.LEARN` twice: the
    text they share is learnt from them) and stage its cache key and packed form as plan ``plan``;
    the number of samples and the packer (its shared texts)."""
    packer = Packer()
    packer.learn(to_jsonable(make_prompt(ex)) for ex in itertools.islice(iter(examples), LEARN))
    unbudgeted = info_json(0)

    def rows() -> Iterator[tuple[str, str, str, str]]:
        for example in examples:
            if watch is not None:
                watch(example)
            prompt = make_prompt(example)
            yield example.id, cache_key(model, prompt), _dumps(packer.pack(to_jsonable(prompt))), unbudgeted

    try:
        return stage.write(plan, rows()), packer
    except DuplicateSample as exc:
        raise RunError(f"task {plan}: {exc}; sample ids must be unique") from None


def _dumps(packed: Any) -> str:
    return json.dumps(packed, ensure_ascii=False)


def _with_choices(render: Callable[[Example], Prompt], params: GenerationParams,
                  continuations: Callable[[Example], tuple[str, ...]], example: Example) -> Prompt:
    """A log-likelihood request: the completion prompt, scored over the options' continuations."""
    return replace(render(example), params=params, choices=continuations(example))


def _ranking_query(params: GenerationParams, query: Callable[[Example], str], example: Example) -> Prompt:
    return Prompt(params=params, text=query(example))


# ---- prompt conditions (evalpipe.variants.conditions): variants × shot counts × shot orders ----------

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


def prepare_conditions(spec: TaskSpec, config: RunConfig, notes: list[str] | None = None,
                       stage: PlanStage | None = None) -> list[PreparedTask]:
    """One prepared task per condition the run asks for (loaded once, rendered per condition); a
    task evaluated under its canonical condition only is prepared exactly as without conditions."""
    asked = conditions_of(spec, config)
    if notes is not None:
        notes.extend(asked.notes)
    stage = stage if stage is not None else PlanStage()
    if not asked.varied:
        prepared = prepare_task(spec, config, stage=stage)
        if notes is not None and prepared.data.note:
            notes.append(prepared.data.note)
        return [prepared]
    data, examples, _ = _load_task(spec, config)
    if notes is not None and data.note:
        notes.append(data.note)
    digests = _digests(data)  # once for every condition: each reads the same files
    first, *others = asked.conditions
    shots, prepared = _shots_and_render(
        spec, config, data, examples, _shots_drawn(spec, config, first),
        lambda drawn, watch: _render_task(spec, config, data, examples, drawn, stage, first, watch, digests))
    return [prepared, *(_render_task(spec, config, data, examples, shots, stage, c, digests=digests)
                        for c in others)]


def ranking_identity(config: RunConfig, pool: Sequence[str], depth: int) -> str:
    """What a retrieval answer depends on, as the "model" of its cache key: the embedding model (a
    local folder by its fingerprint), the candidate pool and the ranking depth."""
    if config.embeddings_path:
        embedder = f"path:{Path(config.embeddings_path).name}@{local_model_fingerprint(config.embeddings_path)}"
    else:
        embedder = f"model:{config.embeddings_model}"
    return f"embeddings[{embedder}]|pool:{pool_digest(pool)}|depth:{depth}"


def _prepare_ranking(spec: TaskSpec, config: RunConfig, data: TaskData, examples: tuple[Example, ...],
                     options: LoadOptions, stage: PlanStage) -> PreparedTask:
    """A retrieval task: its pool, and one query "prompt" per example (answered by a ranker)."""
    assert spec.ranking is not None
    try:
        planned = spec.ranking.plan(data, examples, options)
    except ValueError as exc:
        raise RunError(f"task {spec.name}: {exc}") from None
    make_prompt = functools.partial(_ranking_query, GenerationParams(max_tokens=spec.ranking.depth),
                                    spec.ranking.query)
    identity = ranking_identity(config, planned.pool, spec.ranking.depth)
    size, packer = _stage_all(stage, plan_name(spec.name, None), identity, planned.examples, make_prompt)
    return PreparedTask(spec, data, planned.examples, (), make_prompt, stage, size, packer, spec.ranking.depth,
                        None, identity, pool=planned.pool, data_digests=_digests(data))


def _check_fitted(p: PreparedTask, fitted: Sequence[Fitted], context_length: int, source: str) -> None:
    """A prompt longer than the whole context with its long field emptied cannot be answered at all:
    stop (evalpipe.context_fit). One that fits but leaves less than max_tokens is sent, as before: the
    counts may be estimates, and the server's own verdict is recorded on the sample."""
    assert p.spec.long_field is not None
    for f in fitted:
        if f.tokens > context_length and not str(f.example.inputs.get(p.spec.long_field, "")):
            raise ContextTooSmall(
                f"the model's context of {context_length} tokens ({source}) cannot hold a prompt of task {p.spec.name} "
                f"(sample {f.example.id}) even with its {p.spec.long_field} emptied ({f.tokens} tokens, before "
                "max_tokens); pass --context-length N if the context is wrong")


async def apply_budget(p: PreparedTask, context_length: int, counter: TokenCounter,
                       source: str = "--context-length") -> PreparedTask:
    """Shorten the task's long field where a prompt would not fit the context (see evalpipe.context_fit).

    The task's examples are held here (tasks with a long field are documents: few, and each
    fitted example replaces its original); the staged rows of the prompts that changed are
    rewritten."""
    if p.spec.long_field is None:
        return p
    examples = tuple(p.examples)
    prompts = list(p.prompts)
    fitted = await asyncio.gather(*(fit_prompt(ex, p.make_prompt, p.spec.long_field, context_length, counter,
                                               prompt=prompt) for ex, prompt in zip(examples, prompts)))
    _check_fitted(p, fitted, context_length, source)
    # an untouched prompt keeps the key and packed form prepare_task staged
    p.stage.update(p.plan_name, (
        (i, cache_key(p.model, f.prompt), _dumps(p.packer.pack(to_jsonable(f.prompt))), info_json(f.truncated_tokens))
        for i, (f, prompt) in enumerate(zip(fitted, prompts))
        if not (f.truncated_tokens == 0 and f.prompt is prompt)))
    return replace(p, examples=tuple(f.example for f in fitted))


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
    source = ("--context-length" if config.context_length else "recorded by this run" if previous.get("context_length")
              else "the model's config.json" if in_process else "reported by the server's GET /models")
    check_context(context_length, source)
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
        return await asyncio.to_thread(prepare_task, p.spec, config, context_length, count, p.condition, p.stage)

    budgeted = [await apply_budget(await sized(p), context_length, counter, source) for p in prepared]
    info: dict[str, Any] = {"context_length": context_length, "token_counter": counter.kind}
    if getattr(counter, "chat_template", False) is True:
        info["chat_counting"] = "template"
    fallbacks = getattr(counter, "fallbacks", 0)
    if fallbacks:
        info["estimated_counts"] = fallbacks
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
            notes: list[str] | None = None, stage: PlanStage | None = None) -> list[PreparedTask]:
    """Load, validate and render every task (once per prompt condition the run asks for; what the
    user should know about those goes into ``notes``).

    In a suite run (``config.suites``) a task whose data files are absent is skipped and the
    reason put in ``skipped`` — users rarely hold every credentialed data set. A file that exists
    but is malformed is always an error, and so is a missing file for a task asked for alone.

    The rendered plans go to ``stage`` (:mod:`evalpipe.pipeline.stage`; a new one in the temporary
    folder if None), never into Python: only the tasks' settings are returned.
    """
    if not config.tasks:
        raise RunError("no task given (use --task NAME or --suite NAME; `evalpipe tasks` lists them)")
    check_data_options(config)
    skipped = {} if skipped is None else skipped
    stage = stage if stage is not None else PlanStage()
    prepared = []
    for name in config.tasks:
        try:
            spec = structured_spec(get_task(name).in_form(config.prompt_form).scored_by(config.choice_scoring),
                                   config.structured)
        except ValueError as exc:
            raise RunError(str(exc)) from None
        if config.suites:
            problem = _missing_data(spec, config)
            if problem is None:
                try:
                    prepared.extend(prepare_conditions(spec, config, notes, stage))
                    continue
                except DataError as exc:
                    if exc.line is not None or Path(exc.path).exists():
                        raise
                    problem = str(exc)
            skipped[name] = problem
            continue
        prepared.extend(prepare_conditions(spec, config, notes, stage))
    if not prepared:
        lines = "\n".join(f"  {name}: {why}" for name, why in skipped.items())
        raise RunError(f"no task of the suite has its data:\n{lines}")
    return prepared


def check_endpoint_policy(prepared: Sequence[PreparedTask], config: RunConfig) -> None:
    """Refuse to send credentialed data to a non-local endpoint unless explicitly allowed."""
    check_specs_endpoint_policy([p.spec for p in prepared], config)


def check_specs_endpoint_policy(specs: Sequence[TaskSpec], config: RunConfig) -> None:
    """:func:`check_endpoint_policy` for tasks by their specs (what a probe of a task's data sends,
    :mod:`evalpipe.contamination`, is guarded by the very same rule)."""
    credentialed = [spec.name for spec in specs if spec.credentialed]
    if not credentialed or config.allow_external_endpoint:
        return
    urls = (config.base_url, *config.replicas, config.embeddings_url)  # every replica, and the embedder
    for url in [u for u in urls if u]:
        problem = route_problem(url)  # the endpoint and the proxy in front of it (redirects are never followed)
        if problem is not None:
            raise RunError(
                f"task(s) {', '.join(credentialed)} use credentialed data (PhysioNet DUA) and "
                f"{problem}; pass --allow-external-endpoint "
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
        "data_files": dict(p.data_digests) or {str(f): file_sha256(Path(f)) for f in p.data.files},
        "split": p.data.split,
        # what the loader decided about the file as a whole (an index base, and how): never silent
        **({"data_facts": dict(p.data.facts)} if p.data.facts else {}),
        "n": p.size,
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
        # (the kind decides e.g. the NER error analysis: docs/architecture.md, "The run directory is the contract")
        "kind": p.spec.kind,
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
                 budget: Any = None, endpoints: Sequence[Mapping[str, Any]] | None = None) -> None:
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
        # the suites and reference boards of the run's tasks, as data: the report reads them from here
        "suites": {name: suite.to_json() for name, suite in suite_records(ran.tasks).items()},
        "boards": [board.to_json() for board in boards() if board.applies(ran.tasks)],
        # the generating model's backend, and each retrieval task's ranker (embedder, pool), as they describe
        # themselves (never an API key); a run answered wholly from the store keeps what was recorded
        "backend": next((dict(b.describe()) for b in backends if not isinstance(b, RankingBackend)),
                        previous.get("backend")),
        "rankers": [dict(b.describe()) for b in backends if isinstance(b, RankingBackend)] or previous.get("rankers"),
        "allow_external_endpoint": config.allow_external_endpoint,
        # what gave the stored answers, as the store records it (evalpipe.store.endpoint_identity)
        "endpoints": list(endpoints) if endpoints else previous.get("endpoints"),
        # the judges and rubrics of `evalpipe judge` (written by evalpipe.judging), kept across re-runs
        **({"judging": previous["judging"]} if previous.get("judging") else {}),
        "created": previous.get("created", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
        "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    })


# ---- 3./4. fetch -----------------------------------------------------------------------------

#: a pending request: its prompt, rendered when it is sent
PromptSource = Callable[[], Prompt]


class _Packed:
    """A pending prompt as the store keeps it (packed JSON), unpacked when called (a small object:
    only the requests in flight and one page of the queue exist at a time)."""

    __slots__ = ("packed", "texts")

    def __init__(self, packed: str, texts: Mapping[str, str]) -> None:
        self.packed, self.texts = packed, texts

    def __call__(self) -> Prompt:
        return Prompt.from_json(unpack(json.loads(self.packed), self.texts))


def _queued(store: ResponseStore, queue: str, texts: Mapping[str, str]) -> Iterator[tuple[str, PromptSource]]:
    """The prompts of a pending queue (:meth:`ResponseStore.queue_pending`), read page by page."""
    for page in store.pending_pages(queue):
        for key, packed in page:
            yield key, _Packed(packed, texts)


async def fetch_answers(
    pending: Mapping[str, PromptSource] | Iterable[tuple[str, PromptSource]],
    backend: Backend,
    store: ResponseStore,
    progress: ProgressSink,
    workers: int = 128,
    writer: AnswerWriter | None = None,
    results: dict[str, Completion] | None = None,
    count: int | None = None,
    failures: dict[str, Completion] | None = None,
) -> dict[str, Completion]:
    """Send every pending prompt once; commit each good answer to the store on arrival.

    ``pending`` is a mapping key → prompt source, or ``(key, source)`` pairs read as they are
    needed (the runner's queue in the store: ``count`` says how many). An answer is counted — in
    the results, and by ``progress`` — only once it is committed (``writer`` groups the commits of
    answers that arrive together: :mod:`evalpipe.pipeline.answer_writer`). A fixed pool of worker coroutines
    (not one task per prompt) pulls prompts from a shared iterator: with tens of thousands of
    prompts, one task each makes every garbage collection walk them all (measured: ~20 % more
    client CPU per request). The backend still decides how many requests are really in flight;
    ``workers`` only has to be at least that.

    Every completion goes into ``results`` (a new dict unless given), which is returned; with
    ``failures`` given instead, only the failed ones are kept there (the good ones are in the store:
    a run of 47,000 samples does not hold 47,000 answers).
    """
    if isinstance(pending, Mapping):
        count = len(pending) if count is None else count
        items: Iterator[tuple[str, PromptSource]] = iter(pending.items())
    else:
        items = iter(pending)
    keep = results if results is not None else ({} if failures is None else None)
    writer = writer if writer is not None else AnswerWriter(store, backend.model)

    async def worker() -> None:
        for key, source in items:
            completion = await backend.complete(source())
            if completion.ok:
                await writer.put(key, completion)
            elif failures is not None:
                failures[key] = completion
            if keep is not None:
                keep[key] = completion
            progress.advance(completion)

    n = workers if count is None else min(workers, count)
    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, n))]
    try:
        with store.checkpoints_deferred():  # none between requests: see ResponseStore.checkpoints_deferred
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        writer.flush()  # a run stopped early (engine died, endpoint gone) keeps every answer that arrived
    return keep if keep is not None else {}


# ---- the two entry points --------------------------------------------------------------------

def run_dir_for(config: RunConfig, results_root: Path, specs: Sequence[TaskSpec] = ()) -> RunDir:
    """The run's directory: ``--run-name``, else the default name and, for user task files, the
    digest of their definitions (:mod:`evalpipe.task_identity`)."""
    if config.run_name:
        return RunDir(results_root / config.run_name)
    tag = definitions_tag(specs)
    return RunDir(results_root / (config.default_run_name() + (f"__{tag}" if tag else "")))


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
    try:
        stage = PlanStage(results_root)  # beside the run directories: see evalpipe.pipeline.stage
    except OSError as exc:
        raise RunDirError(f"cannot create the run directory {run_dir_for(config, results_root).path}: "
                          f"{os_problem(exc).split(': ', 1)[-1]}") from None
    try:
        prepared = prepare(config, skipped, notes, stage)
        check_endpoint_policy(prepared, config)
        run = run_dir_for(config, results_root, [p.spec for p in prepared])
        previous_budget = run.read_config().get("budget") if run.exists() else None
        shared = OnceFactory(backend_factory)  # budgeting and fetching share one backend
        try:
            prepared, budget_info = await budget_all(prepared, config, previous_budget, shared)
            for p in prepared:
                p.spec.scoring(config.compat)  # an unknown --compat fails before any request
            with run.lock():
                return await _execute_locked(config, run, prepared, skipped, budget_info, shared, progress,
                                             on_prepared, embedder_factory or embedder_for, notes)
        finally:
            await shared.aclose()
    finally:
        stage.close()


@dataclass(frozen=True)
class _Answerer:
    """Who answers a queue of pending prompts: the generating model (every generation task) or
    one retrieval task's ranker; ``plans`` are the plans whose prompts it answers."""

    prepared: tuple[PreparedTask, ...]
    queue: str
    pending: int

    @property
    def plans(self) -> list[str]:
        return [p.plan_name for p in self.prepared]

    def texts(self) -> dict[str, str]:
        return {k: v for p in self.prepared for k, v in p.packer.texts.items()}


def _queues(store: ResponseStore, prepared: Sequence[PreparedTask]) -> list[_Answerer]:
    """The pending queues: one for the generating model, one per retrieval task (its own pool)."""
    groups = [tuple(p for p in prepared if not p.pool)] + [(p,) for p in prepared if p.pool]
    out: list[_Answerer] = []
    for i, group in enumerate(g for g in groups if g):
        queue = f"pending_{i}"
        count = store.queue_pending(queue, [p.plan_name for p in group], exclude=[a.queue for a in out])
        out.append(_Answerer(group, queue, count))
    return out


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
    invoked = time.time()  # answers stored from now on are this invocation's (evalpipe.cost)
    backends: list[tuple[Backend, _Answerer]] = []
    notes: list[str] = list(prepare_notes)
    heap = contextlib.ExitStack()
    try:
        # who answers: the store's answers must be this endpoint's (evalpipe.store.endpoint_identity)
        identity = endpoint_identity.identity_of(config)
        if identity is not None:
            endpoint_identity.check(store, identity, config.reuse_answers_from_other_endpoint, notes)
        # the prepared tasks live until the end: out of the garbage collector's sight (evalpipe.heap)
        settle = heap.enter_context(frozen_heap())
        for p in prepared:
            before = store.plan_size(p.plan_name)
            if before > p.size:
                notes.append(f"{p.plan_name}: this run directory held {before} samples; its results now cover "
                             f"{p.size} (--limit/--ids). All answers stay stored: run without them "
                             "to restore the full results")
            store.write_staged_plan(p.plan_name, p.stage.path, p.plan_name, p.packer.texts)
        total = store.distinct_keys([p.plan_name for p in prepared])
        queues = _queues(store, prepared)
        pending = sum(q.pending for q in queues)
        if on_prepared is not None:
            on_prepared(run, total, pending)
        if config.batch.get("export"):  # `run --batch-export FILE`: the requests written, nothing sent
            return _export_only(config, run, prepared, skipped, budget_info, notes)
        for queue in queues:
            if not queue.pending:
                continue
            backend = _answerer_backend(config, queue, store, backend_factory, embedder_factory)
            backends.append((backend, queue))
            await backend.preflight()
            if identity is not None and not queue.prepared[0].pool:  # the generating model's server
                identity = await _identified(backend, identity, store, config, notes)
            if any(p.size and p.prompt(0).choices is not None and store.unanswered(p.plan_name)
                   for p in queue.prepared):
                await check_choice_scoring(backend)
        write_config(run, config, prepared, [b for b, _ in backends], skipped, budget_info.get("budget"),
                     endpoints=[i.to_json() for i in endpoint_identity.read(store)])
        fetch_s = 0.0
        stats: dict[str, Any] = {}
        failures: dict[str, Completion] = {}
        if pending:
            progress.start(total=total, cached=total - pending)
            fetch_started = time.monotonic()
            try:
                for backend, queue in backends:
                    writer = AnswerWriter(store, backend.model)
                    items: Iterable[tuple[str, PromptSource]] = _queued(store, queue.queue, queue.texts())
                    count = queue.pending
                    if config.batch and not isinstance(backend, RankingBackend):
                        items, count = await _answer_by_batch(config, items, backend, store, failures, stats, notes,
                                                              progress)
                    await fetch_answers(items, backend, store, progress,
                                        writer=writer, count=count, failures=failures,
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
                        if identity is not None:
                            endpoint_identity.add_fingerprints(store, identity,
                                                               endpoint_identity.fingerprints_in(stats), notes)
            finally:
                progress.close()
            fetch_s = time.monotonic() - fetch_started
            settle()  # what fetching made lives until the end too
        outcome = RunOutcome(run_dir=run, tasks=[], sent=pending, cached=total - pending,
                             skipped=skipped, budget=Budget.from_json(budget_info.get("budget")), notes=notes)
        options = MetricOptions.from_json(config.metric_options)
        check_unchanged(prepared)
        # one scored outcome per task and prompt condition; a task's conditions become one task (robustness)
        outcome.tasks.extend(combine_tasks([ConditionOutcome(p.spec, p.condition, len(p.shots), score_task_chunked(
            p.spec, functools.partial(plan_chunks, run.store_path, p.plan_name, p.examples, failures),
            config.compat, options, answer_prefix(p.spec, config), scratch=p.stage.folder,
        )) for p in prepared]))
        plans: dict[str, list[str]] = {}
        for p in prepared:
            plans.setdefault(p.spec.name, []).append(p.plan_name)
        cost = attach_costs(outcome.tasks, run.store_path, plans, Prices.from_json(config.prices), invoked)
        outcome.add_aggregates(config.suites, subset=config.limit is not None or config.ids is not None)
        write_outcome(run, outcome, config.compat, RunInfo(
            sent=outcome.sent, cached=outcome.cached, incomplete_suites=outcome.incomplete,
            skipped_tasks=outcome.skipped, backend=dict(stats), fetch_seconds=fetch_s, budget=outcome.budget,
            metric_options=options.to_json(), notes=list(notes), cost=cost))
        return outcome
    finally:
        heap.close()
        for backend, _ in backends:
            await backend.aclose()
        store.close()


async def _identified(backend: Backend, identity: endpoint_identity.EndpointIdentity, store: ResponseStore,
                      config: RunConfig, notes: list[str]) -> endpoint_identity.EndpointIdentity:
    """``identity`` with the server's ``/v1/models`` entry for the model, checked against the store's
    (the URL alone was checked before the plan was written)."""
    try:
        entry = endpoint_identity.entry_of(await backend.models(), config.model)
    except (AttributeError, BackendError):  # a backend that lists no models: the URL is the identity
        return identity
    if entry is None:
        return identity
    identity = replace(identity, entry=entry)
    endpoint_identity.check(store, identity, config.reuse_answers_from_other_endpoint, notes)
    return identity
async def _answer_by_batch(config: RunConfig, items: Iterable[tuple[str, PromptSource]], backend: Backend,
                           store: ResponseStore, failures: dict[str, Completion], stats: dict[str, Any],
                           notes: list[str], progress: ProgressSink) -> tuple[list[tuple[str, PromptSource]], int]:
    """``--batch``: the queue answered through the Batch API (:mod:`evalpipe.backends.batch`); what is
    left for direct requests (failed lines with ``--batch-retry direct``) is returned with its count."""
    from evalpipe.backends.batch import BatchOptions, answer_by_batch

    if not config.base_url:
        raise RunError("--batch needs --base-url: the Batch API's root (e.g. https://api.openai.com/v1)")
    options = BatchOptions(base_url=config.base_url, api_key_env=config.api_key_env, timeout_s=config.timeout_s,
                           max_retries=config.max_retries, **config.batch)
    result = await answer_by_batch(items, backend.model, store, options, _say, progress.advance)
    failures.update(result.failures)
    stats["batch"] = result.stats()
    notes.extend(result.notes)
    return result.direct, len(result.direct)


def _export_only(config: RunConfig, run: RunDir, prepared: Sequence[PreparedTask], skipped: dict[str, str],
                 budget_info: dict[str, Any], notes: list[str]) -> RunOutcome:
    """Write the pending requests as Batch API lines (:mod:`evalpipe.backends.batch_files`) and stop:
    no backend is built, no request sent; the run directory holds the plan for ``batch-import``."""
    from evalpipe.backends.batch_files import export_pending

    out = Path(config.batch["export"])
    written = export_pending(run.store_path, config.model, out, config.batch.get("completion_tokens_field",
                                                                                  "max_tokens"))
    write_config(run, config, prepared, [], skipped, budget_info.get("budget"))
    notes.append(f"wrote {written} request line(s) to {out}; answer them offline (e.g. vllm run-batch -i {out} "
                 f"-o answers.jsonl), then: evalpipe batch-import {run.path} answers.jsonl")
    return RunOutcome(run_dir=run, tasks=[], sent=0, cached=0, skipped=skipped, notes=notes)


def _say(line: str) -> None:
    """A batch run's progress line, on stderr (the batch waits; no progress bar runs meanwhile)."""
    print(f"[evalpipe] {line}", file=sys.stderr, flush=True)


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


def _answerer_backend(config: RunConfig, queue: _Answerer, store: ResponseStore,
                      backend_factory: Callable[[RunConfig], Backend], embedder_factory: EmbedderFactory) -> Backend:
    """The backend that answers ``queue``: the generating model, or a ranker over the task's own
    pool. Built only for a queue with pending prompts (nothing is built for work all stored)."""
    task = queue.prepared[0]
    if not task.pool:
        return backend_factory(config)
    assert task.spec.ranking is not None
    return RankingBackend(embedder_factory(config), task.pool, task.spec.ranking.depth, store,
                          batch_size=config.embeddings_batch_size or 64)
