"""What an ``echo`` + ``logprobs`` reply of ``/completions`` says: log-likelihoods of options and of a prompt.

**Log-likelihood of options** (:meth:`evalpipe.backends.openai_compat.OpenAICompatBackend.complete` of a ``Prompt`` with
``choices``): one ``/completions`` request whose ``prompt`` is the list of prompt + continuation
texts, with ``echo`` and ``logprobs`` (as lm-evaluation-harness asks vLLM), ``max_tokens`` 1; each
continuation's log-probability is the sum over the echoed tokens that start at or after the end of
the prompt text (``logprobs.text_offset``) and before its own end. The answer stored is
``{"logprobs": {continuation: sum}, "tokens": {continuation: count}}``. A server that returns no
prompt log-probabilities (no echo, OpenAI's chat-only models, llama.cpp's server) is told apart by
:meth:`~evalpipe.backends.openai_compat.OpenAICompatBackend.check_choice_scoring`, one short probe before a run, with a one-line error.
:meth:`~evalpipe.backends.openai_compat.OpenAICompatBackend.prompt_logprobs` is the same echo request for one text, giving every
token's log-probability (the contamination probe's Min-K % Prob).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalpipe.backends.retry import RequestFailed


def choice_logprobs(data: Any, text: str, choices: Sequence[str]) -> tuple[dict[str, float], dict[str, int]]:
    """Each continuation's summed log-probability (and token count) from an echo + logprobs reply to
    the prompts ``text + choice`` (see the module's docstring). A reply without prompt log-probabilities
    is a failure that another attempt cannot mend; a malformed one may be retried."""
    try:
        rows = sorted(data["choices"], key=lambda c: c.get("index", 0))
    except (KeyError, TypeError, AttributeError):
        raise RequestFailed("unexpected response shape", retryable=True) from None
    if len(rows) != len(choices):
        raise RequestFailed("unexpected response shape", retryable=True,
                            detail=f"{len(rows)} choices for {len(choices)} prompts")
    scores: dict[str, float] = {}
    tokens: dict[str, int] = {}
    start = len(text)
    for row, choice in zip(rows, choices):
        logprobs = row.get("logprobs") if isinstance(row, dict) else None
        offsets = logprobs.get("text_offset") if isinstance(logprobs, dict) else None
        values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
        if not isinstance(offsets, list) or not isinstance(values, list) or len(offsets) != len(values):
            raise RequestFailed("no prompt log-probabilities", retryable=False,
                                detail="the reply has no logprobs.text_offset/token_logprobs for the echoed prompt")
        end = start + len(choice)
        picked = [v for o, v in zip(offsets, values) if isinstance(o, int) and start <= o < end]
        if not picked or any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in picked):
            raise RequestFailed("no prompt log-probabilities", retryable=False,
                                detail=f"no token of the continuation {choice!r} starts after the prompt (is it "
                                "merged into the prompt's last token?)")
        scores[choice] = float(sum(picked))
        tokens[choice] = len(picked)
    return scores, tokens


def prompt_token_logprobs(data: Any, text: str) -> list[float]:
    """The log-probabilities of the echoed tokens of ``text`` (those starting before its end; the
    generated token after it left out), without the first token's null. A reply without them is a
    failure another attempt cannot mend."""
    try:
        logprobs = data["choices"][0].get("logprobs")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise RequestFailed("unexpected response shape", retryable=True) from None
    offsets = logprobs.get("text_offset") if isinstance(logprobs, dict) else None
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(offsets, list) or not isinstance(values, list) or len(offsets) != len(values):
        raise RequestFailed("no prompt log-probabilities", retryable=False,
                            detail="the reply has no logprobs.text_offset/token_logprobs for the echoed prompt")
    picked = [v for o, v in zip(offsets, values) if isinstance(o, int) and o < len(text) and v is not None]
    if not picked or any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in picked):
        raise RequestFailed("no prompt log-probabilities", retryable=False,
                            detail="no log-probability for a token of the echoed prompt")
    return [float(v) for v in picked]

