"""Conditions: identities, the cross product of variants × shot counts × shot orders, seeded orders."""

from __future__ import annotations

import math

import pytest

from evalpipe.variants.conditions import CANONICAL, Condition, plan_name, shot_permutation, task_conditions
from evalpipe.config import RunConfig

AVAILABLE = ["default", "concise", "guidelines"]


def test_ids_and_plan_names_name_only_what_differs():
    assert CANONICAL.id == "default" and CANONICAL.canonical
    assert Condition("concise").id == "concise"
    assert Condition("concise", shots=3, order=2).id == "concise/3-shot/order-2"
    assert Condition(shots=0).id == "default/0-shot" and not Condition(shots=0).canonical
    assert plan_name("t", None) == plan_name("t", CANONICAL) == "t"
    assert plan_name("t", Condition("concise", order=1)) == "t|concise/order-1"
    c = Condition("concise", shots=3, order=2)
    assert Condition.from_json(c.to_json()) == c


def test_the_cross_product_with_the_reference_first():
    asked = task_conditions("t", AVAILABLE, ("guidelines", "default"), shot_orders=2, shots_sweep=(0, 5), run_shots=5)
    assert [c.id for c in asked.conditions] == [
        "default/5-shot", "default/5-shot/order-1", "default/0-shot", "default/0-shot/order-1",
        "guidelines/5-shot", "guidelines/5-shot/order-1", "guidelines/0-shot", "guidelines/0-shot/order-1"]
    assert asked.varied
    # 0 shots have a single order: its "orders" repeat the same prompts, and the user is told
    assert len(asked.notes) == 1 and asked.notes[0].startswith("t: 0 shot(s) have fewer than 2 distinct orders")


def test_all_variants_and_nothing_asked():
    assert [c.variant for c in task_conditions("t", AVAILABLE, ("all",)).conditions] == AVAILABLE
    assert task_conditions("t", AVAILABLE).conditions == (CANONICAL,)
    lone = task_conditions("t", ["default"], ("all",))
    assert not lone.varied and lone.notes == ("t: has no prompt variants; evaluated with its canonical prompt only",)
    assert not task_conditions("t", AVAILABLE, ("default",)).varied
    # without default asked, the first variant named is the reference
    assert [c.id for c in task_conditions("t", AVAILABLE, ("guidelines", "concise")).conditions] == [
        "guidelines", "concise"]


def test_bad_requests_name_the_task_and_what_it_has():
    with pytest.raises(ValueError, match="task t has no prompt variant 'x'; its variants: default, concise, guidelines"):
        task_conditions("t", AVAILABLE, ("x",))
    with pytest.raises(ValueError, match="cannot be combined"):
        task_conditions("t", AVAILABLE, ("all", "concise"))
    with pytest.raises(ValueError, match="at least 1"):
        task_conditions("t", AVAILABLE, shot_orders=0)
    with pytest.raises(ValueError, match="negative"):
        task_conditions("t", AVAILABLE, shots_sweep=(-1,))


def test_orders_of_fewer_than_two_shots_collapse_and_too_few_distinct_orders_are_noted():
    zero = task_conditions("t", AVAILABLE, shot_orders=3, run_shots=1)
    assert zero.conditions == (CANONICAL,) and "only one order" in zero.notes[0]
    few = task_conditions("t", AVAILABLE, shot_orders=3, run_shots=2)
    assert len(few.conditions) == 3 and "fewer than 3 distinct orders" in few.notes[0]


def test_shot_permutations_are_seeded_distinct_and_cycle():
    assert shot_permutation(5, 0, None) == (0, 1, 2, 3, 4)
    drawn = [shot_permutation(5, j, None) for j in range(1, 6)]
    assert len(set(drawn)) == 5 and (0, 1, 2, 3, 4) not in drawn
    assert all(sorted(p) == [0, 1, 2, 3, 4] for p in drawn)
    assert drawn == [shot_permutation(5, j, None) for j in range(1, 6)]  # deterministic
    assert drawn != [shot_permutation(5, j, 7) for j in range(1, 6)]  # the seed matters
    # the j-th order does not depend on how many orders were asked for
    assert shot_permutation(5, 2, None) == drawn[1]
    # 3 shots have 3! = 6 orders: order 6 is the identity again, order 7 the first drawn
    assert len({shot_permutation(3, j, 0) for j in range(6)}) == math.factorial(3)
    assert shot_permutation(3, 6, 0) == (0, 1, 2) and shot_permutation(3, 7, 0) == shot_permutation(3, 1, 0)
    assert shot_permutation(1, 4, 0) == (0,) and shot_permutation(0, 2, 0) == ()


def test_condition_options_are_not_part_of_the_run_identity_and_are_recorded_only_when_used():
    plain = RunConfig(tasks=("t",), model="m")
    varied = RunConfig(tasks=("t",), model="m", prompt_variants=("all",), shot_orders=3, shots_sweep=(0, 1))
    assert plain.default_run_name() == varied.default_run_name()
    assert not {"prompt_variants", "shot_orders", "shots_sweep"} & set(plain.to_json())
    recorded = varied.to_json()
    assert (recorded["prompt_variants"], recorded["shot_orders"], recorded["shots_sweep"]) == (["all"], 3, [0, 1])
    assert RunConfig.from_json(recorded) == varied and varied.has_conditions and not plain.has_conditions
