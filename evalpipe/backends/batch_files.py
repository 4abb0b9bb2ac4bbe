"""Batch files for offline batch runners: ``evalpipe batch-export`` and ``batch-import`` (issue 25).

A GPU box without a route to the evaluation host (``vllm run-batch -i requests.jsonl -o
answers.jsonl``) or a provider's web console reads the very request lines ``run --batch`` uploads
(:mod:`evalpipe.backends.batch_lines`) and writes the same output lines back.

* **Export** writes one line per distinct request of the run's plans that has no stored answer,
  in plan order (``custom_id`` = the request's cache key, ``body.model`` = the run's model).
* **Import** reads an output file whole before storing anything, and refuses it with one line naming
  the file and line when a line is not a batch answer, names a ``custom_id`` the run never asked for,
  or was answered by another model than the run's; otherwise every answer is stored (committed in
  one transaction) with the file's name as its endpoint, and lines that carry an error are counted,
  not stored — the next ``evalpipe run`` of the same command asks them again.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from evalpipe.backends.batch_lines import BatchLineError, lines_of, read_output_line, request_line
from evalpipe.store.answers import ResponseStore
from evalpipe.records import Completion, Prompt

__all__ = ["BatchImportError", "Imported", "export_pending", "import_answers"]

_PAGE = 500


class BatchImportError(ValueError):  
    """A batch output file that cannot be imported: one line naming the file, the line and why."""


def _pending_keys(store_path: Path) -> list[str]:
    """Distinct keys of every stored plan without an answer, in plan order."""
    db = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT p.key FROM plan p WHERE NOT EXISTS (SELECT 1 FROM responses r WHERE r.key = p.key) "
                          "ORDER BY p.task, p.position").fetchall()
    finally:
        db.close()
    return list(dict.fromkeys(k for (k,) in rows))


def export_pending(store_path: Path, model: str, out: Path, completion_tokens_field: str = "max_tokens") -> int:
    """Write the request lines of every unanswered request to ``out``; how many.

    Prompts scored by log-likelihood (``choices``) are left out: no Batch API endpoint returns prompt
    log-probabilities."""
    keys = _pending_keys(store_path)
    store = ResponseStore(store_path)
    written = 0
    try:
        with out.open("w", encoding="utf-8") as handle:
            for start in range(0, len(keys), _PAGE):
                page = keys[start:start + _PAGE]
                prompts = store.prompts(page)
                for key in page:
                    prompt = Prompt.from_json(prompts[key])
                    if prompt.choices is not None:
                        continue
                    handle.write(request_line(key, model, prompt, completion_tokens_field) + "\n")
                    written += 1
    finally:
        store.close()
    return written


@dataclass
class Imported:
    stored: int = 0
    failed: int = 0
    already: int = 0
    errors: dict[str, int] = field(default_factory=dict)


def import_answers(store_path: Path, model: str, path: Path, accept: str | None = None) -> Imported:
    """Store the answers of a batch output file (see the module docstring); raises BatchImportError.

    ``accept``: the model name the answers may carry when the server names it otherwise (a vLLM
    server serving the run's model from a path)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise BatchImportError(f"{path}: cannot read it ({exc})") from None
    db = sqlite3.connect(f"file:{store_path}?mode=ro", uri=True)
    try:
        planned = {k for (k,) in db.execute("SELECT DISTINCT key FROM plan")}
        answered = {k for (k,) in db.execute("SELECT key FROM responses")}
    finally:
        db.close()
    results: list[tuple[str, Completion]] = []
    outcome = Imported()
    for number, line in lines_of(text):
        where = f"{path}:{number}"
        try:
            result = read_output_line(line, batch_id=None, where=where)
        except BatchLineError as exc:
            raise BatchImportError(str(exc)) from None
        if result.key not in planned:
            raise BatchImportError(f"{where}: custom_id {result.key[:16]}… is not a request of this run (was the file "
                               "exported from another run directory?)")
        if result.model is not None and result.model not in (model, accept) and not _same_model(result.model, model):
            raise BatchImportError(f"{where}: answered by model {result.model!r}, but the run's model is {model!r}")
        if not result.completion.ok:
            outcome.failed += 1
            reason = result.completion.error or "error"
            outcome.errors[reason] = outcome.errors.get(reason, 0) + 1
            continue
        if result.key in answered:
            outcome.already += 1
        results.append((result.key, Completion(text=result.completion.text,
                                               finish_reason=result.completion.finish_reason,
                                               usage=result.completion.usage, reasoning=result.completion.reasoning,
                                               endpoint_url=f"batch file {path.name}")))
    store = ResponseStore(store_path)
    try:
        store.put_many(model, results)
    finally:
        store.close()
    outcome.stored = len(results)
    return outcome


def _same_model(answered: str, model: str) -> bool:
    """OpenAI answers with a dated snapshot of the model asked for (``gpt-4o-mini`` →
    ``gpt-4o-mini-2024-07-18``): that is the same model."""
    return answered.startswith(model + "-") and answered[len(model) + 1:][:1].isdigit()
