"""JSON lines, read one way everywhere: ``(line number, value)`` per non-blank line.

Every loader that reads JSON lines (CLUE, CBLUE, Huatuo, PromptCBLUE) goes through here, so a
broken line is always reported the same way — ``FILE:LINE: not valid JSON (…)`` — before any
request is sent. A UTF-8 byte-order mark is accepted (spreadsheet exports write one).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalpipe.data.errors import DataError


def parse_json_lines(path: Path, text: str) -> list[tuple[int, Any]]:
    """``(1-based line, value)`` for each non-blank line of ``text`` (the content of ``path``)."""
    out: list[tuple[int, Any]] = []
    # split on "\n" only: str.splitlines() also breaks at U+2028/U+2029/U+0085, which
    # json.dumps(ensure_ascii=False) leaves unescaped inside strings
    for number, line in enumerate(text.split("\n"), start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise DataError(path, number, None, f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    return out


def read_json_lines(path: Path, missing: str = "file not found") -> list[tuple[int, Any]]:
    """The file's JSON lines; ``missing`` is the message when the file does not exist."""
    if not path.is_file():
        raise DataError(path, None, None, missing)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(path, None, None, f"cannot read as UTF-8 text: {exc}") from None
    return parse_json_lines(path, text)
