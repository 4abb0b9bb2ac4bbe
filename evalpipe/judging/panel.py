"""The judges of a judging run, and the rule that patient data stays local.

A judge is a model at an OpenAI-compatible endpoint (``--judge MODEL=URL``; ``MODEL`` is the name the
endpoint serves it under, and the judge's name in metrics: ``judge[MODEL]_accuracy``), or a local
engine evalpipe starts (``--judge-engine llamacpp``: the bundled SmolLM2-135M on loopback, for an
offline demo — a 135M model is no useful judge). Two judges with one name are refused: they would be
one coder counted twice in every agreement figure.

**Patient data guard.** A judge request carries the sample's inputs, its reference answer and the
model's answer. For a task marked credentialed (PhysioNet/MIMIC data, recorded per task in
``config.json``) that is the credentialed data itself, so a judge whose URL is not loopback or a
private address (or is reached through an environment proxy that is not) is refused — before any connection, with one line naming
``--allow-external-endpoint`` — unless the user passes that flag (then ``config.json`` and the task's
summary record that they did). The same check as for evaluated endpoints
(:func:`evalpipe.endpoints.route_problem`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.endpoints import is_local_url, redact_url, route_problem, route_record
from evalpipe.outcome import RunError
from evalpipe.errors import UsageError

__all__ = ["Judge", "check_patient_data", "model_key", "parse_judge"]


@dataclass(frozen=True)
class Judge:
    #: the model name the endpoint serves; the judge's name in metrics and in the store
    model: str
    url: str
    #: the local engine evalpipe started for this judge (``llamacpp``), None for a given endpoint
    engine: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    #: identity of the weights when evalpipe started the engine from a local file (self-preference checks)
    weights: str | None = None

    def describe(self) -> dict[str, Any]:
        """As recorded in config.json: the URL without credentials, never a key."""
        return {"model": self.model, "url": redact_url(self.url), "engine": self.engine,
                "local": is_local_url(self.url), **route_record(self.url), "served_model": self.model, "weights": self.weights,
                "api_key_env": self.api_key_env}


def parse_judge(text: str, api_key_env: str = "OPENAI_API_KEY") -> Judge:
    """``MODEL=URL`` → a Judge; ValueError with the expected form otherwise."""
    model, sep, url = text.partition("=")
    model, url = model.strip(), url.strip()
    if not sep or not model or not url.startswith(("http://", "https://")):
        raise UsageError(f"--judge expects MODEL=URL with an http(s) URL, e.g. "
                         f"gpt-judge=http://127.0.0.1:8001/v1 (got {redact_url(text) if '://' in text else text!r})")
    return Judge(model=model, url=url, api_key_env=api_key_env)


def check_panel(judges: Sequence[Judge]) -> None:
    """A jury needs at least one judge, and each judge once."""
    if not judges:
        raise RunError("no judge given: --judge MODEL=URL (repeatable), or --judge-engine llamacpp")
    seen: set[str] = set()
    for judge in judges:
        if judge.model in seen:
            raise RunError(f"judge {judge.model!r} is given twice; a jury counts each judge once")
        seen.add(judge.model)


def check_patient_data(credentialed_tasks: Iterable[str], judges: Sequence[Judge], allowed: bool) -> None:
    """Refuse to send credentialed tasks' answers to a judge that is not local (see module docstring)."""
    credentialed = list(dict.fromkeys(credentialed_tasks))
    if not credentialed or allowed:
        return
    for judge in judges:
        problem = route_problem(judge.url)  # the judge's URL and the proxy in front of it
        if problem is not None:
            raise RunError(
                f"task(s) {', '.join(credentialed)} use credentialed data (PhysioNet DUA): judging sends their inputs, "
                f"references and answers to judge {judge.model}, and {problem}; pass --allow-external-endpoint "
                "only if your data use agreement permits sending the data there"
            )


_FINGERPRINT = re.compile(r"-[0-9a-f]{12}\Z")


def model_key(name: str) -> str:
    """A model name reduced for matching a judge against an evaluated model: lower case, the last
    path component, without a ``.gguf`` extension or the fingerprint suffix evalpipe gives local
    llama.cpp models (``/models/Llama-3-8B.gguf`` and ``llama-3-8b`` match)."""
    base = Path(name.strip().rstrip("/")).name or name
    base = base.lower()
    base = base.removesuffix(".gguf")
    return _FINGERPRINT.sub("", base)
