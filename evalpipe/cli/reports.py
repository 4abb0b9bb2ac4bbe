"""``evalpipe report`` and ``evalpipe compare``: reading run directories only."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from evalpipe.results import DEFAULT_ROOT, RunDirError, os_problem

from evalpipe.cli.common import USER_ERRORS, _fail, app, console, output_folder


@app.command()
def report(
    runs: Annotated[list[Path], typer.Argument(help="One or more run directories.")],
    out: Annotated[Optional[Path], typer.Option(help="Output folder (default: results/report).")] = None,
    resamples: Annotated[int, typer.Option(help="Bootstrap resamples for the 95% intervals.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    compat: Annotated[Optional[str], typer.Option(help="Report a compatibility scoring instead of the default.")] = None,
    parquet: Annotated[bool, typer.Option(help="Also write the samples as samples.parquet.")] = False,
    top: Annotated[int, typer.Option(help="Examples shown per error category / disagreement list.")] = 10,
) -> None:
    """Write a report of runs: HTML, Markdown and CSV.

    report.html is self-contained (open it from a file or an e-mail, no network): summary,
    leaderboard, per-task metrics with 95 % intervals, NER error analysis, operations, the paired
    comparison of two runs, every sample behind the numbers, and a metric glossary.
    """
    from evalpipe.report import build_report

    target = output_folder(out or DEFAULT_ROOT / "report", "--out")
    try:
        built = build_report(runs, target, resamples=resamples, seed=seed, compat=compat, parquet=parquet,
                             top=top)
    except USER_ERRORS as exc:
        raise _fail(exc) from None
    except OSError as exc:  # the disk filled, the folder went away
        raise _fail(RunDirError(os_problem(exc))) from None
    for label, path in (("html", built.html), ("markdown", built.markdown), ("leaderboard", built.csv),
                        ("parquet", getattr(built, "parquet", None))):
        if path:
            console.print(f"{label}: {path}", highlight=False)


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="Run A.")],
    run_b: Annotated[Path, typer.Argument(help="Run B.")],
    out: Annotated[Optional[Path], typer.Option(help="Also write compare.html and compare.md here.")] = None,
    resamples: Annotated[int, typer.Option(help="Paired bootstrap resamples.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    top: Annotated[int, typer.Option(help="Samples shown where the runs disagree most.")] = 10,
    compat: Annotated[Optional[str], typer.Option(help="Compare a compatibility scoring.")] = None,
) -> None:
    """Paired comparison of two runs on their shared samples.

    Differences A - B with paired bootstrap intervals and p-values, and the samples they disagree on most.
    """
    from evalpipe.report import compare_runs, render_compare_terminal

    if out is not None:
        output_folder(out, "--out")
    try:
        result = compare_runs(run_a, run_b, resamples=resamples, seed=seed, top=top, out=out, compat=compat)
    except USER_ERRORS as exc:
        raise _fail(exc) from None
    except OSError as exc:
        raise _fail(RunDirError(os_problem(exc))) from None
    # the comparison renderer escapes its own text and uses markup for emphasis
    render_compare_terminal(result, Console(width=None if sys.stdout.isatty() else 160))
