"""Endpoint identity: the same command pointed at another server never reuses the first server's
answers silently; replicas are one identity; an engine evalpipe starts on a random port is the
same engine on every run; --reuse-answers-from-other-endpoint reuses them deliberately, recorded."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from evalpipe.backends.factory import make_backend
from evalpipe.store.answers import ResponseStore
from evalpipe.cli import app
from evalpipe.config import RunConfig
from evalpipe.store.endpoint_identity import (EndpointIdentity, OtherEndpoint, check, entry_of, fingerprints_in,
                                        identity_of, read, same)
from evalpipe.records import Completion
from evalpipe.pipeline.execute import execute, run_dir_for
from tests.support.fake_openai import FakeOpenAIServer


def _config(url: str, *replicas: str, limit: int = 4, **kwargs) -> RunConfig:
    return RunConfig(tasks=("ncbi_disease",), model="m", base_url=url, replicas=replicas, limit=limit, concurrency=2,
                     **kwargs)


def _run(config: RunConfig, root):
    return asyncio.run(execute(config, make_backend, root))


def test_the_same_command_against_another_server_stops_naming_both(tmp_path):
    with FakeOpenAIServer(models=("m",)) as a, FakeOpenAIServer(models=("m",)) as b:
        _run(_config(a.url), tmp_path)
        sent = b.total_requests
        with pytest.raises(OtherEndpoint) as caught:
            _run(_config(b.url), tmp_path)
        assert b.total_requests == sent  # nothing was sent to the other server, not even /models
        message = str(caught.value)
        assert a.url.rstrip("/") in message and b.url.rstrip("/") in message
    assert "4 stored answers" in message and "--reuse-answers-from-other-endpoint" in message
    assert "\n" not in message


def test_reuse_flag_reuses_deliberately_and_is_recorded(tmp_path):
    with FakeOpenAIServer(models=("m",)) as a, FakeOpenAIServer(models=("m",)) as b:
        first = _run(_config(a.url), tmp_path)
        again = _run(_config(b.url, reuse_answers_from_other_endpoint=True), tmp_path)
        assert b.total_requests == 0 and again.cached == 4 and again.metrics == first.metrics
        run = run_dir_for(_config(a.url), tmp_path)
        saved = json.loads(run.config_path.read_text())
        assert saved["config"]["reuse_answers_from_other_endpoint"] is True
        assert [e["reused"] for e in saved["endpoints"]] == [False, True]
        summary = json.loads((run.path / "summary.json").read_text())
        assert any("were reused for" in note for note in summary["run"]["notes"])
        _run(_config(a.url), tmp_path)  # the first server is still one of the store's endpoints


def test_replicas_are_one_identity_and_adding_one_is_the_same_deployment(tmp_path):
    with FakeOpenAIServer(models=("m",)) as a, FakeOpenAIServer(models=("m",)) as b:
        _run(_config(a.url, b.url), tmp_path)
        _run(_config(b.url, a.url), tmp_path)  # the order does not matter
        _run(_config(a.url), tmp_path)  # one replica of the same deployment
        store = ResponseStore(run_dir_for(_config(a.url), tmp_path).store_path)
        try:
            (identity,) = read(store)
        finally:
            store.close()
        assert set(identity.urls) == {a.url.rstrip("/"), b.url.rstrip("/")}


def test_a_new_checkpoint_behind_the_same_url_and_name_is_told_apart_by_its_models_entry(tmp_path):
    """vLLM lists the checkpoint's path as ``root``: a server restarted on another checkpoint under
    the same --served-model-name, at the same URL, is another endpoint (its ``created`` changes on
    every call and is ignored)."""
    with FakeOpenAIServer(models=("m",), model_root="/ckpt/v1") as first:
        port = first.port
        _run(_config(first.url), tmp_path)
    with FakeOpenAIServer(models=("m",), model_root="/ckpt/v1", port=port) as same_again:
        # the same checkpoint restarted, with more samples to ask: it is the same endpoint
        assert _run(_config(same_again.url, limit=5), tmp_path).sent == 1
    with FakeOpenAIServer(models=("m",), model_root="/ckpt/v2", port=port) as other:
        with pytest.raises(OtherEndpoint, match=r"root /ckpt/v1.*root /ckpt/v2"):
            _run(_config(other.url, limit=6), tmp_path)
        assert other.total_requests == 0


def test_an_engine_on_a_random_port_is_the_same_engine_every_run():
    one = identity_of(RunConfig(tasks=("t",), model="smollm2", engine="llamacpp", base_url="http://127.0.0.1:4001/v1",
                                context_length=8192))
    two = identity_of(RunConfig(tasks=("t",), model="smollm2", engine="llamacpp", base_url="http://127.0.0.1:5002/v1",
                                context_length=8192))
    other = identity_of(RunConfig(tasks=("t",), model="smollm2", engine="llamacpp", context_length=8192,
                                  engine_options={"extra": {"n_gpu_layers": "20"}}))
    assert one is not None and two is not None and other is not None
    assert one.kind == "engine" and same(one, two) and not same(one, other)
    assert "4001" not in json.dumps(one.to_json())


def test_urls_are_recorded_without_credentials_or_query():
    identity = identity_of(_config("https://user:secret@api.example.com/v1?key=abc123"))
    assert identity is not None and identity.urls == ("https://api.example.com/v1",)


def test_the_models_entry_keeps_only_what_describes_the_model():
    entries = [{"id": "x"}, {"id": "m", "object": "model", "created": 1733, "owned_by": "vllm", "root": "/ckpt",
                "max_model_len": 4096, "permission": [{"id": "modelperm-1f2e", "created": 1733}]}]
    assert entry_of(entries, "m") == {"id": "m", "owned_by": "vllm", "root": "/ckpt", "max_model_len": 4096}
    assert entry_of(entries, "absent") is None


def test_system_fingerprints_are_counted_and_a_new_one_is_noted(tmp_path):
    with FakeOpenAIServer(models=("m",), system_fingerprint="fp_aaa") as a:
        port = a.port
        _run(_config(a.url), tmp_path)
    with FakeOpenAIServer(models=("m",), system_fingerprint="fp_bbb", port=port) as a2:
        outcome = _run(_config(a2.url, limit=6), tmp_path)
        store = ResponseStore(run_dir_for(_config(a2.url), tmp_path).store_path)
    try:
        (identity,) = read(store)
    finally:
        store.close()
    assert identity.fingerprints == {"fp_aaa": 4, "fp_bbb": 2}
    assert any("system_fingerprint fp_bbb" in note for note in outcome.notes)


def test_fingerprints_are_found_in_replica_stats():
    stats = {"failovers": 0, "replicas": {"a": {"system_fingerprints": {"fp1": 2}}, "b": {"system_fingerprints": {"fp1": 1, "fp2": 1}}}}
    assert fingerprints_in(stats) == {"fp1": 3, "fp2": 1}


def test_a_store_without_an_identity_is_adopted_with_a_note(tmp_path):
    store = ResponseStore(tmp_path / "responses.sqlite")
    try:
        store.put("k", "m", Completion(text="answer"))
        notes: list[str] = []
        current = EndpointIdentity(kind="endpoint", model="m", urls=("http://h/v1",))
        check(store, current, reuse=False, notes=notes)
        assert read(store) == [current] and "not identified" in notes[0]
    finally:
        store.close()


def test_an_empty_store_takes_the_endpoint_asked_now(tmp_path):
    store = ResponseStore(tmp_path / "responses.sqlite")
    try:
        check(store, EndpointIdentity(kind="endpoint", model="m", urls=("http://a/v1",)), False, [])
        check(store, EndpointIdentity(kind="endpoint", model="m", urls=("http://b/v1",)), False, [])  # no answers yet
        assert [i.urls for i in read(store)] == [("http://b/v1",)]
    finally:
        store.close()


def test_cli_says_it_in_one_line_with_exit_1(tmp_path):
    with FakeOpenAIServer(models=("m",)) as a, FakeOpenAIServer(models=("m",)) as b:
        base = ["run", "--task", "ncbi_disease", "--model", "m", "--limit", "2", "--results-dir", str(tmp_path)]
        assert CliRunner().invoke(app, [*base, "--base-url", a.url]).exit_code == 0
        result = CliRunner().invoke(app, [*base, "--base-url", b.url])
        assert result.exit_code == 1
        errors = [line for line in result.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "another endpoint" in errors[0]
        reused = CliRunner().invoke(app, [*base, "--base-url", b.url, "--reuse-answers-from-other-endpoint"])
        assert reused.exit_code == 0, reused.output
        assert "2 already answered, 0 to send" in reused.output
