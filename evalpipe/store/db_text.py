"""Text kept losslessly in SQLite, whatever the string holds.

Text that UTF-8 cannot encode is stored losslessly. A JSON answer may carry a lone surrogate
(``"\\udcff"`` is valid JSON, and ``json.loads`` gives a Python string holding U+DCFF); SQLite's
driver refuses such a string, and one refused answer would stop every re-run at the same place.
So a string that does not encode is stored as a BLOB of its ``surrogatepass`` UTF-8 bytes in the
same column (SQLite keeps a BLOB as it is in a TEXT column; no schema change), and every read
decodes a BLOB back to the very same string (:func:`to_db_text`, :func:`from_db_text`). Ordinary
text keeps the TEXT storage class, byte for byte as before.
"""

from __future__ import annotations

from typing import overload


@overload
def to_db_text(value: str) -> str | bytes: ...
@overload
def to_db_text(value: None) -> None: ...
@overload
def to_db_text(value: str | None) -> str | bytes | None: ...
def to_db_text(value: str | None) -> str | bytes | None:
    """``value`` as SQLite can store it: itself, or (when UTF-8 cannot encode it) its bytes.

    The bytes are UTF-8 with lone surrogates written as their three-byte forms
    (``surrogatepass``), so :func:`from_db_text` gives back exactly ``value``.
    """
    if value is None:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")
    return value


@overload
def from_db_text(value: str | bytes) -> str: ...
@overload
def from_db_text(value: None) -> None: ...
@overload
def from_db_text(value: str | bytes | None) -> str | None: ...
def from_db_text(value: str | bytes | None) -> str | None:
    """The string :func:`to_db_text` stored (a BLOB is decoded with ``surrogatepass``)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogatepass")
    return value
