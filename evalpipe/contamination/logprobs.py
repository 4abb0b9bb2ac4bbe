"""Prompt log-probabilities for Min-K % Prob: one echo request per text, stored like any answer.

A text's "answer" is the log-probability of each of its tokens given the ones before it, as an
OpenAI-compatible ``/v1/completions`` endpoint returns them with ``echo: true, logprobs: 1,
max_tokens: 1`` (vLLM's server does; chat-only APIs and llama.cpp's server do not):
:meth:`evalpipe.backends.openai_compat.OpenAICompatBackend.prompt_logprobs`. The reply is stored in
the run's store as ``{"token_logprobs": [...]}`` under a key of its own model identity
(:func:`logprob_model`), so it never meets a generated answer to the same text, and a resumed probe
asks it again only if it is missing.

An endpoint that cannot return them is found by one short probe request before any text is sent
(:func:`unavailable`); the probe then records ``{"available": false, "reason": ...}`` instead of
failing — Min-K % is the second signal, not the probe's condition.
"""

from __future__ import annotations

import json
from typing import Any, cast

from evalpipe.backends.base import Backend, BackendError
from evalpipe.records import Completion, GenerationParams, Prompt

#: the request every text is scored with (the one generated token is not used)
PARAMS = GenerationParams(max_tokens=1, temperature=0.0)


def logprob_model(model: str) -> str:
    """The identity prompt log-probability answers are stored under (their cache key's model)."""
    return f"{model} [prompt log-probabilities]"


def logprob_prompt(text: str) -> Prompt:
    return Prompt(params=PARAMS, text=text)


class PromptLogprobs:
    """A backend whose answer to a text prompt is its token log-probabilities (JSON)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.model = logprob_model(backend.model)

    async def complete(self, prompt: Prompt) -> Completion:
        return cast("Completion", await self._backend.prompt_logprobs(prompt))  # type: ignore[attr-defined]


async def unavailable(backend: Backend) -> str | None:
    """Why ``backend`` cannot give prompt log-probabilities (None when it can: one probe request)."""
    check = getattr(backend, "check_prompt_logprobs", None)
    if check is None or not hasattr(backend, "prompt_logprobs"):
        name = backend.describe().get("backend", type(backend).__name__)
        return (f"the {name} backend cannot return prompt log-probabilities (Min-K % needs one OpenAI-compatible "
                "/v1/completions endpoint that echoes them, as vLLM's server does)")
    try:
        await check()
    except BackendError as exc:
        return str(exc)
    return None


def token_logprobs(answer: str | None) -> list[float] | None:
    """The stored log-probabilities of an answer (None when there is none or it is not of that form)."""
    if answer is None:
        return None
    try:
        data: Any = json.loads(answer)
    except ValueError:
        return None
    values = data.get("token_logprobs") if isinstance(data, dict) else None
    if not isinstance(values, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return None
    return [float(v) for v in values]
