"""How to start the local engine an ``--engine`` names: its server command, URL and model, and the
engine's own options passed through (``--engine-arg KEY=VALUE``).

Why pass-through instead of one evalpipe option per engine setting: vLLM and llama.cpp each have
dozens of settings (quantization, KV-cache dtype, batch limits, trust-remote-code, …) that change
from release to release. evalpipe names the few it must know (context length, parallelism, dtype,
memory share, revision) and passes any other one through unchanged; all of them are part of the run's
identity, so changing one starts a new run directory instead of mixing answers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe.engines.server import ServerSpec
from evalpipe.errors import UsageError

#: engines ``evalpipe run --engine`` knows: two servers and vLLM in the evalpipe process
ENGINES = ("llamacpp", "vllm", "vllm-inprocess")
#: server options evalpipe sets itself: a pass-through may not change them
RESERVED = {"host", "port", "model", "served-model-name", "model-alias"}
_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\Z")


#: the vLLM settings evalpipe names as options of its own (everything else: ``--engine-arg``)
VLLM_NAMED = ("tensor_parallel_size", "dtype", "gpu_memory_utilization", "revision")


def engine_options(engine: str | None, named: Mapping[str, Any], engine_args: Sequence[str]) -> dict[str, Any]:
    """The engine settings of a run or a server, checked: ``named`` (``VLLM_NAMED`` keys, None when not
    given) apply to vLLM engines only, and pass-through ``--engine-arg`` pairs need an engine that
    evalpipe starts — a setting that would be silently ignored is refused (UsageError).

    Returns the given named settings plus ``extra`` (the parsed pairs) when there are any.
    """
    given = {k: v for k, v in named.items() if v is not None}
    if given and engine not in ("vllm", "vllm-inprocess"):
        raise UsageError("--tensor-parallel-size, --dtype, --gpu-memory-utilization and --revision apply to "
                         "--engine vllm or vllm-inprocess only (a server you started has its own settings; "
                         "llama.cpp takes --engine-arg)")
    if engine_args and engine is None:
        raise UsageError("--engine-arg needs --engine (evalpipe passes it to the engine it starts)")
    extra = parse_engine_args(engine_args)
    return {**given, **({"extra": extra} if extra else {})}


def parse_engine_args(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings (leading dashes on KEY allowed) → ``{key: value}``, in order.

    Raises ValueError naming the bad pair: no ``=``, a malformed key, or one evalpipe sets itself.
    """
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().lstrip("-")
        if not sep or not _KEY.match(key):
            raise UsageError(f"--engine-arg expects KEY=VALUE (e.g. max-num-seqs=256), got {pair!r}")
        if key.replace("_", "-") in RESERVED:
            raise UsageError(f"--engine-arg {pair!r}: evalpipe sets {key} itself")
        parsed[key] = value.strip()
    return parsed


def vllm_cli_args(extra: Mapping[str, str]) -> list[str]:
    """``vllm serve`` options: ``--key value``; ``true`` or an empty value gives the bare flag and
    ``false`` its ``--no-`` form (vLLM's boolean options accept both)."""
    args: list[str] = []
    for key, value in extra.items():
        flag = "--" + key.replace("_", "-")
        if value.lower() in ("", "true"):
            args.append(flag)
        elif value.lower() == "false":
            args.append("--no-" + key.replace("_", "-"))
        else:
            args += [flag, value]
    return args


def llamacpp_cli_args(extra: Mapping[str, str]) -> list[str]:
    """``python -m llama_cpp.server`` options: ``--key value`` as given (its names use underscores,
    e.g. ``n_gpu_layers=20``, and booleans take a value: ``flash_attn=True``)."""
    args: list[str] = []
    for key, value in extra.items():
        args += ["--" + key, value]
    return args


def inprocess_kwargs(extra: Mapping[str, str]) -> dict[str, Any]:
    """``vllm.LLM`` keyword arguments: hyphens become underscores; values are read as JSON where
    they parse (``256`` → 256, ``true`` → True, ``{"a": 1}`` → a dict), else kept as text."""
    kwargs: dict[str, Any] = {}
    for key, value in extra.items():
        try:
            kwargs[key.replace("-", "_")] = json.loads(value) if value else True
        except ValueError:
            kwargs[key.replace("-", "_")] = value
    return kwargs


def server_spec(engine: str, model: str | None, context_length: int | None, options: Mapping[str, Any],
                port: int | None = None) -> ServerSpec:
    """How to start the local server for ``--engine`` (llama.cpp default model: bundled SmolLM2).

    ``options``: the named engine settings plus ``extra``, the pass-through ``--engine-arg`` pairs.
    ``port``: on 127.0.0.1; default a free one.
    """
    extra: Mapping[str, str] = options.get("extra") or {}
    if engine == "llamacpp":
        from evalpipe.engines.llamacpp import llamacpp_server

        return llamacpp_server(model_path=model, n_ctx=context_length or 8192, port=port,
                               extra_args=llamacpp_cli_args(extra))
    if engine != "vllm":
        raise UsageError(f"no server for engine {engine!r} (servers: llamacpp, vllm)")
    from evalpipe.engines.vllm_server import vllm_server

    if not model:
        raise UsageError("--engine vllm needs --model (a local model folder or a model name)")
    named = {k: v for k, v in options.items() if k != "extra"}
    return vllm_server(model, max_model_len=context_length, port=port, extra_args=vllm_cli_args(extra), **named)
