"""Realistic NCBI runs for report tests: a perfect and a sloppy scripted responder.

The sloppy responder is deterministic per sentence (by a hash of its text): ~1/10 answers are
refusals (parse failures), ~1/10 requests fail for good, ~1/10 answers drop the first entity,
~2/10 widen the first entity by one token, and the rest merge adjacent entities (both boundary errors).
"""

import asyncio
import re
import zlib
from pathlib import Path

from evalpipe.config import RunConfig
from evalpipe.pipeline.execute import execute
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task
from tests.support.scripted_backend import ScriptedBackend, query_text

LIMIT = 60
SPEC = get_task("ncbi_disease")


def gold_answers():
    return {ex.inputs["text"]: SPEC.shot_target(ex) for ex in SPEC.load(LoadOptions()).materialized().examples[:LIMIT]}


def sloppy_responder(gold):
    def respond(prompt):
        text = query_text(prompt)
        answer = gold[text]
        bucket = zlib.crc32(text.encode()) % 10
        if bucket == 0:
            return "I cannot help with that request."
        if bucket == 1:
            return RuntimeError("HTTP 500 after 3 attempts")
        if bucket == 2:
            return answer.replace("<disease>", "", 1).replace("</disease>", "", 1)
        if bucket in (3, 4):  # widen the first entity by one token: a boundary error
            return re.sub(r"</disease> ([^<\s]+)", r" \1</disease>", answer, count=1)
        return answer.replace("</disease> <disease>", " ")
    return respond


def make_run(root: Path, model: str, responder, limit: int = LIMIT) -> Path:
    config = RunConfig(tasks=("ncbi_disease",), model=model, base_url="http://127.0.0.1:1/v1", limit=limit)
    outcome = asyncio.run(execute(config, lambda _: ScriptedBackend(responder, model=model), root))
    return outcome.run_dir.path


def recorded_exits(monkeypatch, module) -> list:
    """The exit code of each forked child ``module`` (a report helper: browser_beside,
    read_beside) reaps through its ``_reaped`` (None: killed), in order."""
    real = module._reaped
    exits: list = []

    def reaped(pid: int):
        exits.append(real(pid))
        return exits[-1]

    monkeypatch.setattr(module, "_reaped", reaped)
    return exits
