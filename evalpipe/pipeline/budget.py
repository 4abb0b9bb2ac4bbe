"""Context budgeting of prepared tasks: fit long prompts to the model's context after the policy check.

The mechanism — token counters, the context length, fitting one prompt by shortening its long field
— is :mod:`evalpipe.context_fit` (tasks' loaders use it too, so it stays outside the pipeline). This
module applies it to a run's prepared tasks: it finds the context and the counter, reloads a task
``sized_by_context``, rewrites the staged rows of the prompts that changed, and says how.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from evalpipe.backends.base import Backend
from evalpipe.config import RunConfig
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
from evalpipe.outcome import RunError
from evalpipe.pipeline.prepare import prepare_task
from evalpipe.pipeline.prepared import PreparedTask
from evalpipe.pipeline.render import dumps_packed
from evalpipe.pipeline.stage import info_json
from evalpipe.records import to_jsonable
from evalpipe.store.keys import cache_key


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
        (i, cache_key(p.model, f.prompt), dumps_packed(p.packer.pack(to_jsonable(f.prompt))), info_json(f.truncated_tokens))
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
    counter = await _counter_for(config, backend, in_process, previous)
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
    return budgeted, {"budget": _budget_info(counter, context_length)}


async def _counter_for(config: RunConfig, backend: Backend | None, in_process: bool,
                       previous: Mapping[str, Any]) -> TokenCounter:
    """The token counter of a run: the model's own tokenizer where it can be had, else the estimate;
    a run budgeted with the server's tokenizer must not resume with the estimate."""
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
    return counter


def _budget_info(counter: TokenCounter, context_length: int) -> dict[str, Any]:
    """How the run was budgeted, as ``config.json`` and the summary record it."""
    info: dict[str, Any] = {"context_length": context_length, "token_counter": counter.kind}
    if getattr(counter, "chat_template", False) is True:
        info["chat_counting"] = "template"
    fallbacks = getattr(counter, "fallbacks", 0)
    if fallbacks:
        info["estimated_counts"] = fallbacks
    return info
