"""The record a prepared task is: its settings, its shots, and where its rendered plan waits.

Why a module of its own: every later stage (budget, execute, scoring) reads a :class:`PreparedTask`,
and none of them should need to import how it was made (:mod:`evalpipe.pipeline.prepare`). Memory
is flat in the number of samples: a prepared task keeps its settings, its shots and the text its
prompts share; its examples are a stream read again where needed (a loader that cannot stream gives
a tuple), its keys and packed prompts are on disk (stage, then store), and a prompt is unpacked when
it is read (``docs/architecture.md``, "Memory flat in N").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from evalpipe.pipeline.stage import PlanStage
from evalpipe.prompting import PromptRenderer
from evalpipe.records import Example, Prompt
from evalpipe.store.prompt_pack import Packer, unpack
from evalpipe.tasks.base import Examples, TaskData, TaskSpec
from evalpipe.variants.conditions import Condition, plan_name


@dataclass(frozen=True)
class PreparedTask:
    spec: TaskSpec
    data: TaskData
    #: the evaluated examples (a stream re-reads the data each time it is iterated: never all held)
    examples: Examples
    shots: tuple[Example, ...]
    #: renders one example's prompt (deterministic: the same example always gives the same prompt)
    make_prompt: Callable[[Example], Prompt]
    #: where the rendered plan waits for the run directory's lock (keys, packed prompts, infos)
    stage: PlanStage
    #: how many samples the plan has
    size: int
    packer: Packer
    max_tokens: int
    #: None for a retrieval task (its prompts are query texts, not rendered from a template)
    renderer: PromptRenderer | None
    model: str
    #: a retrieval task's candidate pool (empty for generation tasks)
    pool: tuple[str, ...] = ()
    #: the prompt condition rendered (variant, shot count, shot order); None = the run asks for none
    condition: Condition | None = None
    #: the variant's template under prompts/ (None = the task's canonical template)
    template: str | None = None
    #: the sha256 of each data file as the prompts were rendered from it (a stream reads the file again)
    data_digests: Mapping[str, str] = field(default_factory=dict)

    def keys(self) -> Iterator[str]:
        """Every sample's cache key, in evaluation order (read from the stage)."""
        return (key for _, key, _, _ in self.stage.rows(self.plan_name))

    def prompt(self, i: int) -> Prompt:
        """The prompt of the ``i``-th example (unpacked now: the module docstring says why)."""
        return Prompt.from_json(self.prompt_json(i))

    def prompt_json(self, i: int) -> dict[str, Any]:
        """The JSON form of the ``i``-th example's prompt."""
        prompt: dict[str, Any] = unpack(json.loads(self.stage.row(self.plan_name, i)[2]), self.packer.texts)
        return prompt

    @property
    def prompts(self) -> Sequence[Prompt]:
        """Every example's prompt, each unpacked when read."""
        return _Rendered(self)

    @property
    def plan_name(self) -> str:
        """Under which name the store keeps this task's (condition's) plan."""
        return plan_name(self.spec.name, self.condition)


class _Rendered(Sequence[Prompt]):
    def __init__(self, task: PreparedTask) -> None:
        self._task = task

    def __len__(self) -> int:
        return self._task.size

    @overload
    def __getitem__(self, index: int) -> Prompt: ...
    @overload
    def __getitem__(self, index: slice) -> list[Prompt]: ...

    def __getitem__(self, index: int | slice) -> Prompt | list[Prompt]:
        if isinstance(index, slice):
            return [self._task.prompt(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        return self._task.prompt(index)

    def __iter__(self) -> Iterator[Prompt]:
        texts = self._task.packer.texts
        return (Prompt.from_json(unpack(json.loads(packed), texts))
                for _, _, packed, _ in self._task.stage.rows(self._task.plan_name))
