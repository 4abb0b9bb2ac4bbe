"""A chunk of one task's samples, parsed and scored: the unit the scoring fold consumes.

Parsing is per sample (a parser sees one answer and its example), so every chunk is parsed as it
comes, whatever the scoring; only a *samplewise* scoring (:attr:`evalpipe.tasks.base.Scoring.samplewise`)
is also scored chunk by chunk — a corpus scoring waits for all its chunks (:mod:`evalpipe.scoring.fold`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe.config import RunConfig
from evalpipe.coverage import is_answered, spread
from evalpipe.metrics.options import MetricOptions
from evalpipe.records import Completion, Example, Prediction, ScoreSheet
from evalpipe.scoring.parts import SampleParts
from evalpipe.tasks.base import Scoring, TaskSpec


@dataclass(frozen=True)
class ScoringChunk:
    """Consecutive samples of one task: examples with their request keys, answers (None: not
    answered yet) and tokens cut from their prompts (empty: none cut)."""

    examples: Sequence[Example]
    keys: Sequence[str]
    answers: Sequence[Completion | None]
    truncated: Sequence[int] = ()

    def __post_init__(self) -> None:
        n = len(self.examples)
        if len(self.keys) != n or len(self.answers) != n or (self.truncated and len(self.truncated) != n):
            raise ValueError(f"a scoring chunk of {n} examples has {len(self.keys)} keys, {len(self.answers)} "
                             f"answers and {len(self.truncated)} truncation counts")

    def cut_tokens(self) -> Sequence[int]:
        return self.truncated if self.truncated else [0] * len(self.examples)


#: the chunks of one task, read again each time it is called (the same chunks, in the same order)
Chunks = Callable[[], Iterable[ScoringChunk]]


@dataclass(frozen=True)
class ScoredChunk:
    """One chunk parsed — and, for a samplewise scoring, scored: what its records are made of.

    ``sheet`` is the scorer's on the chunk's answered samples only (None when it has none, or when
    the chunk was only parsed): its rows are put back among the chunk's samples by :meth:`parts`
    and :meth:`per_sample`."""

    predictions: list[Prediction]
    answered: list[bool]
    failed: list[bool]
    sheet: ScoreSheet | None = None

    def parts(self) -> list[SampleParts]:
        rows = spread(self.sheet.sample_parts(), self.answered, {}) if self.sheet is not None else \
            [{}] * len(self.answered)
        return [SampleParts(row, ok, failed) for row, ok, failed in zip(rows, self.answered, self.failed)]

    def per_sample(self) -> list[Mapping[str, Any]]:
        if self.sheet is None:
            return [{} for _ in self.answered]
        return spread(self.sheet.per_sample, self.answered, {})


def parse_chunk(scoring: Scoring, chunk: ScoringChunk, prefix: str) -> ScoredChunk:
    """Every answer of ``chunk`` parsed (a sample without an answer gets the "no answer" prediction)."""
    predictions = predict(scoring, chunk.examples, chunk.answers, prefix)
    answered = [is_answered(c) for c in chunk.answers]
    return ScoredChunk(predictions, answered, [ok and p.failed for ok, p in zip(answered, predictions)])


def score_chunk(scoring: Scoring, chunk: ScoringChunk, options: MetricOptions, prefix: str) -> ScoredChunk:
    """``chunk`` parsed and scored on its own (meaningful for a samplewise scoring only)."""
    parsed = parse_chunk(scoring, chunk, prefix)
    if not any(parsed.answered):
        return parsed
    sheet = score_answered(scoring, chunk.examples, parsed.predictions, parsed.answered, options)
    return ScoredChunk(parsed.predictions, parsed.answered, parsed.failed, sheet)


def score_answered(scoring: Scoring, examples: Sequence[Example], predictions: Sequence[Prediction],
                   answered: Sequence[bool], options: MetricOptions) -> ScoreSheet:
    """The scorer on the answered samples only (the policy of :mod:`evalpipe.coverage`).

    With none answered, the scorer still runs once on every sample's "no answer" prediction, only
    to learn which metrics the task reports (many scorers refuse an empty corpus); its values are
    then discarded (None), never reported."""
    if any(answered):
        return scoring.score([e for e, ok in zip(examples, answered) if ok],
                             [p for p, ok in zip(predictions, answered) if ok], options)
    if not examples:
        return ScoreSheet(corpus={}, per_sample=[])
    return scoring.score(examples, predictions, options)


def predict(scoring: Scoring, examples: Sequence[Example], answers: Sequence[Completion | None],
            answer_prefix: str) -> list[Prediction]:
    """Each answer parsed; a sample without an answer gets the scoring's "no answer" prediction."""
    predictions: list[Prediction] = []
    for example, completion in zip(examples, answers):
        if completion is None or not completion.ok:
            predictions.append(scoring.empty(example))
        else:
            predictions.append(scoring.parse(answer_prefix + (completion.text or ""), example))
    return predictions


def answer_prefix(spec: TaskSpec, config: RunConfig) -> str:
    """What the completion template primed the answer with (only for ``--endpoint completions``)."""
    return spec.completion_prefix if config.endpoint == "completions" else ""


def error_kinds(answers: Sequence[Completion | None]) -> dict[str, int]:
    """How many samples went without an answer, by why (``not sent`` for one never sent)."""
    kinds: dict[str, int] = {}
    for c in answers:
        if c is None:
            kinds["not sent"] = kinds.get("not sent", 0) + 1
        elif not c.ok:
            kinds[c.error or "unknown"] = kinds.get(c.error or "unknown", 0) + 1
    return kinds
