"""The errors evalpipe raises for a user to act on, and how the command line tells them from bugs.

An :class:`EvalpipeError` is an *expected* failure: a bad option, a malformed data or task file, an
endpoint that does not answer, a run directory another run holds. Its message is one line that names
what to fix (file, line, field, option), and the command line shows exactly that line with the
error's :attr:`~EvalpipeError.exit_code`. Anything else that escapes a command — a bare ``KeyError``,
``ValueError`` or ``TypeError`` — is a bug in evalpipe: it is shown with its traceback and a request
to report it, and exits :data:`EXIT_BUG`. Raising a bare ``ValueError`` for a user's mistake would
turn a mistake into a "bug report", and catching bare ``ValueError`` as a user error hid real bugs
behind one line — hence the types.

Each subclass says what kind of thing went wrong; the classes raised across the code base
(``DataError``, ``BackendError``, ``RunDirBusy`` …) derive from one of them and keep their older base
(``ValueError``, ``RuntimeError``) so code that catches that keeps working.

This module imports nothing from evalpipe, so every module may import it.
"""

from __future__ import annotations

__all__ = [
    "EXIT_BUG", "EXIT_USER_ERROR", "EngineError", "EndpointError", "EvalpipeError", "InputError",
    "RunDirProblem", "UnknownName", "UsageError",
]

#: a user error: fix what the message names and run again
EXIT_USER_ERROR = 1
#: a bug in evalpipe (an unexpected exception): traceback shown, please report it (sysexits EX_SOFTWARE)
EXIT_BUG = 70


class EvalpipeError(Exception):
    """A failure the user can act on; its message is one line naming what to fix.

    ``exit_code`` is what ``evalpipe`` exits with when it ends a command (see docs/errors.md)."""

    exit_code: int = EXIT_USER_ERROR


class UsageError(EvalpipeError, ValueError):
    """Options that cannot be used: a number out of range, an unknown name (task, engine, scoring),
    two options that exclude each other. Raised by :class:`evalpipe.config.RunConfig` and by the
    Python API as well as by the command line, so both get the same checks.

    ``option``: the command-line option at fault, when one is (the CLI names it in its usage error)."""

    def __init__(self, *args: object, option: str | None = None) -> None:
        super().__init__(*args)
        self.option = option


class InputError(EvalpipeError, ValueError):
    """A file the user gave is wrong: data, task file, template, rubric (the message names file,
    line and field)."""


class EndpointError(EvalpipeError, RuntimeError):
    """The model's (or a judge's, or an embedder's) endpoint cannot be used: unreachable, refuses
    the model, answers in a form evalpipe cannot read."""


class EngineError(EvalpipeError, RuntimeError):
    """A local engine evalpipe was asked to start is missing, did not start, or died."""


class RunDirProblem(EvalpipeError, RuntimeError):
    """A run directory (or its response store) cannot be used: busy, unreadable, not a run, full disk."""


#: an engine evalpipe started died while in use (evalpipe.engines.watch); answers so far are stored
EXIT_ENGINE_DIED = 4
#: the endpoint stopped answering mid-run: only refused connections for a while (evalpipe.backends.liveness)
EXIT_ENDPOINT_GONE = 5


class UnknownName(UsageError, KeyError):
    """A name that names nothing: a task, a suite. Also a ``KeyError``, which is what a lookup
    raises, for the code that catches that; its text is the message, unquoted (unlike KeyError's)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
