"""Render every example's prompt and stage it, before anything is sent (a template error costs nothing).

One task under one prompt condition becomes a plan on the stage (:mod:`evalpipe.pipeline.stage`):
each sample's cache key and its prompt packed against the text the plan's prompts share
(:mod:`evalpipe.store.prompt_pack`). The data files' digests are taken here too, since a streamed
task's data is read again to score and must be the data its prompts came from
(:func:`check_unchanged`).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from evalpipe.config import RunConfig
from evalpipe.data.digest import file_sha256
from evalpipe.outcome import RunError
from evalpipe.pipeline.prepared import PreparedTask
from evalpipe.pipeline.render_beside import rendered
from evalpipe.pipeline.stage import DuplicateSample, PlanStage, info_json
from evalpipe.prompting import DEFAULT_VARIANT, PromptOptions, PromptRenderer, variant_templates
from evalpipe.records import Example, GenerationParams, Message, Prompt, to_jsonable
from evalpipe.store.keys import cache_key
from evalpipe.store.prompt_pack import LEARN, Packer
from evalpipe.structured import structured_format
from evalpipe.tasks.base import LOGLIKELIHOOD, Examples, ExampleStream, TaskData, TaskSpec
from evalpipe.variants.conditions import Condition, plan_name, shot_permutation


def run_shots(spec: TaskSpec, config: RunConfig) -> int:
    return spec.default_shots if config.shots is None else config.shots


def render_task(spec: TaskSpec, config: RunConfig, data: TaskData, examples: Examples,
                 shots: tuple[Example, ...], stage: PlanStage, condition: Condition | None = None,
                 watch: Callable[[Example], None] | None = None,
                 digests: Mapping[str, str] | None = None) -> PreparedTask:
    """Render every example's prompt under ``condition`` with ``shots`` into ``stage``; ``watch``
    sees each example as it is rendered. ``digests``: the data files' sha256 if already taken (a
    task's conditions share one load)."""
    template = None
    if condition is not None:  # ---- prompt conditions (evalpipe.variants.conditions) ----
        k = run_shots(spec, config) if condition.shots is None else condition.shots
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
    size, packer = stage_all(stage, name, config.model, examples, make_prompt, watch)
    return PreparedTask(spec, data, examples, shots, make_prompt, stage, size, packer, max_tokens, renderer,
                        config.model, condition=condition, template=template,
                        data_digests=digests if digests is not None else data_digests(data))


def stage_all(stage: PlanStage, plan: str, model: str, examples: Examples,
               make_prompt: Callable[[Example], Prompt],
               watch: Callable[[Example], None] | None = None) -> tuple[int, Packer]:
    """Render every example's prompt once (the first :data:`~evalpipe.store.prompt_pack.LEARN` twice: the
    text they share is learnt from them) and stage its cache key and packed form as plan ``plan``;
    the number of samples and the packer (its shared texts)."""
    packer = Packer()
    as_json = _PromptJson()
    packer.learn(as_json(make_prompt(ex)) for ex in itertools.islice(iter(examples), LEARN))
    unbudgeted = info_json(0)

    def row(example: Example) -> tuple[str, str]:
        prompt = make_prompt(example)
        return cache_key(model, prompt), dumps_packed(packer.pack(as_json(prompt)))

    def rows() -> Iterator[tuple[str, str, str, str]]:
        # a large plan is rendered in two processes (evalpipe.pipeline.render_beside): the same rows
        for example, key, packed in rendered(examples, row, packer.texts, watch):
            yield example.id, key, packed, unbudgeted

    try:
        return stage.write(plan, rows()), packer
    except DuplicateSample as exc:
        raise RunError(f"task {plan}: {exc}; sample ids must be unique") from None


#: what ``json.dumps(packed, ensure_ascii=False)`` builds for each call, built once
_DUMPS_PACKED = json.JSONEncoder(ensure_ascii=False).encode


def dumps_packed(packed: Any) -> str:
    return _DUMPS_PACKED(packed)


#: the prompt's JSON is built directly only while a Prompt and a Message have these fields
_DIRECT_FIELDS = (tuple(f.name for f in fields(Prompt)) == ("params", "messages", "text", "choices")
                  and tuple(f.name for f in fields(Message)) == ("role", "content"))


class _PromptJson:
    """:func:`~evalpipe.records.to_jsonable` of a plan's prompts, built directly (issue 28): the
    fields in their order, ``choices`` only when set, and the params' JSON worked out once per
    params object (a plan's prompts share one; matched by identity, as equal params may differ in
    JSON). The params dict is shared by the prompts' JSON, which is only packed and serialised.
    A prompt holding anything but plain strings gets :func:`to_jsonable` itself."""

    def __init__(self) -> None:
        self._params: tuple[GenerationParams, Any] | None = None

    def __call__(self, prompt: Prompt) -> Any:
        messages, text, choices = prompt.messages, prompt.text, prompt.choices
        if not _DIRECT_FIELDS or not (text is None or type(text) is str):
            return to_jsonable(prompt)
        if messages is None:
            listed = None
        elif type(messages) is tuple and all(type(m) is Message and type(m.role) is str and type(m.content) is str
                                             for m in messages):
            listed = [{"role": m.role, "content": m.content} for m in messages]
        else:
            return to_jsonable(prompt)
        if self._params is None or self._params[0] is not prompt.params:
            self._params = (prompt.params, to_jsonable(prompt.params))
        built = {"params": self._params[1], "messages": listed, "text": text}
        if choices is not None:
            if type(choices) is not tuple or not all(type(c) is str for c in choices):
                return to_jsonable(prompt)
            built["choices"] = list(choices)
        return built


def _with_choices(render: Callable[[Example], Prompt], params: GenerationParams,
                  continuations: Callable[[Example], tuple[str, ...]], example: Example) -> Prompt:
    """A log-likelihood request: the completion prompt, scored over the options' continuations."""
    return replace(render(example), params=params, choices=continuations(example))


def data_digests(data: TaskData) -> dict[str, str]:
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
