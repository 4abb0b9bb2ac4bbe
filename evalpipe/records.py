"""The records that cross stage boundaries: task data → prompt → completion → prediction → scores.

Every record is a small frozen dataclass so a stage can never mutate what an earlier stage
produced; that is what lets a run be resumed or re-scored from stored answers and still give the
same numbers. Anything a record holds must be JSON-serialisable through :func:`to_jsonable`,
because every record ends up in ``samples.jsonl``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True, order=True, slots=True)
class Span:
    """A labelled half-open interval ``[start, end)``.

    The unit (token index or character offset) is fixed by whoever produced the span and is
    documented there; NCBI gold and predictions are token spans, parsers work in characters.
    """

    start: int
    end: int
    label: str


@dataclass(frozen=True, slots=True)
class Example:
    """One evaluated item.

    ``inputs`` is what templates see (and nothing else: templates never see gold), ``gold`` is
    what metrics see, ``meta`` is provenance (file and line) used in error messages and reports.
    """

    id: str
    inputs: Mapping[str, Any]
    gold: Any
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Message:
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class GenerationParams:
    """Everything about decoding that can change an answer (and therefore the cache key)."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    #: reasoning models: ``reasoning_effort`` as OpenAI's API takes it ("low", "medium", "high");
    #: None = not sent. Left out of the JSON form (and the cache key) when None, so prompts made
    #: before the option existed keep their keys (issue 25)
    reasoning_effort: str | None = field(default=None, metadata={"omit_if_none": True})
    #: structured output: the ``response_format`` object sent (``{"type": "json_schema", …}``,
    #: :mod:`evalpipe.structured`) as canonical JSON text (a string keeps the record hashable);
    #: None = free text. Omitted when None, as above
    response_format: str | None = field(default=None, metadata={"omit_if_none": True})

    def sampling_options(self) -> dict[str, Any]:
        """The options an engine is sent, under the names OpenAI's API and vLLM's
        ``SamplingParams`` share: ``max_tokens`` and ``temperature`` always, ``top_p``, ``seed``
        and ``stop`` only when set (so the engine's own defaults stay in force otherwise)."""
        options: dict[str, Any] = {"max_tokens": self.max_tokens, "temperature": self.temperature}
        if self.top_p is not None:
            options["top_p"] = self.top_p
        if self.seed is not None:
            options["seed"] = self.seed
        if self.stop:
            options["stop"] = list(self.stop)
        if self.reasoning_effort is not None:
            options["reasoning_effort"] = self.reasoning_effort
        if self.response_format is not None:
            options["response_format"] = json.loads(self.response_format)
        return options


def chat_payload(messages: Sequence[Message]) -> list[dict[str, str]]:
    """Messages as every chat API takes them (OpenAI's, vLLM's ``LLM.chat`` and ``/tokenize``,
    Hugging Face chat templates): ``[{"role": …, "content": …}, …]``."""
    return [{"role": m.role, "content": m.content} for m in messages]


@dataclass(frozen=True)
class Prompt:
    """A rendered request: chat ``messages`` *or* completion ``text``, never both.

    With ``choices`` (completion text only) the request is not "generate an answer" but "how likely
    is each of these continuations of ``text``": log-likelihood scoring of a multiple-choice question's
    options, as lm-evaluation-harness does. Absent (None) it is left out of the prompt's JSON, so
    prompts without choices — every prompt before the field existed — keep their form and cache key.
    """

    params: GenerationParams
    messages: tuple[Message, ...] | None = None
    text: str | None = None
    choices: tuple[str, ...] | None = field(default=None, metadata={"omit_if_none": True})

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.text is None):
            raise ValueError("a Prompt has exactly one of messages (chat) or text (completions)")
        if self.choices is not None and (self.text is None or not self.choices):
            raise ValueError("choices are continuations of a completion text (at least one)")

    @property
    def endpoint(self) -> Literal["chat", "completions"]:
        return "chat" if self.messages is not None else "completions"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Prompt:
        """The prompt whose :func:`to_jsonable` form is ``data`` (the form the response store keeps)."""
        params = dict(data["params"])
        params["stop"] = tuple(params.get("stop") or ())
        messages = data.get("messages")
        choices = data.get("choices")
        return cls(
            params=GenerationParams(**params),
            messages=tuple(Message(m["role"], m["content"]) for m in messages) if messages is not None else None,
            text=data.get("text"),
            choices=tuple(choices) if choices is not None else None,
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens an answer cost, as the endpoint reports them.

    ``cached_tokens`` (``usage.prompt_tokens_details.cached_tokens``, part of ``prompt_tokens``) and
    ``reasoning_tokens`` (``usage.completion_tokens_details.reasoning_tokens``, part of
    ``completion_tokens``) are None when the endpoint does not say, and then left out of the JSON form.
    """

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = field(default=None, metadata={"omit_if_none": True})
    reasoning_tokens: int | None = field(default=None, metadata={"omit_if_none": True})


@dataclass(frozen=True, slots=True)
class Completion:
    """What the backend got back for one prompt.

    A request that failed for good is still a Completion: ``text`` is None and ``error`` says
    why. The runner records it on the sample, the run goes on, and a later run retries it.
    """

    text: str | None
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    latency_s: float = 0.0
    attempts: int = 1
    error: str | None = None
    #: where the answer came from, as the backend shows it: never with credentials (``redact_url``)
    endpoint_url: str | None = None
    #: the reasoning text the API sends apart from the answer (``message.reasoning_content`` or
    #: ``message.reasoning``); never parsed or scored, kept beside the answer
    reasoning: str | None = None
    #: the Batch API batch that answered (None: a direct request); batch prices may be discounted
    batch_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None


@dataclass(frozen=True, slots=True)
class Prediction:
    """A parsed answer. A failed parse is a value (``failed=True``), never an exception.

    ``value`` is the task's structured prediction (spans, a label, codes, text); when ``failed``
    it is the task's "predicts nothing" value so metrics can still count the sample (its gold
    items become false negatives). ``diagnostics`` are counters and flags that the run summary
    aggregates (e.g. ``wrapper_missing``, ``unknown_tags``).
    """

    value: Any
    failed: bool = False
    diagnostics: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScoreSheet:
    """Output of a task's scorer: corpus metrics, per-sample values, and how the two connect.

    ``per_sample`` are the values shown per sample (``samples.jsonl`` ``scores``). ``parts`` are
    per-sample *additive statistics* (sparse: an absent key is 0) and ``aggregations`` say, for
    each corpus metric, how it is made from their sums (:mod:`evalpipe.metrics.aggregation`) —
    what bootstrap intervals and comparisons recompute from the run directory alone. Empty
    ``parts`` with non-empty ``aggregations`` means the parts are ``per_sample`` itself.

    ``notes`` says why a metric is absent (e.g. UMLS-concept F1 without scispacy): a metric that
    cannot be computed is left out with a reason, never reported as 0.
    """

    corpus: Mapping[str, float]
    per_sample: Sequence[Mapping[str, float | None]]
    notes: Mapping[str, str] = field(default_factory=dict)
    parts: Sequence[Mapping[str, float | None]] = ()
    aggregations: Mapping[str, Any] = field(default_factory=dict)
    #: metric → why it is a fixed property of the run rather than an estimate (no interval), e.g.
    #: the size of a retrieval pool
    fixed: Mapping[str, str] = field(default_factory=dict)

    def sample_parts(self) -> Sequence[Mapping[str, float | None]]:
        """The additive parts per sample (``per_sample`` when no separate parts were given)."""
        return self.parts if self.parts else self.per_sample


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> tuple[tuple[str, bool], ...]:
    """A dataclass's field names, each with whether it is left out when None (looked up once per class)."""
    return tuple((f.name, bool(f.metadata.get("omit_if_none"))) for f in dataclasses.fields(cls))


#: values :func:`to_jsonable` returns as they are (checked first: they are most of what it sees)
_SCALARS = (str, int, float, type(None))


def to_jsonable(obj: Any) -> Any:
    """Convert records (dataclasses, tuples, mappings) into plain JSON types."""
    if isinstance(obj, _SCALARS):
        return obj
    if isinstance(obj, (list, tuple)):
        return [v if isinstance(v, _SCALARS) else to_jsonable(v) for v in obj]
    if type(obj) is dict:
        return {str(k): (v if isinstance(v, _SCALARS) else to_jsonable(v)) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {name: to_jsonable(getattr(obj, name)) for name, omit_if_none in _fields(type(obj))
                if not (omit_if_none and getattr(obj, name) is None)}
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj) if isinstance(obj, (set, frozenset)) else obj
        return [to_jsonable(v) for v in items]
    return obj
