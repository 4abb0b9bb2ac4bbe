"""How to reach one OpenAI-compatible endpoint: its URL, model, limits and retry timing (no secret)."""

from __future__ import annotations

from dataclasses import dataclass

from evalpipe.backends.base import BackendError
from evalpipe.backends.client import DEFAULT_MAX_BODY_BYTES
from evalpipe.backends.liveness import AFTER_S
from evalpipe.backends.retry import RetryPolicy
from evalpipe.endpoints import redact_url


@dataclass(frozen=True)
class OpenAICompatConfig:
    """Everything needed to talk to one endpoint. Holds no secret: only ``api_key_env``'s name.

    ``base_url`` is the API root including ``/v1`` (``http://localhost:8000/v1``).
    ``timeout_s`` bounds one attempt from start to last byte; ``max_retries`` counts attempts
    after the first. Backoff before retry *n* (1-based) is ``backoff_base_s * 2**(n-1)`` plus up to
    ``backoff_base_s`` of jitter, capped at ``backoff_max_s``; a 429's Retry-After is waited out,
    capped at ``retry_after_max_s``. ``rate_limit_window_s`` is how often a burst of 429s may halve
    the concurrency limit.
    """

    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 64
    timeout_s: float = 120.0
    max_retries: int = 6
    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 60.0
    connect_timeout_s: float = 10.0
    preflight_timeout_s: float = 5.0
    rate_limit_window_s: float = 1.0
    #: stop the run when nothing but failed connections came for this long (0 = never;
    #: :mod:`evalpipe.backends.liveness`)
    unreachable_after_s: float = AFTER_S
    #: the largest reply body read (see :data:`evalpipe.backends.client.DEFAULT_MAX_BODY_BYTES`)
    max_answer_bytes: int = DEFAULT_MAX_BODY_BYTES

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise BackendError(f"base_url must start with http:// or https:// (got {redact_url(self.base_url)!r})")
        if not self.model:
            raise BackendError("model must be set (the name the endpoint serves it under)")
        if self.concurrency < 1:
            raise BackendError(f"concurrency must be at least 1 (got {self.concurrency})")
        if self.max_retries < 0:
            raise BackendError(f"max_retries must be 0 or more (got {self.max_retries})")
        if self.max_answer_bytes < 1:
            raise BackendError(f"max_answer_bytes must be at least 1 (got {self.max_answer_bytes})")
        for name in ("timeout_s", "connect_timeout_s", "preflight_timeout_s"):
            if getattr(self, name) <= 0:
                raise BackendError(f"{name} must be positive (got {getattr(self, name)})")
        for name in ("backoff_base_s", "backoff_max_s", "retry_after_max_s", "rate_limit_window_s",
                     "unreachable_after_s"):
            if getattr(self, name) < 0:
                raise BackendError(f"{name} must not be negative (got {getattr(self, name)})")

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.max_retries, self.backoff_base_s, self.backoff_max_s, self.retry_after_max_s)
