"""A plan written into a store the way a run writes it: staged on disk, then copied by the store."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from evalpipe.store.answers import ResponseStore
from evalpipe.pipeline.stage import PlanStage


def write_plan(store: ResponseStore, task: str, rows: Sequence[tuple[str, str]], packed: Sequence[str],
               texts: Mapping[str, str], infos: Sequence[Mapping[str, Any]] | None = None) -> None:
    """Plan ``task`` of ``store``: ``rows`` (sample id, key), each row's packed prompt and info."""
    infos_json = [json.dumps(dict(info)) for info in infos] if infos is not None else ["{}"] * len(rows)
    stage = PlanStage(store.path.parent / "stage")
    try:
        stage.write(task, ((sid, key, prompt, info) for (sid, key), prompt, info in zip(rows, packed, infos_json)))
        store.write_staged_plan(task, stage.path, task, texts)
    finally:
        stage.close()
