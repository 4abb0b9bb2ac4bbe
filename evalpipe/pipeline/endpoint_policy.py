"""Where a run's data may be sent: credentialed data stays on loopback unless explicitly allowed.

A module of its own because runs and the contamination probe (:mod:`evalpipe.contamination`) must be
guarded by the very same rule, checked before anything is counted or sent (budgeting sends texts to
the server's tokenizer).
"""

from __future__ import annotations

from collections.abc import Sequence

from evalpipe.config import RunConfig
from evalpipe.endpoints import route_problem
from evalpipe.outcome import RunError
from evalpipe.pipeline.prepared import PreparedTask
from evalpipe.tasks.base import TaskSpec


def check_endpoint_policy(prepared: Sequence[PreparedTask], config: RunConfig) -> None:
    """Refuse to send credentialed data to a non-local endpoint unless explicitly allowed."""
    check_specs_endpoint_policy([p.spec for p in prepared], config)


def check_specs_endpoint_policy(specs: Sequence[TaskSpec], config: RunConfig) -> None:
    """:func:`check_endpoint_policy` for tasks by their specs (what a probe of a task's data sends,
    :mod:`evalpipe.contamination`, is guarded by the very same rule)."""
    credentialed = [spec.name for spec in specs if spec.credentialed]
    if not credentialed or config.allow_external_endpoint:
        return
    urls = (config.base_url, *config.replicas, config.embeddings_url)  # every replica, and the embedder
    for url in [u for u in urls if u]:
        problem = route_problem(url)  # the endpoint and the proxy in front of it (redirects are never followed)
        if problem is not None:
            raise RunError(
                f"task(s) {', '.join(credentialed)} use credentialed data (PhysioNet DUA) and "
                f"{problem}; pass --allow-external-endpoint "
                "only if your data use agreement permits sending the data there"
            )
