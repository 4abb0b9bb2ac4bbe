"""The OpenAI request body of a prompt and the answer read from a reply — one definition for direct
requests (:mod:`evalpipe.backends.openai_compat`) and Batch API lines (:mod:`evalpipe.backends.batch`),
so an answer is the same whichever way it came (issue 25).

* **Request**: ``model``, the sampling options of :meth:`GenerationParams.sampling_options`
  (``reasoning_effort`` and ``response_format`` only when set), and ``messages`` (chat) or ``prompt``
  (completions). Reasoning models refuse ``max_tokens`` and want ``max_completion_tokens``
  (OpenAI's o-series and GPT-5): with ``completion_tokens_field="max_completion_tokens"`` the limit
  is sent under that name. The backend switches to it by itself when a 400 names the parameter
  (:func:`asks_for_max_completion_tokens`) and records the switch in its stats.
* **Answer**: the content (``""`` for empty or null), the finish reason, the usage with
  ``prompt_tokens_details.cached_tokens`` and ``completion_tokens_details.reasoning_tokens`` when
  given, and the reasoning text that vLLM (``reasoning_content``), DeepSeek and OpenRouter
  (``reasoning``) send beside the content — kept apart, never scored. ``<think>`` inside the
  content is not this module's business (the grading stage strips it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe.backends.retry import RequestFailed
from evalpipe.records import Message, Prompt, Usage, chat_payload

__all__ = ["Answer", "asks_for_max_completion_tokens", "read_answer", "request_body"]

#: paths under the API root, by endpoint kind (Batch API lines name them as ``url``)
PATHS = {"chat": "/chat/completions", "completions": "/completions"}
_MAX_COMPLETION = re.compile(r"max_completion_tokens")


def request_body(model: str, prompt: Prompt, *, completion_tokens_field: str = "max_tokens") -> dict[str, Any]:
    """The JSON body of a generation request (see the module docstring)."""
    body: dict[str, Any] = {"model": model, **prompt.params.sampling_options()}
    if completion_tokens_field != "max_tokens":
        body[completion_tokens_field] = body.pop("max_tokens")
    if prompt.messages is not None:
        body["messages"] = chat_payload(prompt.messages)
    else:
        body["prompt"] = prompt.text
    return body


def asks_for_max_completion_tokens(failure: RequestFailed) -> bool:
    """Whether a refused request was refused for ``max_tokens`` where ``max_completion_tokens`` is
    wanted (OpenAI: HTTP 400, "Unsupported parameter: 'max_tokens' … Use 'max_completion_tokens'")."""
    return failure.status == 400 and bool(_MAX_COMPLETION.search(failure.detail or ""))


@dataclass(frozen=True)
class Answer:
    text: str
    finish_reason: str | None
    usage: Usage
    reasoning: str | None = None
    #: the reply's usage was impossible (read as no usage; the backend counts it as ``invalid_usage``)
    usage_invalid: bool = False


#: more tokens than any context holds: a usage count above it is impossible
_MAX_USAGE_TOKENS = 10**9
_INVALID = object()


def _count(value: Any) -> Any:
    """A token count as an int, None when absent, or ``_INVALID`` when impossible: not a whole
    number in 0…10⁹ (``Infinity``, ``NaN``, negative, fractional, a bool or a string). Integral
    floats (``12.0``) are whole numbers."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return _INVALID
    if isinstance(value, float) and not (value.is_integer() and abs(value) <= _MAX_USAGE_TOKENS):
        return _INVALID  # NaN, ±Infinity and fractions fail is_integer; the bound keeps int() cheap
    if not 0 <= int(value) <= _MAX_USAGE_TOKENS:
        return _INVALID
    return int(value)


def usage_of(usage: Any) -> Usage | None:
    """A reply's ``usage`` object as :class:`Usage`, with the cached and reasoning token counts where
    the endpoint gives them; no object (or no counts) is an empty Usage, and None means impossible:
    a count present that :func:`_count` refuses."""
    if not isinstance(usage, Mapping):
        return Usage()
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    counts = (
        _count(usage.get("prompt_tokens")),
        _count(usage.get("completion_tokens")),
        _count(prompt_details.get("cached_tokens") if isinstance(prompt_details, Mapping) else None),
        _count(completion_details.get("reasoning_tokens") if isinstance(completion_details, Mapping) else None),
    )
    if any(c is _INVALID for c in counts):
        return None
    return Usage(*counts)


def read_usage(usage: Any) -> Usage:
    """:func:`usage_of`, with an impossible usage read as no usage."""
    return usage_of(usage) or Usage()


def read_answer(data: Any, *, chat: bool) -> Answer:
    """The answer of a completion reply; a reply that is no completion is a retryable failure
    (servers under load send odd things)."""
    try:
        choice = data["choices"][0]
        message = choice["message"] if chat else choice
        content = message.get("content") if chat else choice.get("text")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise RequestFailed("unexpected response shape", retryable=True) from None
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise RequestFailed("unexpected response shape", retryable=True, detail="content is not a string")
    reasoning = None
    if chat and isinstance(message, dict):
        for name in ("reasoning_content", "reasoning"):
            value = message.get(name)
            if isinstance(value, str) and value:
                reasoning = value
                break
    usage = usage_of(data.get("usage"))
    finish_reason = choice.get("finish_reason") if isinstance(choice, dict) else None
    return Answer(content, finish_reason if isinstance(finish_reason, str) else None, usage or Usage(), reasoning,
                  usage_invalid=usage is None)


def tokenize_payload(flavour: str, model: str, content: str | Sequence[Message]) -> bytes:
    """The body of a count request: vLLM's ``/tokenize`` (text without special tokens, or messages
    with the generation prompt, as a chat request is templated) or llama.cpp's ``{"input": text}``."""
    if flavour == "llamacpp":
        body: dict[str, Any] = {"input": content}
    elif isinstance(content, str):
        body = {"model": model, "prompt": content, "add_special_tokens": False}
    else:
        body = {"model": model, "messages": chat_payload(content), "add_generation_prompt": True}
    return json.dumps(body).encode("ascii")
