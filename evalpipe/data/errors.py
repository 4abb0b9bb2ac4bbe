"""Input errors that name the file, the line and the field, raised before any request is sent."""

from __future__ import annotations

from pathlib import Path
from evalpipe.errors import InputError


class DataError(InputError):
    """A problem with a user-supplied or shipped data file.

    The message always reads ``FILE:LINE: FIELD: what is wrong (expected …)`` so a user can open
    the file at the right place; ``line`` is 1-based, None for whole-file problems.
    """

    def __init__(self, path: str | Path, line: int | None, field: str | None, problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        what = f"{field}: {problem}" if field else problem
        super().__init__(f"{where}: {what}")
