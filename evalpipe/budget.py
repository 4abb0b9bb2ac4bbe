"""Context budgeting: make long prompts fit the model's context by cutting one designated field.

Level 2 clinical inputs (discharge letters) run to thousands of words. A prompt whose tokens plus
``max_tokens`` exceed the context would be rejected by the server (or silently cut at the wrong
end), so before any request each such prompt is re-rendered with its task's *long field* (e.g.
the discharge summary — never the instructions or the question) shortened from the end until it
fits. How many tokens were cut is recorded per sample, and the share of truncated samples is
reported, because a model that never saw the answer cannot be blamed for missing it.

Tokens are counted with the model's own tokenizer where the server exposes one (vLLM's
``POST /tokenize``, llama.cpp's ``POST /extras/tokenize/count``). Without one, a documented
estimate is used — ``ceil(characters / 3.5)``, conservative for English clinical text with
subword tokenizers — and the results say so.

Chat prompts are counted exactly where the tokenizer can apply the model's chat template — vLLM's
``/tokenize`` takes the messages, and an in-process engine's Hugging Face tokenizer applies its
template — because a template can add far more than role markers (some inject a default system
prompt of dozens of tokens). Where it cannot (llama.cpp's endpoint counts plain text only, the
estimate), a chat prompt counts as its message texts plus :data:`CHAT_OVERHEAD_TOKENS` per message.
A safety margin of :data:`SAFETY_TOKENS` is kept either way.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

from evalpipe.records import Example, Message, Prompt, chat_payload

CHAT_OVERHEAD_TOKENS = 8
SAFETY_TOKENS = 16
CHARS_PER_TOKEN_ESTIMATE = 3.5


class TokenCounter(Protocol):
    """Counts text in the model's tokens.

    A counter that can also apply the model's chat template has ``count_chat(messages) -> int |
    None`` (the templated conversation plus the generation prompt; None when it cannot) and a
    ``chat_template`` flag; :func:`prompt_tokens` uses it where present.
    """

    #: "server" (the model's tokenizer) or "estimate" (characters / 3.5)
    kind: str

    def count(self, text: str) -> int: ...


@dataclass(frozen=True)
class EstimateCounter:
    kind: str = "estimate"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE)


class ServerCounter:
    """Counts with an inference server's tokenizer endpoint (vLLM or llama.cpp flavour).

    A text the endpoint refuses to count (some servers reject texts longer than the context) is
    counted with the estimate instead; ``fallbacks`` says how often, and the run summary reports
    it. The API key, if any, is sent as a bearer token and never stored.
    """

    kind = "server"

    def __init__(self, base_url: str, model: str, flavour: str, timeout_s: float = 30.0,
                 api_key: str | None = None) -> None:
        self.model = model
        self.flavour = flavour
        self.timeout_s = timeout_s
        self._headers = {"content-type": "application/json"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self.fallbacks = 0
        #: whether chat prompts are counted with the served model's template (vLLM only; turned
        #: off by the first refusal)
        self.chat_template = flavour == "vllm"
        parts = urlsplit(base_url)
        root = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        self.url = root + ("/tokenize" if flavour == "vllm" else "/extras/tokenize/count")

    def _post(self, payload: dict) -> dict:
        request = urllib.request.Request(self.url, data=json.dumps(payload).encode(), headers=self._headers)
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.loads(response.read())

    def _count(self, text: str) -> int:
        if self.flavour == "vllm":
            return int(self._post({"model": self.model, "prompt": text, "add_special_tokens": False})["count"])
        return int(self._post({"input": text})["count"])

    def count(self, text: str) -> int:
        try:
            return self._count(text)
        except (urllib.error.URLError, OSError, KeyError, ValueError, TypeError, TimeoutError):
            self.fallbacks += 1
            return EstimateCounter().count(text)

    def count_chat(self, messages: Sequence[Message]) -> int | None:
        """vLLM applies the served model's chat template (``add_generation_prompt`` as a chat
        request does); llama.cpp's endpoint has no chat form, so None (the caller approximates)."""
        if self.flavour != "vllm" or not self.chat_template:
            return None
        payload = {"model": self.model, "messages": chat_payload(messages), "add_generation_prompt": True}
        try:
            return int(self._post(payload)["count"])
        except (urllib.error.URLError, OSError, KeyError, ValueError, TypeError, TimeoutError):
            # typically a model without a chat template: stop asking, approximate from now on
            self.chat_template = False
            return None


class HFTokenizerCounter:
    """The model's own tokenizer loaded with transformers (in-process engines: no server to ask)."""

    kind = "server"

    def __init__(self, model: str) -> None:
        from transformers import AutoTokenizer  # noqa: PLC0415 - heavy, only for in-process engines

        self._tokenizer = AutoTokenizer.from_pretrained(model)
        #: whether chat prompts are counted with the model's template (a tokenizer without one:
        #: approximated, as for a plain-text counter)
        self.chat_template = bool(getattr(self._tokenizer, "chat_template", None))

    def count(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False))

    def count_chat(self, messages: Sequence[Message]) -> int | None:
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


def detect_counter(base_url: str, model: str, api_key: str | None = None) -> TokenCounter:
    """The server's tokenizer if it has a known tokenize endpoint, else the estimate."""
    for flavour in ("vllm", "llamacpp"):
        counter = ServerCounter(base_url, model, flavour, timeout_s=5.0, api_key=api_key)
        try:
            counter._count("hello")
            counter.timeout_s = 30.0
            return counter
        except (urllib.error.URLError, OSError, KeyError, ValueError, TimeoutError):
            continue
    return EstimateCounter()


def prompt_tokens(prompt: Prompt, counter: TokenCounter) -> int:
    """Tokens of a prompt: exact for chat where the counter applies the chat template, else the
    message texts plus :data:`CHAT_OVERHEAD_TOKENS` per message."""
    if prompt.messages is not None:
        count_chat = getattr(counter, "count_chat", None)
        exact = count_chat(prompt.messages) if count_chat is not None else None
        if exact is not None:
            return exact
        text = "\n".join(m.content for m in prompt.messages)
        return counter.count(text) + CHAT_OVERHEAD_TOKENS * len(prompt.messages)
    return counter.count(prompt.text or "")


@dataclass(frozen=True)
class Fitted:
    example: Example
    prompt: Prompt
    #: tokens removed from the long field (0 = untouched)
    truncated_tokens: int


def fit_prompt(
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
    used = prompt_tokens(prompt, counter)
    if used <= limit:
        return Fitted(example, prompt, 0)
    original = str(example.inputs[long_field])
    original_tokens = counter.count(original)
    text, field_tokens = original, original_tokens
    current = example
    for _ in range(max_rounds):
        overshoot = used - limit
        chars_per_token = max(len(text) / max(field_tokens, 1), 1.0)
        cut = math.ceil((overshoot + 1) * chars_per_token)
        text = text[: max(len(text) - cut, 0)]
        current = replace(example, inputs={**example.inputs, long_field: text})
        prompt = render(current)
        used = prompt_tokens(prompt, counter)
        field_tokens = counter.count(text)
        if used <= limit or not text:
            break
    return Fitted(current, prompt, max(original_tokens - field_tokens, 0))


def server_context_length(base_url: str, timeout_s: float = 5.0, api_key: str | None = None) -> int | None:
    """The context length a server reports in ``GET /models`` (vLLM: ``max_model_len``), if any."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    request = urllib.request.Request(base_url.rstrip("/") + "/models", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            data = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError, TimeoutError):
        return None
    for entry in data.get("data", []) if isinstance(data, dict) else []:
        value = entry.get("max_model_len") if isinstance(entry, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    return None
