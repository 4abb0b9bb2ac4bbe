"""Command line: ``evalpipe run | score | show | contamination | judge | tasks | report | compare | serve | demo``.

Every user-facing failure (bad data, template, endpoint, options) ends as one clear line on
stderr and a non-zero exit code — never a traceback — and never prints an API key.

Exit codes: 0 success; 1 a problem stopped the run before it finished (bad input, unreachable
endpoint); 2 bad command-line usage; 3 the run finished but some requests failed for good
(re-running the same command retries only those); 130 interrupted (Ctrl-C; re-run to resume).

The commands live in modules by concern (``evaluate``, ``contamination``, ``judging``, ``reports``, ``catalog``,
``engines``); ``common`` holds the app they register on, the consoles and the one-line errors.
"""

from __future__ import annotations

# the order of import is the order `evalpipe --help` lists the commands in
from evalpipe.cli import evaluate, batch, contamination, judging, reports, catalog, engines  # noqa: F401,I001  (they register commands)
from evalpipe.cli.common import app

__all__ = ["app", "main"]


def main() -> None:
    app()
