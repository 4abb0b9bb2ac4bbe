"""A stand-in ``vllm`` package for machines without a GPU: the in-process backend's tests load it
as ``vllm`` (tests/backends/test_vllm_inprocess.py), and the test of scripts/gpu_check.sh puts its
folder on ``PYTHONPATH``.

``LLM`` and ``SamplingParams`` accept exactly the arguments evalpipe passes (and a few users pass
through ``--engine-arg``), under vLLM 0.33.0's names (``vllm/entrypoints/llm.py``,
``vllm/engine/arg_utils.py``, ``vllm/sampling_params.py``): a renamed or unknown argument fails here
as it would on a GPU machine. Answers copy the NCBI sentence back, untagged, in ``<response>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__version__ = "0.0-standin"

#: ``LLM(**kwargs)`` names that vLLM passes on to ``EngineArgs``, as far as evalpipe's tests use them
ENGINE_ARGS = {"max_model_len", "enable_prefix_caching", "max_num_seqs", "enforce_eager"}


class EngineDeadError(Exception):
    """What vLLM raises from ``LLM.generate``/``LLM.chat`` once its engine core process is gone
    (the real one: ``vllm.v1.engine.exceptions.EngineDeadError``, same name, same message)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("EngineCore encountered an issue. See stack trace (above) for the root cause.", *args)


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] | None = None


#: the class itself, for checks that must hold even when a test wraps ``SamplingParams``
_SAMPLING_PARAMS = SamplingParams


@dataclass
class CompletionOutput:
    text: str
    token_ids: list[int]
    finish_reason: str = "stop"


@dataclass
class RequestOutput:
    outputs: list[CompletionOutput]
    prompt_token_ids: list[int] = field(default_factory=list)


def _answer(text: str) -> RequestOutput:
    sentence = text.rsplit("Text to process:\n", 1)[-1].rsplit("Input:\n", 1)[-1].split("\n", 1)[0]
    return RequestOutput([CompletionOutput(f"<response>{sentence}</response>", [1, 2, 3])], [0] * 10)


class LLM:
    """Records what it was built with (``kwargs``) and each batch it was given (``calls``)."""

    def __init__(self, model: str, *, tensor_parallel_size: int = 1, dtype: str = "auto",
                 revision: str | None = None, seed: int = 0, gpu_memory_utilization: float = 0.92,
                 **kwargs: Any) -> None:
        unknown = set(kwargs) - ENGINE_ARGS
        if unknown:
            raise TypeError(f"LLM() got unexpected engine arguments {sorted(unknown)}")
        self.kwargs = {"model": model, "tensor_parallel_size": tensor_parallel_size, "dtype": dtype,
                       "revision": revision, "seed": seed, "gpu_memory_utilization": gpu_memory_utilization,
                       **kwargs}
        self.calls: list[tuple[str, list[str]]] = []

    @staticmethod
    def _check(prompts: list[Any], sampling: Any) -> None:
        if not (isinstance(sampling, list) and len(sampling) == len(prompts)
                and all(isinstance(s, _SAMPLING_PARAMS) for s in sampling)):
            raise TypeError("sampling_params must be one SamplingParams per prompt")

    def chat(self, messages: list[list[dict[str, str]]], sampling_params: list[SamplingParams] | None = None,
             use_tqdm: bool = True, **kwargs: Any) -> list[RequestOutput]:
        self._check(messages, sampling_params)
        if not all(isinstance(m, dict) and set(m) == {"role", "content"} for c in messages for m in c):
            raise TypeError("each message must be {'role': …, 'content': …}")
        self.calls.append(("chat", [c[-1]["content"] for c in messages]))
        return [_answer(conversation[-1]["content"]) for conversation in messages]

    def generate(self, prompts: list[str], sampling_params: list[SamplingParams] | None = None, *,
                 use_tqdm: bool = True, **kwargs: Any) -> list[RequestOutput]:
        self._check(prompts, sampling_params)
        self.calls.append(("generate", list(prompts)))
        return [_answer(prompt) for prompt in prompts]
