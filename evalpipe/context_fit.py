"""Context budgeting: make long prompts fit the model's context by cutting one designated field.

Level 2 clinical inputs (discharge letters) run to thousands of words. A prompt whose tokens plus
``max_tokens`` exceed the context would be rejected by the server (or silently cut at the wrong
end), so before any request each such prompt is re-rendered with its task's *long field* (e.g.
the discharge summary — never the instructions or the question) shortened from the end until it
fits. How many tokens were cut is recorded per sample, and the share of truncated samples is
reported, because a model that never saw the answer cannot be blamed for missing it.

Tokens are counted with the model's own tokenizer where the server exposes one (vLLM's
``POST /tokenize``, llama.cpp's ``POST /extras/tokenize/count``), through the run's backend
(:meth:`~evalpipe.backends.base.Backend.count_tokens`: its keep-alive connections, many counts at
once, each distinct text once); the context comes from the same backend's model list. Without one, a documented
estimate is used — ``ceil(characters / 3.5)``, conservative for English clinical text with
subword tokenizers — and the results say so.

Chat prompts are counted exactly where the tokenizer can apply the model's chat template — vLLM's
``/tokenize`` takes the messages, and an in-process engine's Hugging Face tokenizer applies its
template — because a template can add far more than role markers (some inject a default system
prompt of dozens of tokens). Where it cannot (llama.cpp's endpoint counts plain text only, the
estimate), a chat prompt counts as its message texts plus :data:`CHAT_OVERHEAD_TOKENS` per message.
A safety margin of :data:`SAFETY_TOKENS` is kept either way.

**A context too small is an error, not a note.** A server that reports a context of 8 tokens would
have every long field emptied and every prompt fail (or, worse, be answered without its document).
A context below :data:`MIN_CONTEXT_TOKENS`, or one shorter than a task's prompt with its long field
emptied (no room for any answer), stops the run before any generation request, naming the context,
where it came from and ``--context-length`` (:class:`ContextTooSmall`). A prompt that fits but leaves
less than ``max_tokens`` is still sent: counts may be estimates, and the server's verdict is recorded.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

from evalpipe.records import Example, Message, Prompt, chat_payload
from evalpipe.errors import UsageError

if TYPE_CHECKING:
    from evalpipe.backends.base import Backend

CHAT_OVERHEAD_TOKENS = 8
SAFETY_TOKENS = 16
#: the smallest context evalpipe budgets for: no task's instructions, question and answer fit in less
#: (the smallest models still served have 512–2,048 tokens)
MIN_CONTEXT_TOKENS = 256
CHARS_PER_TOKEN_ESTIMATE = 3.5


class ContextTooSmall(UsageError):
    """The model's context cannot hold a task's prompt (one line, naming ``--context-length``)."""


def check_context(context_length: int, source: str) -> None:
    """Refuse a context below :data:`MIN_CONTEXT_TOKENS`; ``source`` says where the number came from."""
    if context_length < MIN_CONTEXT_TOKENS:
        raise ContextTooSmall(
            f"the model's context is {context_length} tokens ({source}), below the {MIN_CONTEXT_TOKENS} any task "
            "needs; if that is wrong, pass --context-length N with the context the model really serves")


def estimate_tokens(text: str) -> int:
    """The documented estimate: ``ceil(characters / 3.5)``."""
    return math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE)


class TokenCounter(Protocol):
    """Counts text in the model's tokens (async: a server counts it, many texts at once).

    A counter that can also apply the model's chat template has ``async count_chat(messages) ->
    int | None`` (the templated conversation plus the generation prompt; None when it cannot) and a
    ``chat_template`` flag (True once a template was applied, False when there is none, None while
    unknown); :func:`prompt_tokens` uses it where present.
    """

    #: "server" (the model's tokenizer) or "estimate" (characters / 3.5); read-only, so that a
    #: class constant satisfies it
    @property
    def kind(self) -> str: ...

    async def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class EstimateCounter:
    kind: str = "estimate"

    async def count(self, text: str) -> int:
        return estimate_tokens(text)


class BackendCounter:
    """Counts with the backend's :meth:`~evalpipe.backends.base.Backend.count_tokens` (the server's
    tokenizer, on the run's own keep-alive connections; each distinct text asked once).

    A text the server refuses to count (some reject texts longer than the context) is counted
    with the estimate instead; ``fallbacks`` says how often, and the run summary reports it.
    """

    kind = "server"

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.fallbacks = 0
        #: whether chat prompts are counted with the served model's template: None until the first
        #: chat prompt is asked (alone, so a model without a template is asked once), then known
        self.chat_template: bool | None = None
        self._first_chat: Any = None

    async def count(self, text: str) -> int:
        counted = await self._backend.count_tokens(text)
        if counted is None:
            self.fallbacks += 1
            return estimate_tokens(text)
        return counted

    async def count_chat(self, messages: Sequence[Message]) -> int | None:
        """The conversation through the served model's chat template (vLLM's ``/tokenize`` takes
        messages); None where the server has no chat form (llama.cpp) or no template."""
        if self.chat_template is None:
            if self._first_chat is None:
                self._first_chat = asyncio.ensure_future(self._backend.count_tokens(messages))
                counted = await self._first_chat
                self.chat_template = counted is not None
                return cast("int | None", counted)
            await asyncio.shield(self._first_chat)
        if not self.chat_template:
            return None
        return await self._backend.count_tokens(messages)


class HFTokenizerCounter:
    """The model's own tokenizer loaded with transformers (in-process engines: no server to ask)."""

    kind = "server"

    def __init__(self, model: str) -> None:
        from transformers import AutoTokenizer  # noqa: PLC0415 - heavy, only for in-process engines

        self._tokenizer = AutoTokenizer.from_pretrained(model)
        #: whether chat prompts are counted with the model's template (a tokenizer without one:
        #: approximated, as for a plain-text counter)
        self.chat_template = bool(getattr(self._tokenizer, "chat_template", None))

    async def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    async def count_chat(self, messages: Sequence[Message]) -> int | None:
        """The template vLLM's ``LLM.chat`` applies: the tokenizer's own, with the generation prompt."""
        if not self.chat_template:
            return None
        encoded: Any = self._tokenizer.apply_chat_template(
            chat_payload(messages), add_generation_prompt=True, tokenize=True)
        # transformers 5 returns a BatchEncoding, older releases a list of ids
        ids = encoded["input_ids"] if isinstance(encoded, Mapping) else encoded
        return len(ids)


def model_context_length(model: str) -> int | None:
    """``max_position_embeddings`` from a local model's config.json, if readable."""
    from pathlib import Path  # noqa: PLC0415

    path = Path(model) / "config.json"
    try:
        value = json.loads(path.read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


async def detect_counter(backend: Backend) -> TokenCounter:
    """The server's tokenizer if the backend can count (it finds vLLM's or llama.cpp's tokenize
    endpoint itself), else the estimate."""
    return BackendCounter(backend) if await backend.count_tokens("hello") is not None else EstimateCounter()


async def prompt_tokens(prompt: Prompt, counter: TokenCounter) -> int:
    """Tokens of a prompt: exact for chat where the counter applies the chat template, else the
    message texts plus :data:`CHAT_OVERHEAD_TOKENS` per message."""
    if prompt.messages is not None:
        count_chat = getattr(counter, "count_chat", None)
        exact = await count_chat(prompt.messages) if count_chat is not None else None
        if exact is not None:
            return cast("int", exact)
        text = "\n".join(m.content for m in prompt.messages)
        return await counter.count(text) + CHAT_OVERHEAD_TOKENS * len(prompt.messages)
    return await counter.count(prompt.text or "")


@dataclass(frozen=True)
class Fitted:
    example: Example
    prompt: Prompt
    #: tokens removed from the long field (0 = untouched)
    truncated_tokens: int
    #: the prompt's tokens, and the most it may have (context minus max_tokens and the margin)
    tokens: int = 0
    limit: int = 0

    @property
    def fits(self) -> bool:
        return self.tokens <= self.limit


async def fit_prompt(
    example: Example,
    render: Callable[[Example], Prompt],
    long_field: str,
    context_length: int,
    counter: TokenCounter,
    max_rounds: int = 6,
    prompt: Prompt | None = None,
) -> Fitted:
    """Render ``example``; if it does not fit, shorten ``inputs[long_field]`` from the end until it does.

    ``prompt`` is ``render(example)`` when the caller already has it (then it is not rendered
    again). Each round estimates how many characters to drop from the overshoot measured in
    tokens and the field's own characters-per-token, then re-counts; it stops when the prompt fits
    or after ``max_rounds`` (then the field is emptied, which always fits unless the rest is too
    long — in that case the prompt is returned as is and the server's error will be recorded).
    """
    prompt = prompt if prompt is not None else render(example)
    max_tokens = prompt.params.max_tokens
    limit = context_length - max_tokens - SAFETY_TOKENS
    used = await prompt_tokens(prompt, counter)
    if used <= limit:
        return Fitted(example, prompt, 0, used, limit)
    original = str(example.inputs[long_field])
    original_tokens = await counter.count(original)
    text, field_tokens = original, original_tokens
    current = example
    for _ in range(max_rounds):
        overshoot = used - limit
        chars_per_token = max(len(text) / max(field_tokens, 1), 1.0)
        cut = math.ceil((overshoot + 1) * chars_per_token)
        text = text[: max(len(text) - cut, 0)]
        current = replace(example, inputs={**example.inputs, long_field: text})
        prompt = render(current)
        used = await prompt_tokens(prompt, counter)
        field_tokens = await counter.count(text)
        if used <= limit or not text:
            break
    return Fitted(current, prompt, max(original_tokens - field_tokens, 0), used, limit)
