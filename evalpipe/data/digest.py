"""The sha256 of a data file, as recorded in ``config.json`` and checked before re-scoring."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of the file's bytes, read in 1 MiB blocks (data files can be large)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
