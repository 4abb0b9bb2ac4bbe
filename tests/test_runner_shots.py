"""Shots are never evaluated examples, whether the overlap is learnt in its own pass or while rendering."""

from __future__ import annotations

import json
import re

from evalpipe.config import RunConfig
from evalpipe.pipeline.stage import PlanStage
from evalpipe.records import to_jsonable
from evalpipe.pipeline.prepare import prepare


def _sentence(i: int) -> str:
    return f"patient{i}\tO\nhas\tO\ncancer\tB-Disease\n\n"


def _prepared(tmp_path, **options):
    test = tmp_path / "test.tsv"
    test.write_text("".join(_sentence(i) for i in range(40)))
    pool = tmp_path / "pool.tsv"  # the evaluated sentences again, and six others
    pool.write_text("".join(_sentence(i) for i in range(40)) + "".join(_sentence(100 + i) for i in range(6)))
    config = RunConfig(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:9/v1", fewshot_seed=3,
                       data={"ncbi_disease": str(test), "ncbi_disease:shots": str(pool)}, **options)
    (task,) = prepare(config, stage=PlanStage(tmp_path / "stage"))
    return task


def test_a_pool_that_holds_the_evaluated_sentences_gives_only_the_others_as_shots(tmp_path):
    fused = _prepared(tmp_path)  # every example rendered: the overlap is learnt while rendering
    apart = _prepared(tmp_path, limit=40)  # a subset: the overlap is read in a pass of its own
    assert {s.inputs["tokens"][0] for s in fused.shots} <= {f"patient{100 + i}" for i in range(6)}
    assert fused.shots == apart.shots and len(fused.shots) == 5
    assert list(fused.keys()) == list(apart.keys())
    for i, prompt in enumerate(fused.prompts):  # each prompt shows its own sentence and the five shots only
        named = {int(n) for n in re.findall(r"patient(\d+)\b", json.dumps(to_jsonable(prompt)))}
        assert named == {i} | {int(s.inputs["tokens"][0][7:]) for s in fused.shots}


def test_the_shots_drawn_first_stand_when_the_pool_shares_nothing(tmp_path):
    task = _prepared(tmp_path, shots=0)
    assert task.shots == () and task.size == 40
