"""Few-shot examples chosen so that no shot is also an evaluated example, in as few passes as possible.

A shot that is also a test item leaks its answer, so the pool's overlap with the evaluated examples
(same id, or the same inputs) is learnt before the shots are final; where every example is rendered
anyway the rendering pass learns it (:func:`shots_and_render`), so a large task is read once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from evalpipe.config import RunConfig
from evalpipe.outcome import RunError
from evalpipe.pipeline.prepared import PreparedTask
from evalpipe.prompting import inputs_fingerprint, select_shots
from evalpipe.records import Example
from evalpipe.tasks.base import Examples, TaskData, TaskSpec


class _PoolOverlap:
    """Which evaluated examples are also in the shot pool (same id, or same inputs: a shot that is
    also a test item leaks its answer), learnt as the examples stream by. Only the pool's ids and
    input fingerprints are held (fingerprints serialise every input — LongHealth: tens of MB — so
    only when shots are drawn)."""

    def __init__(self, pool: Sequence[Example], fingerprints: bool) -> None:
        self.pool_ids = {ex.id for ex in pool}
        self.pool_prints = {inputs_fingerprint(ex) for ex in pool} if fingerprints and pool else set()
        self.ids: set[str] = set()
        self.prints: set[str] = set()

    def see(self, example: Example) -> None:
        if example.id in self.pool_ids:
            self.ids.add(example.id)
        if self.pool_prints:
            fingerprint = inputs_fingerprint(example)
            if fingerprint in self.pool_prints:
                self.prints.add(fingerprint)


def _choose_shots(spec: TaskSpec, config: RunConfig, data: TaskData, k: int,
                  overlap: _PoolOverlap | None) -> tuple[Example, ...]:
    seed = config.fewshot_seed if config.fewshot_seed is not None else spec.fewshot_seed
    try:
        return select_shots(data.shot_pool, k, seed, overlap.ids if overlap else set(),
                            overlap.prints if overlap else set())
    except ValueError as exc:
        raise RunError(f"task {spec.name}: {exc}") from None


def _select_shots(spec: TaskSpec, config: RunConfig, data: TaskData, k: int) -> tuple[Example, ...]:
    """``k`` shots from the task's pool, none of them an evaluated example (a pass over the data)."""
    overlap = _PoolOverlap(data.shot_pool, fingerprints=k > 0)
    if overlap.pool_ids and k > 0:
        for example in data.examples:
            overlap.see(example)
    return _choose_shots(spec, config, data, k, overlap)


def shots_and_render(spec: TaskSpec, config: RunConfig, data: TaskData, examples: Examples, k: int,
                      render: Callable[[tuple[Example, ...], Callable[[Example], None] | None], PreparedTask],
                      ) -> tuple[tuple[Example, ...], PreparedTask]:
    """Select the shots and render the first prompts with them, in as few passes over the data as
    the selection allows.

    Where every evaluated example is rendered (no ``--limit``/``--ids``), the pass that renders
    also learns which examples the pool shares: the shots drawn as if it shared none are right
    unless it does, and then (rarely: one file given as both test and shot file) they are drawn
    again and the prompts rendered again. Otherwise the data is read once for the overlap first.
    """
    if k == 0 or not data.shot_pool:
        shots = _choose_shots(spec, config, data, k, None)
        return shots, render(shots, None)
    if config.limit is not None or config.ids is not None:
        shots = _select_shots(spec, config, data, k)
        return shots, render(shots, None)
    overlap = _PoolOverlap(data.shot_pool, fingerprints=True)
    guess = _choose_shots(spec, config, data, k, None)
    prepared = render(guess, overlap.see)
    if not (overlap.ids or overlap.prints):
        return guess, prepared
    shots = _choose_shots(spec, config, data, k, overlap)
    return shots, (prepared if shots == guess else render(shots, None))
