"""A stand-in ``vllm`` package for testing scripts/gpu_check.sh on a machine without a GPU.

Only on ``PYTHONPATH`` in that test. ``LLM`` and ``SamplingParams`` accept the arguments evalpipe
passes, under vLLM 0.33.0's names; answers copy the NCBI sentence back, untagged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__version__ = "0.0-standin"

_ENGINE_ARGS = {"max_model_len", "enable_prefix_caching"}


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int | None = 16
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] | None = None


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
    return RequestOutput([CompletionOutput(sentence, list(range(len(sentence.split()))))], [0] * len(text.split()))


class LLM:
    def __init__(self, model: str, *, tensor_parallel_size: int = 1, dtype: str = "auto",
                 revision: str | None = None, seed: int = 0, gpu_memory_utilization: float = 0.92,
                 **kwargs: Any) -> None:
        unknown = set(kwargs) - _ENGINE_ARGS
        if unknown:
            raise TypeError(f"LLM() got unexpected engine arguments {sorted(unknown)}")

    def chat(self, messages: list[list[dict[str, str]]], sampling_params: list[SamplingParams] | None = None,
             use_tqdm: bool = True, **kwargs: Any) -> list[RequestOutput]:
        return [_answer(conversation[-1]["content"]) for conversation in messages]

    def generate(self, prompts: list[str], sampling_params: list[SamplingParams] | None = None, *,
                 use_tqdm: bool = True, **kwargs: Any) -> list[RequestOutput]:
        return [_answer(prompt) for prompt in prompts]
