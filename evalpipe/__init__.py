"""evalpipe: evaluate LLMs on clinical and biomedical language tasks.

Data flow (one module per arrow): tasks → prompting → backends → cache → parsers → metrics → results.

The Python API (docs/python-api.md): :func:`evaluate`, :func:`rescore`, :func:`load_run` and their
:class:`EvalResult`; errors a user can act on are :class:`EvalpipeError`\\ s (:mod:`evalpipe.errors`).
They are imported on first use, so ``import evalpipe`` stays cheap (the CLI imports it first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["EvalResult", "EvalpipeError", "__version__", "evaluate", "load_run", "rescore"]

#: public name → the module that defines it (imported when the name is first used)
_LAZY = {"EvalResult": "evalpipe.api", "evaluate": "evalpipe.api", "load_run": "evalpipe.api",
         "rescore": "evalpipe.api", "EvalpipeError": "evalpipe.errors"}

if TYPE_CHECKING:
    from evalpipe.api import EvalResult, evaluate, load_run, rescore
    from evalpipe.errors import EvalpipeError


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'evalpipe' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
