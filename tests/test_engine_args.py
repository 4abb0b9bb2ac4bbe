"""--engine-arg KEY=VALUE: parsing, and how each engine receives it."""

import pytest

from evalpipe.engines.launch import inprocess_kwargs, llamacpp_cli_args, parse_engine_args, vllm_cli_args


def test_pairs_are_parsed_in_order_with_leading_dashes_allowed():
    assert parse_engine_args(["--max-num-seqs=256", "quantization=awq", "enforce-eager="]) == {
        "max-num-seqs": "256", "quantization": "awq", "enforce-eager": ""}


@pytest.mark.parametrize("pair, message", [
    ("max-num-seqs", "KEY=VALUE"),
    ("=3", "KEY=VALUE"),
    ("bad key=1", "KEY=VALUE"),
    ("port=9000", "evalpipe sets port itself"),
    ("served_model_name=x", "evalpipe sets served_model_name itself"),
])
def test_bad_pairs_are_refused_by_name(pair, message):
    with pytest.raises(ValueError, match=message) as info:
        parse_engine_args([pair])
    assert repr(pair) in str(info.value)  # the message quotes what the user typed


def test_vllm_gets_flags_and_boolean_forms():
    assert vllm_cli_args({"max_num_seqs": "8", "enforce-eager": "true", "enable-prefix-caching": "false",
                          "trust-remote-code": ""}) == [
        "--max-num-seqs", "8", "--enforce-eager", "--no-enable-prefix-caching", "--trust-remote-code"]


def test_llamacpp_gets_its_own_names_and_values():
    assert llamacpp_cli_args({"n_gpu_layers": "20", "flash_attn": "True"}) == [
        "--n_gpu_layers", "20", "--flash_attn", "True"]


def test_in_process_kwargs_are_json_where_they_parse():
    assert inprocess_kwargs({"max-num-seqs": "256", "enforce-eager": "true", "quantization": "awq",
                             "hf-overrides": '{"rope_theta": 1000000}', "trust-remote-code": ""}) == {
        "max_num_seqs": 256, "enforce_eager": True, "quantization": "awq",
        "hf_overrides": {"rope_theta": 1000000}, "trust_remote_code": True}
