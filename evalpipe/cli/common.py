"""What every command shares: the app, its consoles, exit codes, one-line errors, shared options."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.text import Text

from evalpipe import __version__
# concurrency defaults by engine live in evalpipe.configure (shared with the Python API)
from evalpipe.configure import DEFAULT_CONCURRENCY, INPROCESS_CONCURRENCY, LLAMACPP_CONCURRENCY  # noqa: F401
from evalpipe.endpoints import redact_url
from evalpipe.errors import EXIT_BUG, EXIT_ENDPOINT_GONE, EXIT_ENGINE_DIED, EvalpipeError, UsageError  # noqa: F401  (the codes: re-exported)
from evalpipe.results import os_problem
from evalpipe.tasks.registry import register_task_file, register_tasks_dir


#: what ``evalpipe --help`` says first (plain text: help is not reStructuredText)
APP_HELP = ("Evaluate LLMs on clinical and biomedical NLP tasks: resumable runs, re-scoring without a model, "
            "reports with intervals and a sample browser.")
# Click's plain help layout, not rich's boxes: at 80 columns rich cut option names
# (--tensor-parallel…); click puts a long option name on its own line and wraps only the help text.
# Command docstrings start with one sentence of at most ~60 characters: the command list shows it uncut.
app = typer.Typer(add_completion=False, no_args_is_help=True, help=APP_HELP, rich_markup_mode=None)
# markup off: paths and metric names contain brackets (bertscore[…]_f1, evalpipe[vllm])
console = Console(width=None if sys.stdout.isatty() else 160, markup=False)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160, markup=False)

EXIT_FAILED_REQUESTS = 3
EXIT_INTERRUPTED = 130
# (EXIT_ENGINE_DIED 4, EXIT_ENDPOINT_GONE 5 and EXIT_BUG 70 live in evalpipe.errors, beside their errors)
#: what a command shows as one line: evalpipe's user errors, and a file the user named that is not
#: there. Never a bare KeyError/ValueError/TypeError: those are bugs, shown by :func:`report_bug`
USER_ERRORS = (EvalpipeError, FileNotFoundError)


def output_folder(path: Path, option: str) -> Path:
    """``path`` as a folder evalpipe can write into (made if missing), or one line naming it and the
    option that gave it: a file in the way, a read-only place (once tracebacks from ``mkdir``)."""
    if path.exists() and not path.is_dir():
        raise _fail(UsageError(f"{path}: is a file, not a folder (given as {option}); name a folder"))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _fail(UsageError(f"{os_problem(exc)} (given as {option})")) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise _fail(UsageError(f"{path}: cannot write into this folder (given as {option})"))
    return path


def _fail(exc: BaseException, code: int | None = None) -> typer.Exit:
    """Show ``exc`` as one ``error:`` line; the exit to raise: ``code``, else the error's own
    :attr:`~evalpipe.errors.EvalpipeError.exit_code` (1 for anything else)."""
    message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    err.print(Text("error: ", style="bold red") + Text(message), highlight=False, soft_wrap=True)
    return typer.Exit(code if code is not None else getattr(exc, "exit_code", 1))


def shown_command(argv: list[str]) -> str:
    """The command line as a bug report may quote it: URLs without user-info or query (where keys
    hide). API keys themselves are never arguments (``--api-key-env`` names a variable)."""
    import shlex

    words = [redact_url(word) if "://" in word else word for word in argv]
    return shlex.join(["evalpipe", *words])


def report_bug(exc: BaseException, argv: list[str]) -> int:
    """Show an unexpected exception as what it is — a bug in evalpipe — and return :data:`EXIT_BUG`.

    The traceback is printed in full (without local variables: they may hold keys), followed by one
    line asking for a report with the version and the command; a user error never gets here."""
    import traceback

    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
    err.print(Text("bug: ", style="bold red") + Text(
        f"this is a bug in evalpipe {__version__}, not a mistake of yours; please report it with the "
        f"traceback above and the command: {shown_command(argv)}"), highlight=False, soft_wrap=True)
    return EXIT_BUG


# engine options shared by `run` and `serve`
TensorParallelOption = Annotated[Optional[int], typer.Option(help="vLLM: GPUs per model.")]
DtypeOption = Annotated[Optional[str], typer.Option(help="vLLM: dtype (auto, bfloat16, …).")]
GpuMemoryOption = Annotated[Optional[float], typer.Option(help="vLLM: share of GPU memory to use.")]
RevisionOption = Annotated[Optional[str], typer.Option(help="vLLM: model revision.")]
EngineArgOption = Annotated[list[str], typer.Option(
    "--engine-arg", help="Any other engine option, KEY=VALUE (repeatable), passed through: vLLM e.g. "
    "max-num-seqs=256, quantization=awq, enforce-eager=true; llama.cpp e.g. n_gpu_layers=20.")]
StartupTimeoutOption = Annotated[float, typer.Option(help="Seconds to wait for an engine evalpipe starts to answer.")]
# endpoint, data and run-directory options shared by `run` and `contamination`
ModelOption = Annotated[Optional[str], typer.Option(envvar="EVALPIPE_MODEL", help="Model name as the endpoint serves it.")]
BaseUrlOption = Annotated[list[str], typer.Option(help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1; repeat for replicas of the same model (default: $EVALPIPE_BASE_URL).")]
EngineOption = Annotated[Optional[str], typer.Option(help="Start a local engine: llamacpp (default model: the bundled SmolLM2-135M), vllm (server), vllm-inprocess.")]
EndpointOption = Annotated[str, typer.Option(help="chat (instruction-tuned models) or completions (base models).")]
ApiKeyEnvOption = Annotated[Optional[str], typer.Option(help="Name of the environment variable holding the API key (its value is never written anywhere). Default OPENAI_API_KEY; unset = 'EMPTY', fine for local servers. A variable named here must be set.")]
SplitOption = Annotated[Optional[str], typer.Option(help="Evaluated split (default: the task's test split).")]
LimitOption = Annotated[Optional[int], typer.Option(help="Only the first N samples, in file order.")]
DataOption = Annotated[list[str], typer.Option("--data", help="TASK=PATH: the task's evaluated file; TASK:ROLE=PATH another file it reads (its roles: `evalpipe tasks`; repeatable).")]
DataDirOption = Annotated[Optional[str], typer.Option(help="Folder holding the data files under their distributed names.")]
ConcurrencyOption = Annotated[Optional[int], typer.Option(help="Requests in flight at most (default 64; with --engine vllm-inprocess 256, so a batch holds up to 512 prompts; with --engine llamacpp 2).")]
TimeoutOption = Annotated[float, typer.Option(help="Seconds per request attempt.")]
MaxRetriesOption = Annotated[int, typer.Option(help="Retries per request for retryable failures.")]
UnreachableAfterOption = Annotated[float, typer.Option(help="Stop the run when the endpoint accepted no connection for this many seconds (only refused connections, nothing answered; 0 = never). Answers so far stay stored.")]
ReuseOtherEndpointOption = Annotated[bool, typer.Option(help="Reuse answers this run directory holds from another endpoint (other URL, or another model behind the same name); recorded in config.json. Without it such a run stops and says so.")]
MaxAnswerBytesOption = Annotated[int, typer.Option(help="Largest reply body read from the endpoint (default 16 MiB); a larger one is a counted error ('answer too large'), never stored.")]
AllowExternalOption = Annotated[bool, typer.Option(help="Allow credentialed (PhysioNet) data to go to a non-local endpoint.")]
RunNameOption = Annotated[Optional[str], typer.Option(help="Run directory name (default: derived from the options, so the same command resumes).")]
ResultsDirOption = Annotated[Path, typer.Option(help="Where run directories go.")]
TaskArgOption = Annotated[list[str], typer.Option("--task-arg", help="A task's own setting, TASK:NAME=VALUE (repeatable; `evalpipe tasks` lists each task's settings).")]
# judging options shared by `judge` and `run` (see evalpipe.judging)
JudgeOption = Annotated[list[str], typer.Option("--judge", help="A judge of free-text answers: MODEL=URL (an OpenAI-compatible /v1 endpoint serving MODEL); repeat for a jury.")]
JudgeEngineOption = Annotated[Optional[str], typer.Option("--judge-engine", help="Also judge with a local engine evalpipe starts: llamacpp (the bundled SmolLM2-135M; an offline demo, not a useful judge).")]
JudgeKeyOption = Annotated[Optional[str], typer.Option("--judge-api-key-env", help="Environment variable holding the judges' API key (never written anywhere; default OPENAI_API_KEY, unset = 'EMPTY'). A variable named here must be set.")]
JudgeRubricOption = Annotated[list[str], typer.Option("--judge-rubric", help="A rubric template FILE for every judged task, or TASK=FILE for one (repeatable; default: each task's own, see prompts/judge/).")]

#: the API key's variable when none is named; unset, the key sent is "EMPTY" (local servers need none)
DEFAULT_KEY_ENV = "OPENAI_API_KEY"


def key_env(name: str | None, option: str) -> str:
    """The API key's environment variable for ``option`` (``--api-key-env``, ``--judge-api-key-env``).

    Left out, it is :data:`DEFAULT_KEY_ENV`, and an unset default sends "EMPTY" (a local server needs
    no key). A variable the user *named* must hold a key: unset or empty it would silently send
    "EMPTY" to a server that was meant to get a key — a usage error before any request."""
    if name is None:
        return DEFAULT_KEY_ENV
    if not os.environ.get(name):
        raise typer.BadParameter(f"environment variable {name} is not set (or is empty); export the API key as "
                                 f"{name}, or leave {option} out for a server that needs no key", param_hint=option)
    return name


# ---- user task files (run, score, tasks) ----------------------------------------------------
TaskFileOption = Annotated[list[Path], typer.Option(
    "--task-file", help="A task file (YAML) to run (repeatable); see docs/tasks.md and `evalpipe new-task`.")]
TasksDirOption = Annotated[list[Path], typer.Option(
    "--tasks-dir", help="A folder of task files (*.yaml) to make available as --task NAME (repeatable; "
    "$EVALPIPE_TASKS_DIR is always loaded).")]


def _user_tasks(task_files: list[Path], tasks_dirs: list[Path]) -> list[str]:
    """Register the user's task folders and files; the names of the files' tasks (they are run)."""
    for folder in tasks_dirs:
        register_tasks_dir(folder)
    return [register_task_file(path).name for path in task_files]

