"""``evalpipe batch-export RUN`` and ``evalpipe batch-import RUN FILE``: a run's requests answered by an
offline batch runner (:mod:`evalpipe.backends.batch_files`; ``docs/hosted.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from evalpipe.results import RunDir
from evalpipe.cli.common import USER_ERRORS, _fail, app, console


def _run_model(run: RunDir) -> str:
    """The model of a run directory (its config.json), with a clear error when it is none."""
    settings = run.read_config().get("config")
    if not isinstance(settings, dict) or not settings.get("model"):
        raise ValueError(f"{run.config_path}: not an evaluation run")
    if not run.store_path.is_file():
        raise ValueError(f"{run.path}: no responses.sqlite (run `evalpipe run … --batch-export FILE` first)")
    return str(settings["model"])


@app.command("batch-export")
def batch_export(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (results/<run>).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where the JSONL request lines go.")] = Path("requests.jsonl"),
    max_completion_tokens: Annotated[bool, typer.Option(help="Send the answer limit as max_completion_tokens (reasoning models).")] = False,
) -> None:
    """Write a run's unanswered requests as Batch API JSONL.

    For offline batch runners: vllm run-batch, a provider's console (docs/hosted.md)."""
    from evalpipe.backends.batch_files import export_pending

    run = RunDir(run_dir)
    try:
        model = _run_model(run)
        written = export_pending(run.store_path, model, output,
                                 "max_completion_tokens" if max_completion_tokens else "max_tokens")
    except USER_ERRORS as exc:
        raise _fail(exc) from None
    console.print(f"wrote {written} request line(s) to {output}", highlight=False)


@app.command("batch-import")
def batch_import(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (results/<run>).")],
    answers: Annotated[Path, typer.Argument(help="A Batch API output file (JSONL) answering the exported requests.")],
    model: Annotated[Optional[str], typer.Option(help="Accept answers naming this model (default: the run's).")] = None,
) -> None:
    """Store a batch output file's answers in a run.

    Then `evalpipe score RUN`, or run the same command again."""
    from evalpipe.backends.batch_files import BatchImportError, import_answers

    run = RunDir(run_dir)
    try:
        recorded = _run_model(run)
        result = import_answers(run.store_path, recorded, answers, accept=model)
    except (BatchImportError, *USER_ERRORS) as exc:
        raise _fail(exc) from None
    console.print(f"stored {result.stored} answer(s) from {answers}"
                  + (f"; {result.failed} line(s) without an answer (the next run asks them again)"
                     if result.failed else "") + f"; now: evalpipe score {run.path}", highlight=False)
