"""Parse and score one task's answers: predictions, corpus metrics, per-sample records, summary.

Shared by a run (fresh and stored answers) and by re-scoring (stored answers only), so both give
the same numbers from the same answers.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evalpipe.config import RunConfig
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Completion, Example, Prediction, to_jsonable
from evalpipe.tasks.base import TaskSpec


@dataclass
class TaskOutcome:
    name: str
    metrics: dict[str, float]
    summary: dict[str, Any]
    records: list[dict[str, Any]] = field(repr=False)



def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def score_task(
    spec: TaskSpec,
    examples: Sequence[Example],
    prompts_json: Sequence[str],
    answers: Sequence[Completion | None],
    compat: str | None,
    options: MetricOptions = MetricOptions(),
    truncated: Sequence[int] | None = None,
    answer_prefix: str = "",
) -> TaskOutcome:
    """Parse every answer, score the corpus, and build per-sample records.

    A sample without an answer (request failed for good, or never sent) is scored with the
    scoring's "no answer" prediction, so its gold items count against the model.
    """
    scoring = spec.scoring(compat)
    predictions: list[Prediction] = []
    for example, completion in zip(examples, answers):
        if completion is None or not completion.ok:
            predictions.append(scoring.empty(example))
        else:
            predictions.append(scoring.parse(answer_prefix + (completion.text or ""), example))
    sheet = scoring.score(examples, predictions, options)

    n = len(examples)
    errors = sum(1 for c in answers if c is None or not c.ok)
    answered = n - errors
    parse_failures = sum(
        1 for c, p in zip(answers, predictions) if c is not None and c.ok and p.failed
    )
    metrics = {k: float(v) for k, v in sheet.corpus.items()}
    metrics["parse_failure_rate"] = parse_failures / answered if answered else 0.0
    metrics["n"] = n
    metrics["errors"] = errors

    truncated = list(truncated) if truncated else [0] * n
    diagnostics: dict[str, float] = {}
    records = []
    for i, (example, completion, prediction) in enumerate(zip(examples, answers, predictions)):
        if completion is not None and completion.ok:
            for key, value in prediction.diagnostics.items():
                if isinstance(value, (bool, int, float)):
                    diagnostics[key] = diagnostics.get(key, 0) + value
        records.append({
            "task": spec.name,
            "id": example.id,
            "prompt": json.loads(prompts_json[i]),
            "answer": completion.text if completion is not None else None,
            "prediction": to_jsonable(prediction.value),
            "parse_failed": prediction.failed if completion is not None and completion.ok else None,
            "gold": to_jsonable(example.gold),
            "scores": dict(sheet.per_sample[i]) if i < len(sheet.per_sample) else {},
            "diagnostics": to_jsonable(prediction.diagnostics),
            "error": None if completion is not None and completion.ok else (
                completion.error if completion is not None else "not sent yet"),
            "usage": to_jsonable(completion.usage) if completion is not None else None,
            "latency_s": completion.latency_s if completion is not None else None,
            "finish_reason": completion.finish_reason if completion is not None else None,
            "attempts": completion.attempts if completion is not None else 0,
            # which server answered (or failed): the replica, as the backend shows it (no credentials)
            "endpoint": completion.endpoint_url if completion is not None else None,
            "truncated_tokens": truncated[i],
            "meta": to_jsonable(example.meta),
        })
    ok = [c for c in answers if c is not None and c.ok]
    latencies = sorted(c.latency_s for c in ok)
    summary = {
        "scoring": compat or "default",
        "diagnostics": diagnostics,
        "parse_failures": parse_failures,
        "prompt_tokens": sum(c.usage.prompt_tokens or 0 for c in ok),
        "completion_tokens": sum(c.usage.completion_tokens or 0 for c in ok),
        "latency_s": {f"p{q}": _percentile(latencies, q) for q in (50, 90, 99)},
        "error_kinds": _error_kinds(answers),
        "not_computed": dict(sheet.notes),
        "truncated_share": sum(1 for t in truncated if t > 0) / n if n else 0.0,
        "truncated_tokens": sum(truncated),
    }
    return TaskOutcome(name=spec.name, metrics=metrics, summary=summary, records=records)


def answer_prefix(spec: TaskSpec, config: RunConfig) -> str:
    """What the completion template primed the answer with (only for ``--endpoint completions``)."""
    return spec.completion_prefix if config.endpoint == "completions" else ""


def _error_kinds(answers: Sequence[Completion | None]) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for c in answers:
        if c is None:
            kinds["not sent"] = kinds.get("not sent", 0) + 1
        elif not c.ok:
            kinds[c.error or "unknown"] = kinds.get(c.error or "unknown", 0) + 1
    return kinds
