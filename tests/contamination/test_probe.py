"""The probe in process (no subprocess): what it refuses before asking anything."""

from __future__ import annotations

import asyncio
import json

import pytest

from evalpipe.config import RunConfig
from evalpipe.contamination.probe import ProbeOptions, execute_probe
from evalpipe.outcome import RunError


def test_a_directory_holding_another_tasks_probe_is_refused(tmp_path):
    config = RunConfig(tasks=("clue_meqsum",), model="m", base_url="http://127.0.0.1:9/v1", limit=2,
                       run_name="shared")
    (tmp_path / "shared").mkdir()
    other = {"task": "ncbi_disease", "verdict": "no_evidence", "guided_rougeL": 0.0, "general_rougeL": 0.0,
             "difference": {}, "exact": 0, "near_exact": 0, "n": 0}
    (tmp_path / "shared" / "contamination.json").write_text(json.dumps(other))

    def no_backend(config):
        raise AssertionError("a backend was built")

    with pytest.raises(RunError, match=r"holds the probe of task ncbi_disease; give this one another --run-name"):
        asyncio.run(execute_probe(config, ProbeOptions(), no_backend, tmp_path))
    assert json.loads((tmp_path / "shared" / "contamination.json").read_text()) == other  # untouched


def test_options_the_probe_cannot_use_are_refused():
    for bad in ({"min_tokens": 1}, {"max_tokens": 0}, {"resamples": 0}, {"min_k": 101}):
        with pytest.raises(ValueError):
            ProbeOptions(**bad)
