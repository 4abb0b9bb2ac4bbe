"""Command line: ``evalpipe run | score | show | contamination | judge | tasks | report | compare | serve | demo``.

Every user-facing failure (bad data, template, endpoint, options) ends as one clear line on
stderr and a non-zero exit code — never a traceback — and never prints an API key.

Exit codes (docs/errors.md): 0 success; 1 a problem stopped the run before it finished (bad input,
unreachable endpoint); 2 bad command-line usage; 3 the run finished but some requests failed for
good (re-running the same command retries only those); 4 an engine evalpipe started died; 5 the
endpoint went away mid-run; 70 a bug in evalpipe (traceback and a request to report it);
130 interrupted (Ctrl-C; re-run to resume).

The commands live in modules by concern (``evaluate``, ``contamination``, ``judging``, ``reports``, ``catalog``,
``engines``); ``common`` holds the app they register on, the consoles and the one-line errors.
"""

from __future__ import annotations

# the order of import is the order `evalpipe --help` lists the commands in
from evalpipe.cli import evaluate, batch, contamination, judging, reports, catalog, engines  # noqa: F401,I001  (they register commands)
from evalpipe.cli.common import _fail, app, report_bug
from evalpipe.errors import EvalpipeError

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> None:
    """Run one command. A user error one of them did not show itself is one line with its exit
    code; any other exception is a bug: traceback, a request to report it, exit 70."""
    import sys

    args = sys.argv[1:] if argv is None else list(argv)
    try:
        app(args=args, prog_name="evalpipe")
    except EvalpipeError as exc:
        raise SystemExit(_fail(exc).exit_code) from None
    except Exception as exc:  # noqa: BLE001  (anything else is a bug, and is shown as one)
        raise SystemExit(report_bug(exc, args)) from None
    finally:
        if argv is None:  # the command line itself: the process ends now
            _leaving()


def _leaving() -> None:
    """Let the interpreter's shutdown skip its garbage collections over what is left (``gc.freeze``):
    they cost a large report ~0.3 s of its ~7 (94,000 NCBI samples: 0.30-0.36 s from the command's end
    to the process's, 0.07-0.08 s so; issue 28), and the whole run as much. Every file, store and
    process is closed by the command itself, never by a collection at exit; only garbage in
    reference cycles is left unfinalised, as the process's memory goes back at once anyway. Not
    for a caller that gives ``argv`` (a test, a notebook): its process goes on."""
    import gc

    gc.freeze()
