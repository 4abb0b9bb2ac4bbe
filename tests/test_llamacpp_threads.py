"""The embedded engine's thread count: EVALPIPE_LLAMACPP_THREADS where set, else one per CPU."""

import os

import pytest

from evalpipe.engines.llamacpp import THREADS_ENV, EngineUnavailable, default_threads


def test_the_thread_count_comes_from_the_environment_or_the_cpus(monkeypatch):
    monkeypatch.setenv(THREADS_ENV, "3")
    assert default_threads() == 3
    monkeypatch.delenv(THREADS_ENV)
    assert default_threads() == max(1, os.cpu_count() or 1)
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(THREADS_ENV, bad)
        with pytest.raises(EngineUnavailable, match=THREADS_ENV):
            default_threads()
