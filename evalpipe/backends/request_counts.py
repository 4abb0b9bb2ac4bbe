"""What an OpenAI-compatible backend counts while it runs: the run summary's per-replica statistics."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RequestCounts:
    """Mutable tallies behind :meth:`OpenAICompatBackend.stats`."""

    requests_sent: int = 0
    successes: int = 0
    failures: int = 0
    retries: int = 0
    rate_limited: int = 0
    empty_answers: int = 0
    invalid_unicode_answers: int = 0
    #: answers that held a credential (stored with ``***`` in its place)
    scrubbed_answers: int = 0
    #: replies whose token usage was impossible (stored without usage)
    invalid_usage: int = 0
    chat_prompts: int = 0
    #: the endpoint refused max_tokens and is sent max_completion_tokens (see complete())
    adapted_max_completion_tokens: bool = False
    completions_prompts: int = 0
    #: log-likelihood requests (a prompt's options scored as continuations)
    choice_prompts: int = 0
    token_counts: int = 0
