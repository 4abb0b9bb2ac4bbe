"""What a run's answers cost in USD, from the tokens the endpoint reported (issue 25).

**Prices** are USD per million tokens: ``input``, ``output``, optionally ``cached_input`` (the price
of ``usage.prompt_tokens_details.cached_tokens``; default: the input price) and ``batch_discount``
(the share taken off answers that came by the Batch API: OpenAI's is 0.5). They come from
``--price-input``/``--price-output``/``--price-cached``/``--batch-discount`` or a ``--prices`` file
(JSON or YAML: ``{model: {input: …, output: …, cached_input: …, batch_discount: …}}``; the flags
win over the file), and are recorded in ``config.json`` — never part of the run's identity.

**Cost of one answer** = ((prompt − cached) × input + cached × cached_input + completion × output)
/ 10⁶, times (1 − batch_discount) for an answer that came by batch. Reasoning tokens are part of
``completion_tokens`` and billed as output, as the APIs bill them. An answer whose endpoint reported
no usage costs 0 and is counted (``answers_without_usage``).

**Per task** (``metrics.json``): ``cost_usd``, the cost of the task's answers — each distinct request
once, wherever and whenever it was answered — and, where the endpoint reports them,
``reasoning_tokens`` and ``cached_tokens``. **Per run** (``summary.json`` ``run.cost``): the cost of the
answers, and the cost of *this invocation* (answers stored since it began: answers found in the
store cost nothing new), with the prices used. Computed from the store, so ``evalpipe score``
reports the same numbers without a model.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["PriceError", "Prices", "TokenTotals", "resolve_prices", "task_costs"]

_MILLION = 1_000_000


class PriceError(ValueError):
    """A price that cannot be used: one line naming the file, model or option and the field."""


@dataclass(frozen=True)
class Prices:
    input: float
    output: float
    cached_input: float | None = None
    batch_discount: float = 0.0
    #: where the prices came from ("--price-input/--price-output", or the file)
    source: str = "options"

    def answer_cost(self, prompt: int, completion: int, cached: int, batch: bool) -> float:
        """USD of one answer (or of summed tokens of answers alike in ``batch``): the module docstring's formula."""
        cached = min(cached, prompt)
        cached_price = self.input if self.cached_input is None else self.cached_input
        usd = ((prompt - cached) * self.input + cached * cached_price + completion * self.output) / _MILLION
        return usd * (1.0 - self.batch_discount) if batch else usd

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Prices | None:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__}) if data else None


def _number(value: Any, where: str, *, share: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise PriceError(f"{where}: expected a number >= 0, got {value!r}")
    if share and value > 1:
        raise PriceError(f"{where}: a share between 0 and 1 (0.5 = half price), got {value!r}")
    return float(value)


def _read_file(path: Path, model: str) -> dict[str, Any]:
    """The entry of ``model`` in a prices file (JSON, or YAML by its suffix)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PriceError(f"--prices {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except ValueError as exc:
        raise PriceError(f"--prices {path}: not valid {'YAML' if path.suffix.lower() in ('.yaml', '.yml') else 'JSON'}"
                         f" ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, Mapping) or not all(isinstance(v, Mapping) for v in data.values()):
        raise PriceError(f"--prices {path}: expected {{model: {{input: …, output: …}}}}")
    if model not in data:
        known = ", ".join(map(str, list(data)[:20])) or "no model"
        raise PriceError(f"--prices {path}: no entry for model {model!r} (it has: {known})")
    entry = dict(data[model])
    unknown = [k for k in entry if k not in ("input", "output", "cached_input", "batch_discount")]
    if unknown:
        raise PriceError(f"--prices {path}: {model}.{unknown[0]}: unknown field (fields: input, output, "
                         "cached_input, batch_discount)")
    return entry


def resolve_prices(model: str, price_input: float | None, price_output: float | None, price_cached: float | None,
                   prices_file: Path | None, batch_discount: float | None) -> Prices | None:
    """The prices of ``model`` from the options and the file (options win); None when none is given."""
    entry = _read_file(prices_file, model) if prices_file is not None else {}
    where = f"--prices {prices_file}: {model}." if prices_file is not None else "--"
    given = {"input": price_input, "output": price_output, "cached_input": price_cached,
             "batch_discount": batch_discount}
    for name, value in given.items():
        if value is not None:
            entry[name] = value
    if not entry:
        return None
    for name in ("input", "output"):
        if name not in entry:
            flag = "--price-input" if name == "input" else "--price-output"
            raise PriceError(f"{where}{name}: missing — give both an input and an output price ({flag})")
    return Prices(
        input=_number(entry["input"], f"{where}input"),
        output=_number(entry["output"], f"{where}output"),
        cached_input=_number(entry["cached_input"], f"{where}cached_input") if entry.get("cached_input") is not None
        else None,
        batch_discount=_number(entry.get("batch_discount", 0.0), f"{where}batch_discount", share=True),
        source=str(prices_file) if prices_file is not None else "options",
    )


@dataclass
class TokenTotals:
    """Token sums of a set of answers, split by how they were answered (batch or direct) and when
    (stored since ``since`` — this invocation — or before)."""

    answers: int = 0
    without_usage: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    reported_cached: bool = False
    reported_reasoning: bool = False
    cost_usd: float = 0.0
    cost_usd_this_invocation: float = 0.0


#: the token sums of a task's answers, each stored answer once however many samples ask it (``IN``
#: is set membership: a DISTINCT in the subquery only built a second temporary index, 0.57 -> 0.39 s
#: at 94,000 answers)
_QUERY = """
SELECT COUNT(*), SUM(r.prompt_tokens IS NULL AND r.completion_tokens IS NULL),
       COALESCE(SUM(r.prompt_tokens), 0), COALESCE(SUM(r.completion_tokens), 0),
       COALESCE(SUM(json_extract(r.extra, '$.cached_tokens')), 0),
       COALESCE(SUM(json_extract(r.extra, '$.reasoning_tokens')), 0),
       MAX(json_extract(r.extra, '$.cached_tokens') IS NOT NULL),
       MAX(json_extract(r.extra, '$.reasoning_tokens') IS NOT NULL),
       json_extract(r.extra, '$.batch_id') IS NOT NULL AS by_batch, r.created >= ? AS now
FROM responses r WHERE r.key IN (SELECT key FROM plan WHERE task IN ({plans}))
GROUP BY by_batch, now
"""


def task_costs(store_path: Path, plans: Mapping[str, Sequence[str]], prices: Prices | None,
               since: float | None) -> dict[str, TokenTotals]:
    """Task → the token sums and cost of its answers (``plans``: task → its plan names); ``since``:
    when this invocation began (None: a re-scoring, which sent nothing)."""
    db = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    try:
        out: dict[str, TokenTotals] = {}
        for task, names in plans.items():
            totals = TokenTotals()
            query = _QUERY.format(plans=",".join("?" * len(names)))
            for (count, no_usage, prompt, completion, cached, reasoning, has_cached, has_reasoning, by_batch,
                 now) in db.execute(query, (since if since is not None else math.inf, *names)):
                totals.answers += count
                totals.without_usage += no_usage or 0
                totals.prompt_tokens += prompt
                totals.completion_tokens += completion
                totals.cached_tokens += cached
                totals.reasoning_tokens += reasoning
                totals.reported_cached |= bool(has_cached)
                totals.reported_reasoning |= bool(has_reasoning)
                if prices is not None:
                    usd = prices.answer_cost(prompt, completion, cached, bool(by_batch))
                    totals.cost_usd += usd
                    totals.cost_usd_this_invocation += usd if now else 0.0
            out[task] = totals
        return out
    finally:
        db.close()


#: why the cost and token metrics have no interval in the report
NO_INTERVAL = "a sum over the run's answers (tokens × prices), not an estimate"


def attach_costs(tasks: Sequence[Any], totals: Mapping[str, TokenTotals], prices: Prices | None) -> dict[str, Any]:
    """Add ``cost_usd`` (with prices), ``reasoning_tokens`` and ``cached_tokens`` (where reported) to
    each task outcome's metrics, from :func:`task_costs`' ``totals``; the run's ``cost`` section for
    ``summary.json`` (empty when there is nothing to say)."""
    for task in tasks:
        found = totals.get(task.name)
        if found is None:
            continue
        added: dict[str, float] = {}
        if prices is not None:
            added["cost_usd"] = found.cost_usd
        if found.reported_reasoning:
            added["reasoning_tokens"] = float(found.reasoning_tokens)
        if found.reported_cached:
            added["cached_tokens"] = float(found.cached_tokens)
        task.metrics.update(added)
        no_interval = getattr(task.summary, "no_interval", None)
        if isinstance(no_interval, dict):
            no_interval.update({name: NO_INTERVAL for name in added})
    if prices is None:
        return {}
    return {
        "prices_usd_per_million_tokens": prices.to_json(),
        "answers_usd": sum(t.cost_usd for t in totals.values()),
        "this_invocation_usd": sum(t.cost_usd_this_invocation for t in totals.values()),
        "answers_without_usage": sum(t.without_usage for t in totals.values()),
        "tasks": {name: {"cost_usd": t.cost_usd, "this_invocation_usd": t.cost_usd_this_invocation,
                         "answers": t.answers, "prompt_tokens": t.prompt_tokens,
                         "completion_tokens": t.completion_tokens, "cached_tokens": t.cached_tokens,
                         "reasoning_tokens": t.reasoning_tokens}
                  for name, t in totals.items()},
    }
