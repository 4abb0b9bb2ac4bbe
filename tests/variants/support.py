"""A scripted model whose answer depends on the prompt variant, for runs with prompt conditions.

It finds the evaluated NCBI sentence in a prompt of *any* variant (the last evaluated sentence the
last user message contains) and answers by a per-variant policy keyed on text only that variant's
template has — so each variant gets a different, known score.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from evalpipe.config import RunConfig
from evalpipe.outcome import RunOutcome
from evalpipe.records import Prompt
from evalpipe.pipeline.execute import execute
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task
from tests.support.scripted_backend import ScriptedBackend, last_user_text

SPEC = get_task("ncbi_disease")
EXAMPLES = SPEC.load(LoadOptions()).materialized().examples
GOLD = {ex.inputs["text"]: SPEC.shot_target(ex) for ex in EXAMPLES}
POSITION = {ex.inputs["text"]: i for i, ex in enumerate(EXAMPLES)}
#: text only one variant's prompt holds → that variant's name
MARKERS = {"Sentence:": "concise", "NCBI Disease corpus guidelines": "guidelines",
           "Now process this text.": "instructions_first"}


def sentence(prompt: Prompt) -> str:
    text = last_user_text(prompt)
    # the evaluated sentence comes last; a sentence inside it ends no later and is shorter
    found = [(text.rfind(s) + len(s), len(s), s) for s in GOLD if s in text]
    return max(found)[2]


def variant(prompt: Prompt) -> str:
    text = "\n".join(m.content for m in prompt.messages or ()) if prompt.messages else prompt.text or ""
    if prompt.messages and prompt.messages[0].role == "system":
        return "system_role"
    return next((name for marker, name in MARKERS.items() if marker in text), "default")


def answer(prompt: Prompt) -> str:
    """default and system_role: perfect; concise: every 3rd sentence copied untagged (entities
    missed); guidelines: every 2nd empty (a parse failure); instructions_first: every 4th untagged."""
    text = sentence(prompt)
    i = POSITION[text]
    name = variant(prompt)
    if name == "concise" and i % 3 == 0 or name == "instructions_first" and i % 4 == 0:
        return f"<response>{text}</response>"
    if name == "guidelines" and i % 2 == 0:
        return ""  # an empty answer: a parse failure
    return GOLD[text]


def run(config: RunConfig, root: Path, responder: Callable[[Prompt], str | Exception] = answer,
        ) -> tuple[RunOutcome, ScriptedBackend]:
    backend = ScriptedBackend(responder)
    return asyncio.run(execute(config, lambda _: backend, root)), backend


def config(**kw) -> RunConfig:
    base = dict(tasks=("ncbi_disease",), model="m", base_url="http://127.0.0.1:1/v1", limit=12)
    base.update(kw)
    return RunConfig(**base)
