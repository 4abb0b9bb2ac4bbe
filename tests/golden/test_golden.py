"""Golden metrics: fixture runs of every task, in every scoring, give the committed bytes.

The safety net for refactors (issue 10, 11): a refactor never changes a user's numbers nor the
prompts a task renders. ``fixture_runs.generate`` runs every registered task on fixture data with a
deterministic scripted model and re-scores each run in every scoring; every file must equal its
copy under ``tests/golden/expected/`` byte for byte. To change a golden file on purpose, see
``tests/golden/README.md``.

The comparison is structural: both files are parsed and compared task by task and metric by metric,
exactly — but for metrics a neural model computes (:func:`tolerance`: BERTScore, and what is made
from it, embedding retrieval), which may differ by |Δ| ≤ 1e-6 (:data:`MODEL_TOLERANCE`): torch and
BLAS pick their SIMD kernels by CPU, and a kernel with another summation order moves a float in its
8th digit (seen: a CPU with AVX-512/AMX). Everything else is arithmetic on counts and must be
equal; files whose values are all equal must also be byte-identical (key order, formatting).
The runs are still made in a child process with ``PYTHONHASHSEED=0`` (fixture_runs.HASH_SEED):
bert-score batches texts in ``set`` order, which moves MeQSum's BERTScore by ~1e-9 with the seed.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.golden.fixture_runs import EXPECTED, Produced, covered, load

REPO_ROOT = Path(__file__).resolve().parents[2]

GOLDEN = sorted(p.relative_to(EXPECTED).as_posix() for p in EXPECTED.glob("*/*.json"))


@pytest.fixture(scope="module")
def produced(tmp_path_factory) -> list[Produced]:
    """Made in a child process, which fixes Python's hash seed (see fixture_runs.HASH_SEED)."""
    out = tmp_path_factory.mktemp("golden")
    done = subprocess.run([sys.executable, "-m", "tests.golden.fixture_runs", "--out", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"the fixture runs failed:\n{done.stderr[-4000:]}"
    return load(out)


def test_the_golden_files_are_the_files_produced(produced):
    made = {p.path for p in produced}
    assert made == set(GOLDEN), (f"produced but not golden: {sorted(made - set(GOLDEN))}; "
                                 f"golden but not produced: {sorted(set(GOLDEN) - made)} (see tests/golden/README.md)")


#: how far a metric computed by a neural model may move between machines (see the module docstring)
MODEL_TOLERANCE = 1e-6
#: metrics computed by a neural model or from its embeddings: BERTScore (and the CLUE level scores
#: made from it, whose keys name it), and every metric of the embedding-retrieval task
_MODEL_METRIC = re.compile(r"bertscore")
_MODEL_TASKS = frozenset({"huatuo_retrieval"})


def tolerance(task: str, metric: str) -> float:
    """|Δ| allowed for ``metric`` of ``task`` (a task or suite of a metrics file): 0 but for model-computed ones."""
    return MODEL_TOLERANCE if task in _MODEL_TASKS or _MODEL_METRIC.search(metric) else 0.0


def differences(golden: Any, made: Any) -> list[str]:
    """Each (task, metric) whose produced value is not the golden one (beyond its :func:`tolerance`),
    as ``task: metric: golden → produced``; task and metric order count too."""
    if not isinstance(golden, dict) or not isinstance(made, dict):
        return [] if golden == made else ["  (not a JSON object of tasks)"]
    lines = []
    if list(golden) != list(made) and set(golden) == set(made):
        lines.append(f"  tasks in another order: {list(golden)} → {list(made)}")
    for task in dict.fromkeys([*golden, *made]):
        before, after = golden.get(task), made.get(task)
        if before is None or after is None:
            lines.append(f"  {task}: {'added' if before is None else 'removed'}")
        elif "samples" in before or not isinstance(before, dict) or not isinstance(after, dict):
            if before != after:
                lines.extend(_prompt_changes(task, before, after) if "samples" in before else [f"  {task} changed"])
        else:
            if list(before) != list(after) and set(before) == set(after):
                lines.append(f"  {task}: metrics in another order")
            for metric in dict.fromkeys([*before, *after]):
                b, a = before.get(metric, "∅"), after.get(metric, "∅")
                if not _same(b, a, tolerance(task, metric)):
                    allowed = tolerance(task, metric)
                    within = f" (|Δ| {abs(a - b):.1e} > {allowed:g} allowed)" if allowed and _floats(a, b) else ""
                    lines.append(f"  {task}: {metric}: {b} → {a}{within}")
    return lines


def _floats(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _same(golden: Any, made: Any, allowed: float) -> bool:
    if _floats(golden, made):
        if math.isnan(golden) or math.isnan(made):
            return math.isnan(golden) and math.isnan(made)
        same_type = type(golden) is type(made)
        return same_type and (golden == made if not allowed else abs(made - golden) <= allowed)
    return golden == made and type(golden) is type(made)


@pytest.mark.parametrize("path", GOLDEN)
def test_the_same_as_golden(produced, path):
    """Exact for every number but model-computed ones (|Δ| ≤ MODEL_TOLERANCE); byte-identical when
    every value is exactly the golden one."""
    golden_bytes = (EXPECTED / path).read_bytes()
    golden = json.loads(golden_bytes)
    for made in (p for p in produced if p.path == path):
        found = differences(golden, json.loads(made.data))
        if found:
            pytest.fail(f"{path} ({made.source}) differs from the golden file:\n" + "\n".join(found), pytrace=False)
        if made.data != golden_bytes and _exactly_equal(golden, json.loads(made.data)):
            pytest.fail(f"{path} ({made.source}): same values as the golden file, other bytes (key order or "
                        "formatting)", pytrace=False)


def _exactly_equal(golden: Any, made: Any) -> bool:
    if isinstance(golden, dict) and isinstance(made, dict):
        return list(golden) == list(made) and all(_exactly_equal(golden[k], made[k]) for k in golden)
    return _same(golden, made, 0.0)


def test_every_registered_task_and_scoring_is_covered(produced):
    from evalpipe.tasks.registry import all_tasks

    wanted = {(name, scoring) for name, spec in all_tasks().items() for scoring in spec.scorings}
    wanted |= {("huatuo_retrieval", "default"), ("clue", "default"), ("clue", "clue"), ("cblue", "default"),
               ("mmlu_medical", "default")}
    assert wanted - set(covered(produced)) == set()


def test_the_scripted_model_answers_with_a_realistic_mix():
    """The golden numbers are worth guarding only if they are neither all perfect nor all broken."""
    tasks = {name: m for path in GOLDEN if path.endswith("/metrics.json")
             for name, m in json.loads((EXPECTED / path).read_text(encoding="utf-8")).items() if "n" in m}
    assert sum(m.get("errors", 0) for m in tasks.values()) >= 10
    assert sum(1 for m in tasks.values() if m.get("parse_failure_rate", 0) > 0) >= 8
    imperfect = [name for name, m in tasks.items()
                 if any(0 < v < 1 for k, v in m.items() if "f1" in k or "accuracy" in k)]
    assert len(imperfect) >= 10, imperfect


# ---- readable differences --------------------------------------------------------------------

def _prompt_changes(task: str, before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    b, a = before["samples"], after["samples"]
    changed = [sid for sid in b if sid in a and b[sid] != a[sid]]
    out = [f"  {task}: prompts changed for {len(changed)} of {len(b)} samples: {', '.join(changed[:10])}"
           + (" …" if len(changed) > 10 else "")] if changed else []
    if list(b) != list(a):
        out.append(f"  {task}: samples {before['n']} → {after['n']} (or their order changed)")
    if not out:
        out.append(f"  {task}: sample order or digest changed")
    return out


def test_a_difference_is_named_by_task_metric_and_value():
    golden = {"t": {"f1": 0.5, "n": 3}, "u": {"x": 1}}
    assert differences(golden, {"t": {"f1": 0.625, "n": 3}, "u": {"x": 1}}) == ["  t: f1: 0.5 \u2192 0.625"]
    assert "  t: n: 3 \u2192 \u2205" in differences(golden, {"t": {"f1": 0.5}, "u": {"x": 1}})
    assert differences(golden, {"u": {"x": 1}, "t": {"f1": 0.5, "n": 3}}) == [
        "  tasks in another order: ['t', 'u'] \u2192 ['u', 't']"]
    assert differences(golden, {"t": {"n": 3, "f1": 0.5}, "u": {"x": 1}}) == ["  t: metrics in another order"]
    assert differences(golden, {"t": {"f1": 0.5, "n": 3.0}, "u": {"x": 1}}) == ["  t: n: 3 \u2192 3.0"]
    prompts = {"t": {"n": 2, "sha256": "a", "samples": {"s1": "x", "s2": "y"}}}
    changed = {"t": {"n": 2, "sha256": "b", "samples": {"s1": "x", "s2": "z"}}}
    assert differences(prompts, changed) == ["  t: prompts changed for 1 of 2 samples: s2"]


def test_only_model_computed_metrics_get_the_tolerance():
    """A deterministic metric differing in its 8th digit fails; BERTScore (and a level score made from it)
    within 1e-6 passes, beyond it fails with the difference named."""
    key, level = "bertscore[all-MiniLM-L6-v2@L6]_f1", "level1_score[bertscore=all-MiniLM-L6-v2@L6,umls=fake]"
    golden = {"clue_meqsum": {"rougeL": 0.25, key: 0.612345678}, "clue": {level: 0.65}}
    assert differences(golden, {"clue_meqsum": {"rougeL": 0.25, key: 0.612345679}, "clue": {level: 0.6500000004}}) == []
    assert differences(golden, {"clue_meqsum": {"rougeL": 0.25000001, key: 0.612345678}, "clue": {level: 0.65}}) == [
        "  clue_meqsum: rougeL: 0.25 \u2192 0.25000001"]
    far = differences(golden, {"clue_meqsum": {"rougeL": 0.25, key: 0.6123477}, "clue": {level: 0.65}})
    assert len(far) == 1 and far[0].startswith(f"  clue_meqsum: {key}: 0.612345678 \u2192 0.6123477 (|\u0394| 2.0e-06")
    assert tolerance("huatuo_retrieval", "mrr@10") == MODEL_TOLERANCE and tolerance("ncbi_disease", "f1") == 0.0
    assert differences({"t": {"x": None}}, {"t": {"x": 0.0}}) == ["  t: x: None \u2192 0.0"]
