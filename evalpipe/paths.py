"""Where evalpipe finds the files it ships: the checkout's ``data/`` and ``prompts/``.

evalpipe is installed in editable mode (``pip install -e .``, as ``run.sh`` does), so the shipped
data and templates are read from the checkout; one definition here instead of a ``parents[N]``
in every module that needs them (which silently breaks when a module moves).
"""

from __future__ import annotations

from pathlib import Path

#: the evalpipe checkout (the folder holding ``pyproject.toml``)
REPO_ROOT = Path(__file__).resolve().parent.parent
#: data that ships with evalpipe, each folder with its source and licence
SHIPPED_DATA = REPO_ROOT / "data"
