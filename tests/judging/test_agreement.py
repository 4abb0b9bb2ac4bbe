"""Krippendorff's alpha (ordinal): a hand-computed case, a published case, the package, and the
declared aggregation that gives alpha its bootstrap interval."""

from __future__ import annotations

import math

import krippendorff
import numpy as np
import pytest

from evalpipe.judging.agreement import KrippendorffAlpha, krippendorff_alpha, ordinal_alpha, unit_coincidences
from evalpipe.metrics.aggregation import aggregation_from_json, evaluate
from evalpipe.report.bootstrap import ResampleTask, bootstrap_task, resample_counts, resample_indices

VALUES = (1, 2, 3)


def test_hand_computed_small_case():
    """Two judges, four samples rated (1,1), (2,3), (3,3), (1,2) on a 1–3 scale.

    Coincidences (each unit has m = 2 ratings: every ordered pair weighs 1/(m−1) = 1):
    o11 = 2, o12 = o21 = 1, o23 = o32 = 1, o33 = 2; so n1 = 3, n2 = 2, n3 = 3, n = 8.
    Ordinal distances: δ12 = (n1 + n2 − (n1 + n2)/2)² = 2.5² = 6.25, δ23 = (n2 + n3 − (n2 + n3)/2)² = 6.25,
    δ13 = (n1 + n2 + n3 − (n1 + n3)/2)² = (8 − 3)² = 25.
    Σ o·δ = 2·(1·6.25) + 2·(1·6.25) = 25;  Σ n_c n_k δ = 2·(3·2·6.25 + 3·3·25 + 2·3·6.25) = 600.
    α = 1 − (n − 1) · 25 / 600 = 1 − 175/600 = 17/24.
    """
    units = {"a": {"j1": 1, "j2": 1}, "b": {"j1": 2, "j2": 3}, "c": {"j1": 3, "j2": 3}, "d": {"j1": 1, "j2": 2}}
    expected = 17 / 24
    value, why = krippendorff_alpha(units, ["j1", "j2"], VALUES)
    assert why is None and math.isclose(value, expected, rel_tol=1e-12)
    matrix = np.zeros((3, 3))
    for ratings in units.values():
        for (c, k), o in unit_coincidences(list(ratings.values())).items():
            matrix[c - 1, k - 1] += o
            if c != k:
                matrix[k - 1, c - 1] += o
    assert matrix.tolist() == [[2, 1, 0], [1, 0, 1], [0, 1, 2]]
    assert math.isclose(float(ordinal_alpha(matrix)[0]), expected, rel_tol=1e-12)


def test_published_example_with_missing_values():
    """Krippendorff's own example (4 coders, 12 units, missing values): ordinal alpha 0.815."""
    nan = np.nan
    data = [[1, 2, 3, 3, 2, 1, 4, 1, 2, nan, nan, nan],
            [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, nan, 3],
            [nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, nan],
            [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, nan]]
    units = {u: {f"c{i}": int(row[u]) for i, row in enumerate(data) if not math.isnan(row[u])} for u in range(12)}
    value, _ = krippendorff_alpha(units, ["c0", "c1", "c2", "c3"], (1, 2, 3, 4, 5))
    assert round(value, 3) == 0.815
    aggregation = KrippendorffAlpha("a.", (1, 2, 3, 4, 5))
    parts = [{f"a.{c}:{k}": o for (c, k), o in unit_coincidences(list(r.values())).items()} for r in units.values()]
    assert math.isclose(evaluate(aggregation, parts), value, rel_tol=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_declared_aggregation_equals_the_package_on_random_juries(seed):
    rng = np.random.default_rng(seed)
    coders, units = 2 + seed % 3, 30
    data = rng.integers(1, 6, size=(coders, units)).astype(float)
    data[rng.random(data.shape) < 0.15] = np.nan
    expected = krippendorff.alpha(reliability_data=data, value_domain=[1, 2, 3, 4, 5], level_of_measurement="ordinal")
    ratings = {u: {f"c{i}": int(data[i, u]) for i in range(coders) if not np.isnan(data[i, u])} for u in range(units)}
    value, _ = krippendorff_alpha(ratings, [f"c{i}" for i in range(coders)], (1, 2, 3, 4, 5))
    aggregation = aggregation_from_json(KrippendorffAlpha("x.", (1, 2, 3, 4, 5)).to_json())
    parts = [{f"x.{c}:{k}": o for (c, k), o in unit_coincidences(list(r.values())).items()} for r in ratings.values()]
    assert math.isclose(value, expected, rel_tol=1e-12)
    assert math.isclose(evaluate(aggregation, parts), expected, rel_tol=1e-12)


def test_bootstrap_of_alpha_resamples_units():
    """Each bootstrap replicate equals the package's alpha on the drawn units (a unit drawn twice twice)."""
    rng = np.random.default_rng(7)
    data = rng.integers(1, 6, size=(2, 25))
    data[1] = np.clip(data[0] + rng.integers(-1, 2, size=25), 1, 5)  # judges that mostly agree
    ratings = [{"a": int(data[0, u]), "b": int(data[1, u])} for u in range(25)]
    aggregation = KrippendorffAlpha("x.", (1, 2, 3, 4, 5))
    keys = aggregation.keys()
    parts = np.array([[unit_coincidences(list(r.values())).get(tuple(map(int, k[2:].split(":"))), 0.0) for k in keys]
                      for r in ratings])
    point, _ = krippendorff_alpha(dict(enumerate(ratings)), ["a", "b"], (1, 2, 3, 4, 5))
    task = ResampleTask(name="t", ids=tuple(map(str, range(25))), keys=keys, parts=parts,
                        aggregations={"alpha": aggregation}, corpus={"alpha": point})
    boot = bootstrap_task(task, resamples=50, seed=3)
    assert boot.intervals["alpha"].available and boot.intervals["alpha"].method == "krippendorff_alpha"
    idx = resample_indices(25, 50, 3, "t")
    replicates = boot.replicates.values["alpha"]
    for b in range(5):
        drawn = data[:, idx[b]].astype(float)
        expected = krippendorff.alpha(reliability_data=drawn, value_domain=[1, 2, 3, 4, 5],
                                      level_of_measurement="ordinal")
        assert math.isclose(replicates[b], expected, rel_tol=1e-9)
    assert resample_counts(idx, 25).sum() == 50 * 25


def test_undefined_alpha_is_not_a_number_but_a_reason():
    assert krippendorff_alpha({"a": {"j1": 3}}, ["j1"], (1, 2, 3, 4, 5)) == (None, "needs at least two judges")
    assert krippendorff_alpha({"a": {"j1": 3}, "b": {"j2": 4}}, ["j1", "j2"], (1, 2, 3, 4, 5))[1] == \
        "no sample was rated by two judges"
    value, why = krippendorff_alpha({"a": {"j1": 3, "j2": 3}, "b": {"j1": 3, "j2": 3}}, ["j1", "j2"], (1, 2, 3, 4, 5))
    assert value is None and "same value" in why
    assert math.isnan(float(ordinal_alpha(np.zeros((5, 5)))[0]))
