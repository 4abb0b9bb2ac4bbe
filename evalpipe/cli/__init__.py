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
