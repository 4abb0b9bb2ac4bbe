"""Every registered task's fixture examples with scripted answers, for the chunked-scoring tests.

The examples are the golden fixture runs' (tests/golden/fixture_runs.py: the same data files and
load options); the answers are that module's scripted answers (the gold answer half of the time,
else an item dropped or altered, text cut short, another example's gold, chatty prose, a refusal,
an empty answer, a failed request), chosen by crc32 of the task and sample id instead of the
prompt (nothing is rendered here), plus samples never answered and unparseable answers. Each
answer carries usage, a latency and some samples a truncation count, so the summary's sums are
exercised too.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from evalpipe.records import Completion, Example, Usage
from evalpipe.tasks.base import TaskSpec, materialize
from evalpipe.tasks.registry import get_task
from tests.golden import fixture_runs as golden

#: at most this many samples per task (enough for chunks of 7 to split every task several times)
LIMIT = 40
GARBAGE = "%%% <<<not an answer>>> ###"


@dataclass(frozen=True)
class TaskSamples:
    spec: TaskSpec
    examples: tuple[Example, ...]
    keys: tuple[str, ...]
    answers: tuple[Completion | None, ...]
    truncated: tuple[int, ...]


def _bucket(task: str, example: Example, salt: str = "") -> int:
    return zlib.crc32(f"{task}|{example.id}|{salt}".encode("utf-8"))


def _completion(answer: str | Exception | None, seed: int) -> Completion | None:
    if answer is None:
        return None
    latency = 0.05 + (seed % 997) / 1000.0
    if isinstance(answer, Exception):
        return Completion(text=None, error=str(answer), attempts=3, latency_s=latency)
    return Completion(text=answer, finish_reason="stop", usage=Usage(100 + seed % 50, 10 + seed % 7),
                      latency_s=latency)


def scripted_answers(spec: TaskSpec, examples: tuple[Example, ...]) -> tuple[Completion | None, ...]:
    golds = [spec.shot_target(ex) for ex in examples]
    out = []
    for i, ex in enumerate(examples):
        seed = _bucket(spec.name, ex)
        # every task gets at least one failed request, one never sent and one unparseable answer
        kind = {3: 19, 4: 20, 5: 22}.get(i, seed % 24)
        candidate = golden.Candidate(spec.name, i, (), golds[i], golds[(i + 1) % len(golds)])
        if kind < len(golden.ANSWERS):
            answer: str | Exception | None = golden.ANSWERS[kind](candidate)
        elif kind in (20, 21):
            answer = None  # never sent
        else:
            answer = GARBAGE
        out.append(_completion(answer, seed))
    return tuple(out)


def logprob_answers(spec: TaskSpec, examples: tuple[Example, ...]) -> tuple[Completion | None, ...]:
    """Log-likelihood answers of a multiple-choice task: mostly the gold letter best, some another,
    some ties, some not JSON, some failed or missing."""
    assert spec.choice_scoring is not None
    out = []
    for ex in examples:
        seed = _bucket(spec.name, ex, "logprobs")
        continuations = spec.choice_scoring.continuations(ex)
        kind = seed % 10
        if kind == 7:
            out.append(_completion(GARBAGE, seed))
            continue
        if kind == 8:
            out.append(_completion(RuntimeError("HTTP 429"), seed))
            continue
        if kind == 9:
            out.append(None)
            continue
        best = f" {ex.gold}" if kind < 5 else continuations[seed % len(continuations)]
        scores = {c: -3.0 - (seed % 5) / 10 for c in continuations}
        scores[best] = -0.5
        if kind == 6:
            scores[continuations[0]] = -0.5  # a tie
        out.append(_completion(json.dumps({"logprobs": scores}), seed))
    return tuple(out)


def ranking_answers(spec: TaskSpec, examples: tuple[Example, ...]) -> tuple[Completion | None, ...]:
    """A retrieval task's answers (``{"top": [pool positions]}``): the gold at some rank, or absent,
    some not a ranking, failed or missing."""
    assert spec.ranking is not None
    depth = spec.ranking.depth
    out = []
    for i, ex in enumerate(examples):
        seed = _bucket(spec.name, ex, "ranking")
        kind = {3: 10, 4: 11, 5: 9}.get(i, seed % 12)
        if kind == 9:
            out.append(_completion(GARBAGE, seed))
        elif kind == 10:
            out.append(_completion(RuntimeError("timeout"), seed))
        elif kind == 11:
            out.append(None)
        else:
            top = [ex.gold.index + 1000 + j for j in range(depth)]
            if kind < 8:
                top[kind % depth] = ex.gold.index
            out.append(_completion(json.dumps({"top": top}), seed))
    return tuple(out)


@cache
def _runs(root: str) -> dict[str, golden.FixtureRun]:
    data = golden.write_fixture_data(Path(root) / "data")
    return {task: run for run in golden.fixture_runs(data) for task in run.config.tasks}


def task_names() -> list[str]:
    """Every task of the golden fixture runs (= every registered task)."""
    from evalpipe.tasks.registry import all_tasks

    return sorted(all_tasks())


def load_samples(root: Path, task: str, loglikelihood: bool = False) -> TaskSamples:
    run = _runs(str(root))[task]
    spec = get_task(task)
    if loglikelihood:
        spec = spec.scored_by("loglikelihood")
    options = golden.load_options(run.config, task)
    data = spec.load(options)
    examples = materialize(data.examples)[:LIMIT]
    # a small fixture file is repeated under new ids (and so new answers) up to LIMIT samples, so that
    # chunks of 7 split every task several times
    examples += tuple(replace(examples[i % len(examples)], id=f"{examples[i % len(examples)].id}~{i}")
                      for i in range(len(examples), LIMIT))
    if spec.ranking is not None:  # a retrieval task: each gold bound to its pool position, as a run does
        examples = spec.ranking.plan(data, examples, options).examples
        answers = ranking_answers(spec, examples)
    elif loglikelihood:
        answers = logprob_answers(spec, examples)
    else:
        answers = scripted_answers(spec, examples)
    keys = tuple(f"key-{task}-{i}" for i in range(len(examples)))
    truncated = tuple((_bucket(task, ex, "cut") % 40) if _bucket(task, ex, "cut") % 5 == 0 else 0
                      for ex in examples)
    return TaskSamples(spec, examples, keys, answers, truncated)


def chunked(samples: TaskSamples, size: int) -> Iterator[tuple[int, int]]:
    """(start, end) of consecutive chunks of ``size`` samples."""
    for start in range(0, len(samples.examples), size):
        yield start, min(start + size, len(samples.examples))
