"""Golden metrics: fixture runs of every task, in every scoring, give the committed bytes.

The safety net for refactors (issue 10, 11): a refactor never changes a user's numbers nor the
prompts a task renders. ``fixture_runs.generate`` runs every registered task on fixture data with a
deterministic scripted model and re-scores each run in every scoring; every file must equal its
copy under ``tests/golden/expected/`` byte for byte. To change a golden file on purpose, see
``tests/golden/README.md``.

BERTScore (MiniLM on CPU) is compared exactly too. Its numbers are bit-identical across processes
and torch thread counts (1, 2, 8 tried) *for a given Python hash seed*: bert-score batches texts in
``set`` order, so MeQSum's BERTScore moves by ~1e-9 with the seed. The runs are therefore made in a
child process with ``PYTHONHASHSEED=0`` (fixture_runs.HASH_SEED), and no tolerance is needed.
Another CPU or torch build may still differ in the last digits; the failure message then says so.
"""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("path", GOLDEN)
def test_byte_identical_to_golden(produced, path):
    golden = (EXPECTED / path).read_bytes()
    differing = [p for p in produced if p.path == path and p.data != golden]
    if differing:
        sources = ", ".join(p.source for p in differing)
        pytest.fail(f"{path} ({sources}) differs from the golden file:\n"
                    f"{describe_difference(golden, differing[0].data)}", pytrace=False)


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

def describe_difference(old: bytes, new: bytes) -> str:
    """Which task, which metric, old → new; for prompt digests, which samples' prompts changed."""
    try:
        before, after = json.loads(old), json.loads(new)
    except ValueError:
        return "  (not JSON)"
    lines = []
    for task in dict.fromkeys([*before, *after]):
        b, a = before.get(task), after.get(task)
        if b == a:
            continue
        if b is None or a is None:
            lines.append(f"  {task}: {'added' if b is None else 'removed'}")
        elif "samples" in b:
            lines.extend(_prompt_changes(task, b, a))
        else:
            for key in dict.fromkeys([*b, *a]):
                if b.get(key, "∅") != a.get(key, "∅"):
                    lines.append(f"  {task}: {key}: {b.get(key, '∅')} → {a.get(key, '∅')}")
    if not lines:
        lines.append("  same values; the bytes differ (key order or formatting)")
    elif _only_last_digits(before, after):
        lines.append("  (only floats differing below 1e-6: BERTScore on another CPU or torch build, or run "
                     "without fixture_runs.HASH_SEED? see tests/golden/README.md)")
    return "\n".join(lines)


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


def _only_last_digits(before: Any, after: Any) -> bool:
    if isinstance(before, dict) and isinstance(after, dict):
        return before.keys() == after.keys() and all(_only_last_digits(before[k], after[k]) for k in before)
    if isinstance(before, float) and isinstance(after, float):
        return abs(before - after) < 1e-6
    return before == after


def test_a_difference_is_shown_per_task_and_metric():
    old = b'{"t": {"f1": 0.5, "n": 3}, "u": {"x": 1}}'
    assert describe_difference(old, b'{"t": {"f1": 0.625, "n": 3}, "u": {"x": 1}}') == "  t: f1: 0.5 \u2192 0.625"
    assert "t: n: 3 \u2192 \u2205" in describe_difference(old, b'{"t": {"f1": 0.5}, "u": {"x": 1}}')
    assert "key order" in describe_difference(old, b'{"u": {"x": 1}, "t": {"f1": 0.5, "n": 3}}')
    assert "below 1e-6" in describe_difference(old, b'{"t": {"f1": 0.5000001, "n": 3}, "u": {"x": 1}}')
    prompts = {"t": {"n": 2, "sha256": "a", "samples": {"s1": "x", "s2": "y"}}}
    changed = {"t": {"n": 2, "sha256": "b", "samples": {"s1": "x", "s2": "z"}}}
    assert "t: prompts changed for 1 of 2 samples: s2" in describe_difference(
        json.dumps(prompts).encode(), json.dumps(changed).encode())
