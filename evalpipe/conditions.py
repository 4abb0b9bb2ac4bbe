"""Prompt conditions: which prompt variant, how many shots and in which order a task is rendered with.

A run normally renders each task once: its canonical template, its shots in the order they were
selected. ``run --prompt-variants``, ``--shot-orders K`` and ``--shots-sweep`` ask for several
*conditions* of every task instead — the cross product of

* **variants** — the task's canonical template (variant ``default``) and the templates in
  ``prompts/<task>/variants/`` or declared by the task (:func:`evalpipe.prompting.variant_templates`);
* **shot counts** — each count of ``--shots-sweep``; every count takes the *first* k shots of the
  largest count's selection, so counts differ in how many shots there are, never in which;
* **shot orders** — order 0 is the shots as selected, order j ≥ 1 the j-th of a seeded sequence of
  distinct permutations (:func:`shot_permutation`), the same for every variant and count.

Every condition renders every evaluated sample. A condition's prompts are keyed like any prompt
(the cache key is a hash of the prompt), so a prompt two conditions share is asked once, and a
resumed run asks only for what no condition has stored yet. How the results of the conditions
become one task's results is :mod:`evalpipe.variants.robustness`.

**Identity.** A condition's ``id`` names only what differs from the canonical run: ``default``,
``terse``, ``terse/3-shot``, ``default/order-2``. The store's plan of a condition is kept under
:func:`plan_name` (the task's name for the canonical condition, ``task|id`` otherwise), each sample
record carries ``condition``, ``variant``, ``shots`` and ``shot_order``, and ``config.json`` lists
each task's conditions with the shot ids they used. A run that asks for none of this has exactly
the files it always had.

The first condition of a task is its **reference**: variant ``default`` if it was asked for (else
the first variant asked for), the run's own shot count if the sweep holds it (else the sweep's
first), order 0. The reference's metrics are the task's entry in ``metrics.json``, so its numbers
stay comparable with a run made without variants.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evalpipe.prompting import DEFAULT_VARIANT
from evalpipe.errors import UsageError

__all__ = ["ALL_VARIANTS", "CANONICAL", "Condition", "TaskConditions", "plan_name", "shot_permutation",
           "task_conditions"]

#: ``--prompt-variants all``: every variant the task has
ALL_VARIANTS = "all"


@dataclass(frozen=True)
class Condition:
    """One way of prompting a task (see the module docstring)."""

    variant: str = DEFAULT_VARIANT
    #: the shot count taken from ``--shots-sweep``; None = the run's own count (no sweep)
    shots: int | None = None
    #: 0 = the shots in their selected order; j ≥ 1 = the j-th seeded permutation
    order: int = 0

    @property
    def id(self) -> str:
        """What differs from the canonical run: ``terse``, ``terse/3-shot``, ``default/order-2``."""
        parts = [self.variant]
        if self.shots is not None:
            parts.append(f"{self.shots}-shot")
        if self.order:
            parts.append(f"order-{self.order}")
        return "/".join(parts)

    @property
    def canonical(self) -> bool:
        return self == CANONICAL

    def to_json(self) -> dict[str, Any]:
        """``shots`` is the swept count (None without a sweep), as the condition was asked for."""
        return {"id": self.id, "variant": self.variant, "shots": self.shots, "shot_order": self.order}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Condition:
        shots = data.get("shots")
        return cls(variant=str(data.get("variant") or DEFAULT_VARIANT),
                   shots=int(shots) if shots is not None else None, order=int(data.get("shot_order") or 0))


CANONICAL = Condition()


def plan_name(task: str, condition: Condition | None) -> str:
    """Under which name the store keeps a condition's plan: the task's own name for the canonical
    condition (so a run with and without variants share it), ``task|id`` for every other."""
    return task if condition is None or condition.canonical else f"{task}|{condition.id}"


@dataclass(frozen=True)
class TaskConditions:
    """A task's conditions, reference first, and what the user should know about them."""

    conditions: tuple[Condition, ...]
    notes: tuple[str, ...] = ()

    @property
    def varied(self) -> bool:
        """Whether the task is evaluated under anything but its canonical condition."""
        return self.conditions != (CANONICAL,)


def _variants(task: str, asked: Sequence[str], available: Sequence[str]) -> tuple[str, ...]:
    if not asked:
        return (DEFAULT_VARIANT,)
    if ALL_VARIANTS in asked:
        if len(asked) > 1:
            raise UsageError(f"--prompt-variants {ALL_VARIANTS} cannot be combined with names")
        return tuple(available)
    unknown = [name for name in asked if name not in available]
    if unknown:
        raise UsageError(f"task {task} has no prompt variant {unknown[0]!r}; its variants: {', '.join(available)}")
    names = tuple(dict.fromkeys(asked))
    return (DEFAULT_VARIANT, *(n for n in names if n != DEFAULT_VARIANT)) if DEFAULT_VARIANT in names else names


def task_conditions(task: str, available: Sequence[str], variants: Sequence[str] = (), shot_orders: int = 1,
                    shots_sweep: Sequence[int] = (), run_shots: int = 0) -> TaskConditions:
    """The cross product of a task's variants × shot counts × shot orders, reference first.

    ``available``: the task's variant names (``default`` first); ``run_shots``: the shot count the
    run uses without a sweep (``--shots`` or the task's default). Raises ``UsageError`` naming the
    task for a variant it does not have, and for a count or order number below what makes sense.
    """
    if shot_orders < 1:
        raise UsageError("--shot-orders must be at least 1")
    if any(k < 0 for k in shots_sweep):
        raise UsageError("--shots-sweep counts cannot be negative")
    names = _variants(task, variants, available)
    notes: list[str] = []
    if tuple(variants) == (ALL_VARIANTS,) and len(available) == 1:
        notes.append(f"{task}: has no prompt variants; evaluated with its canonical prompt only")
    counts: tuple[int | None, ...] = (None,)
    if shots_sweep:
        unique = tuple(dict.fromkeys(shots_sweep))
        first = run_shots if run_shots in unique else unique[0]
        counts = (first, *(k for k in unique if k != first))
    largest = max((k for k in counts if k is not None), default=run_shots)
    orders = shot_orders
    if shot_orders > 1 and largest < 2:
        notes.append(f"{task}: --shot-orders {shot_orders} ignored: with {largest} shot(s) there is only one order")
        orders = 1
    elif shot_orders > 1:
        few = sorted({k if k is not None else run_shots for k in counts
                      if math.factorial(k if k is not None else run_shots) < shot_orders})
        if few:
            notes.append(f"{task}: {', '.join(map(str, few))} shot(s) have fewer than {shot_orders} distinct orders; "
                         "their orders repeat (the same prompts, answered once), so each order is scored over the "
                         "same counts")
    conditions = tuple(Condition(variant=v, shots=k, order=j) for v in names for k in counts for j in range(orders))
    return TaskConditions(conditions, tuple(notes))


def shot_permutation(k: int, order: int, seed: int | None = None) -> tuple[int, ...]:
    """The positions of ``k`` shots in shot order ``order``.

    Order 0 is the identity (the shots as selected). Orders 1, 2, … are distinct permutations other
    than the identity, drawn from ``random.Random(f"shot-orders:{seed}:{k}")`` — so the same for every
    variant and independent of the evaluated samples. Once all ``k!`` orders are used, the sequence
    repeats from the identity (with fewer than two shots every order is the identity).
    """
    identity = tuple(range(k))
    if order == 0 or k < 2:
        return identity
    rng = random.Random(f"shot-orders:{seed}:{k}")
    seen = {identity}
    drawn: list[tuple[int, ...]] = []
    while len(drawn) < order and len(seen) < math.factorial(k):
        permutation = tuple(rng.sample(range(k), k))
        if permutation not in seen:
            seen.add(permutation)
            drawn.append(permutation)
    if order <= len(drawn):
        return drawn[order - 1]
    cycle = [identity, *drawn]
    return cycle[order % len(cycle)]
