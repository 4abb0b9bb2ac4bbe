"""One LLM judge's reply as the response store keeps it (table ``judgements``).

Why a record of its own: judging (:mod:`evalpipe.judging`) writes and reads these rows, the
answers' code never does; the store only persists them beside the answers they judge.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class StoredJudgement:
    """One judge reply as the store keeps it (see :meth:`ResponseStore.put_judgement`).

    ``ratings`` is criterion → rating when the reply was usable, else None and ``problem`` says why.
    """

    judge: str
    rubric_sha256: str
    task: str
    sample_id: str
    answer_sha256: str
    attempt: int
    request_key: str
    text: str
    ratings: Mapping[str, int] | None
    problem: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    endpoint: str | None = None
