"""From what a user asked for to a :class:`~evalpipe.config.RunConfig`: one function for the command
line (``evalpipe run``) and the Python API (:func:`evalpipe.evaluate`), so both get the same defaults
and refuse the same combinations.

:class:`RunConfig` checks each field on its own (ranges, names: ``option_problems``); what is checked
here is about *asking*: which options go together (``--engine`` or ``--base-url``, the embedding
model of a retrieval task), and defaults that depend on other options (the model of a llama.cpp run,
concurrency by engine). A stored ``config.json`` legitimately holds both an engine and the URL it
was served on, so these checks cannot live in ``RunConfig`` itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalpipe.config import RunConfig
from evalpipe.engines.launch import ENGINES, VLLM_NAMED, engine_options
from evalpipe.errors import UsageError
from evalpipe.tasks.base import TaskSpec

__all__ = ["DEFAULT_CONCURRENCY", "INPROCESS_CONCURRENCY", "LLAMACPP_CONCURRENCY", "build_config"]

DEFAULT_CONCURRENCY = 64
#: the in-process engine is fed in batches of up to 2 × concurrency prompts (see
#: backends/vllm_inprocess.py): large batches keep a GPU busy, and vLLM schedules them itself
INPROCESS_CONCURRENCY = 256
#: the llama.cpp server evalpipe starts answers one request at a time: more in flight only queue
#: there until they pass --timeout (measured: 64 in flight on SmolLM2 → answers waiting ~2 minutes)
LLAMACPP_CONCURRENCY = 2


def default_concurrency(engine: str | None) -> int:
    """Requests in flight when none is asked for: what suits the engine (see the constants)."""
    return {"vllm-inprocess": INPROCESS_CONCURRENCY, "llamacpp": LLAMACPP_CONCURRENCY}.get(engine or "",
                                                                                          DEFAULT_CONCURRENCY)


def build_config(
    specs: Sequence[TaskSpec],
    *,
    model: str | None,
    base_urls: Sequence[str] = (),
    engine: str | None = None,
    engine_settings: Mapping[str, Any] | None = None,
    engine_args: Sequence[str] = (),
    concurrency: int | None = None,
    embeddings_url: str | None = None,
    embeddings_model: str | None = None,
    embeddings_path: str | None = None,
    needs_embeddings: bool = True,
    **fields: Any,
) -> RunConfig:
    """The run's config for ``specs`` (resolved tasks), or a :class:`UsageError` naming the option.

    ``base_urls``: the endpoint, then replicas of the same model. ``engine_settings``: vLLM's named
    settings (``VLLM_NAMED``; None = not given), ``engine_args``: ``KEY=VALUE`` pairs passed through.
    ``fields``: any other :class:`RunConfig` field, as it is stored (``data`` paths already resolved).
    ``needs_embeddings=False``: the config does not answer the tasks the way a run does (the contamination
    probe completes a retrieval task's text, it ranks nothing), so no embedding model is asked for.
    """
    if engine is not None and engine not in ENGINES:
        raise UsageError(f"--engine must be one of {', '.join(ENGINES)}", option="--engine")
    if engine == "llamacpp" and not model:
        model = "default"  # the bundled SmolLM2
    ranking = needs_embeddings and any(s.ranking for s in specs)
    if (embeddings_url is None) == (embeddings_path is None) and ranking:
        raise UsageError("retrieval tasks need --embeddings-url URL --embeddings-model NAME, or "
                         "--embeddings-path DIR (not both)", option="--embeddings-url")
    if embeddings_url and not embeddings_model:
        raise UsageError("--embeddings-url needs --embeddings-model", option="--embeddings-model")
    if not model and needs_embeddings and specs and all(s.ranking for s in specs):
        # only retrieval tasks: the embedding model is the model of the run (it names the run directory)
        model = embeddings_model or Path(embeddings_path or "embedder").name
    if not model:
        raise UsageError("--model is required (or set EVALPIPE_MODEL)", option="--model")
    if engine and base_urls:
        raise UsageError("give either --engine (evalpipe starts the server) or --base-url", option="--engine")
    # a compatibility mode with its own prompt (--compat lm-eval) asks the reference's prompt and scores
    # it by log-likelihood, as the reference does
    compat = fields.get("compat")
    if compat and any(compat in s.forms for s in specs):
        fields = {**fields, "prompt_form": compat, "choice_scoring": "loglikelihood"}
    settings = dict(zip(VLLM_NAMED, (None,) * len(VLLM_NAMED))) | dict(engine_settings or {})
    try:
        options = engine_options(engine, settings, engine_args)
    except UsageError as exc:
        raise UsageError(str(exc), option="--engine") from None
    return RunConfig(
        tasks=tuple(s.name for s in specs), model=model,
        base_url=base_urls[0] if base_urls else None, replicas=tuple(base_urls[1:]),
        engine=engine, engine_options=options,
        concurrency=default_concurrency(engine) if concurrency is None else concurrency,
        embeddings_url=embeddings_url, embeddings_model=embeddings_model,
        embeddings_path=str(Path(embeddings_path).resolve()) if embeddings_path else None,
        **fields,
    )
