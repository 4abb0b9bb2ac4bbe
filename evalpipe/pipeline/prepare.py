"""Load, subset and render every task of a run (once per prompt condition): the first stage of a run.

Order of work is chosen so that mistakes cost nothing: every task's data is loaded and validated,
shots selected and every prompt rendered into the stage (:mod:`evalpipe.pipeline.render`) before any
request. Only the tasks' settings come back (:class:`~evalpipe.pipeline.prepared.PreparedTask`); the
plans are on disk. A retrieval task is prepared here too: its pool, and one query per example.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from evalpipe.backends.ranking import pool_digest
from evalpipe.config import RunConfig, load_options, local_model_fingerprint, task_args_for
from evalpipe.data.errors import DataError
from evalpipe.outcome import RunError
from evalpipe.pipeline.prepared import PreparedTask
from evalpipe.pipeline.render import data_digests, render_task, run_shots, stage_all
from evalpipe.pipeline.shots import shots_and_render
from evalpipe.pipeline.stage import PlanStage
from evalpipe.prompting import variant_templates
from evalpipe.records import Example, GenerationParams, Prompt
from evalpipe.structured import structured_spec
from evalpipe.tasks.base import Examples, ExampleStream, LoadOptions, TaskData, TaskSpec
from evalpipe.tasks.registry import get_task
from evalpipe.variants.conditions import Condition, TaskConditions, plan_name, task_conditions


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


def load_task(spec: TaskSpec, config: RunConfig, context_length: int | None = None,
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
    data, examples, options = load_task(spec, config, context_length, token_counter)
    if spec.ranking is not None:
        return _prepare_ranking(spec, config, data, tuple(examples), options, stage)
    digests = data_digests(data)  # before the data is read (a stream reads it again to score)
    _, prepared = shots_and_render(
        spec, config, data, examples, _shots_drawn(spec, config, condition),
        lambda shots, watch: render_task(spec, config, data, examples, shots, stage, condition, watch, digests))
    return prepared


def _shots_drawn(spec: TaskSpec, config: RunConfig, condition: Condition | None) -> int:
    """How many shots are selected: a sweep's counts all take a prefix of its largest count's shots."""
    if condition is not None and config.shots_sweep:
        return max(config.shots_sweep)
    return run_shots(spec, config)


def conditions_of(spec: TaskSpec, config: RunConfig) -> TaskConditions:
    """The task's conditions under the run's options (a retrieval task has only its canonical one)."""
    if spec.ranking is not None or not config.has_conditions:
        return TaskConditions((Condition(),))
    try:
        return task_conditions(spec.name, list(variant_templates(spec)), config.prompt_variants,
                               config.shot_orders, config.shots_sweep, run_shots(spec, config))
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
    data, examples, _ = load_task(spec, config)
    if notes is not None and data.note:
        notes.append(data.note)
    digests = data_digests(data)  # once for every condition: each reads the same files
    first, *others = asked.conditions
    shots, prepared = shots_and_render(
        spec, config, data, examples, _shots_drawn(spec, config, first),
        lambda drawn, watch: render_task(spec, config, data, examples, drawn, stage, first, watch, digests))
    return [prepared, *(render_task(spec, config, data, examples, shots, stage, c, digests=digests)
                        for c in others)]


def ranking_identity(config: RunConfig, pool: Sequence[str], depth: int) -> str:
    """What a retrieval answer depends on, as the "model" of its cache key: the embedding model (a
    local folder by its fingerprint), the candidate pool and the ranking depth."""
    if config.embeddings_path:
        embedder = f"path:{Path(config.embeddings_path).name}@{local_model_fingerprint(config.embeddings_path)}"
    else:
        embedder = f"model:{config.embeddings_model}"
    return f"embeddings[{embedder}]|pool:{pool_digest(pool)}|depth:{depth}"


def _ranking_query(params: GenerationParams, query: Callable[[Example], str], example: Example) -> Prompt:
    return Prompt(params=params, text=query(example))


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
    size, packer = stage_all(stage, plan_name(spec.name, None), identity, planned.examples, make_prompt)
    return PreparedTask(spec, data, planned.examples, (), make_prompt, stage, size, packer, spec.ranking.depth,
                        None, identity, pool=planned.pool, data_digests=data_digests(data))


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
