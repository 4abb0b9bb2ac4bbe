"""configure.build_config: the one way `run`, `contamination` and evaluate() turn options into a RunConfig."""

from __future__ import annotations

import pytest

from evalpipe.configure import DEFAULT_CONCURRENCY, LLAMACPP_CONCURRENCY, build_config
from evalpipe.errors import UsageError
from evalpipe.tasks.registry import get_task


def test_an_unknown_engine_names_the_option():
    with pytest.raises(UsageError) as caught:
        build_config([get_task("medqa")], model="m", engine="nope")
    assert caught.value.option == "--engine"


def test_an_engine_and_a_url_together_are_refused():
    with pytest.raises(UsageError, match="either --engine"):
        build_config([get_task("medqa")], model="m", engine="llamacpp", base_urls=["http://127.0.0.1:1/v1"])


def test_llamacpp_defaults_to_the_bundled_model_and_its_concurrency():
    config = build_config([get_task("medqa")], model=None, engine="llamacpp")
    assert (config.model, config.concurrency) == ("default", LLAMACPP_CONCURRENCY)


def test_a_url_run_gets_the_default_concurrency_and_replicas():
    config = build_config([get_task("medqa")], model="m", base_urls=["http://a:1/v1", "http://b:1/v1"])
    assert (config.base_url, config.replicas, config.concurrency) == ("http://a:1/v1", ("http://b:1/v1",),
                                                                      DEFAULT_CONCURRENCY)


def test_a_model_is_required():
    with pytest.raises(UsageError, match="--model is required"):
        build_config([get_task("medqa")], model=None, base_urls=["http://a:1/v1"])


def test_a_retrieval_task_needs_an_embedding_model_to_be_run():
    with pytest.raises(UsageError, match="retrieval tasks need"):
        build_config([get_task("huatuo_retrieval")], model="m", base_urls=["http://a:1/v1"])


def test_a_retrieval_run_without_a_model_is_named_for_its_embedder():
    config = build_config([get_task("huatuo_retrieval")], model=None, base_urls=["http://a:1/v1"],
                          embeddings_url="http://a:1/v1", embeddings_model="bge-small")
    assert config.model == "bge-small"


def test_the_probe_completes_a_retrieval_task_without_an_embedding_model():
    config = build_config([get_task("huatuo_retrieval")], model="m", base_urls=["http://a:1/v1"],
                          needs_embeddings=False)
    assert (config.model, config.embeddings_url, config.embeddings_path) == ("m", None, None)
    with pytest.raises(UsageError, match="--model is required"):  # no embedder to name the run after
        build_config([get_task("huatuo_retrieval")], model=None, base_urls=["http://a:1/v1"], needs_embeddings=False)


def test_lm_eval_compat_asks_the_reference_prompt_scored_by_loglikelihood():
    config = build_config([get_task("medqa")], model="m", base_urls=["http://a:1/v1"], compat="lm-eval")
    assert (config.prompt_form, config.choice_scoring) == ("lm-eval", "loglikelihood")
