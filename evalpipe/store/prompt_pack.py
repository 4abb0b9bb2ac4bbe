"""Prompts kept as pieces: text that many prompts of a run share is stored once, by its sha256.

A 5-shot NCBI prompt is ~2,600 characters, of which ~2,450 — the shots and the instructions — are
the same in every prompt of the task; only the sentence differs. Stored whole, 47,000 prompts are
130 MB of one repeated prefix. So the store keeps each prompt *packed*: every long string of the
prompt's JSON (a message's content, a completion prompt's text) becomes a list of pieces, where a
piece is either the prompt's own text or a reference to a shared text kept once in the store
(table ``texts``, keyed by the text's sha256 — its first 32 hex digits)::

    {"params": {…}, "messages": [{"role": "user", "content": {"$pieces": [["9f2c…"], "Clustering of … [0]\\n"]}}]}

Which text is shared is learnt per plan (a task under one prompt condition) from its first
prompts: for each string *slot* (its path in the prompt's JSON: ``messages.0.content``) the longest
prefix common to all of them, then the longest common suffix of what remains. Every later prompt
whose slot starts with that prefix and ends with that suffix references both; one that does not
(an input that happens to differ there) keeps its text whole — packing never guesses, and
:func:`unpack` always gives back exactly the prompt that was packed. Shared parts shorter than
:data:`MIN_SHARED` characters stay inline (a reference would not be shorter). A slot identical in
every prompt (a system message, shots given as turns) becomes one reference.

Why learn from the first prompts rather than all: the plan is written in one pass while prompts
are rendered, so nothing has to be held or rendered twice; :data:`LEARN` = 64 prompts that all
begin with the same word by chance are not a real risk, and the price of one would only be that
later prompts are stored whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["LEARN", "MIN_SHARED", "PIECES", "Packer", "is_packed", "referenced", "text_key", "unpack"]

#: prompts a plan's shared texts are learnt from
LEARN = 64
#: shared prefixes/suffixes shorter than this stay inline
MIN_SHARED = 64
#: the marker of a packed string in a prompt's JSON
PIECES = "$pieces"

Path = tuple[str | int, ...]


def text_key(text: str) -> str:
    """What a shared text is stored under: the first 128 bits of its sha256, in hex (UTF-8; a lone
    surrogate as its own bytes). Every packed prompt repeats its references, and a run has a handful
    of shared texts: 32 hex digits make no collision conceivable and keep references short."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix: a binary search over slice comparisons (C speed)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _common_suffix(a: str, b: str) -> int:
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            low = mid
        else:
            high = mid - 1
    return low


#: leaves of a prompt's JSON that hold no string (answered before the ``Mapping`` check, an ABC's)
_NUMBERS = frozenset({int, float, bool, type(None)})


def _slots(obj: Any, path: Path = ()) -> list[tuple[Path, str]]:
    """Every string of a prompt's JSON with its path, in document order (only long strings are
    worth packing). Collected into one list: a generator per level was most of packing's cost."""
    found: list[tuple[Path, str]] = []
    _collect(obj, path, found)
    return found


def _collect(obj: Any, path: Path, found: list[tuple[Path, str]]) -> None:
    if type(obj) in _NUMBERS:
        return
    if isinstance(obj, str):
        if len(obj) >= MIN_SHARED:
            found.append((path, obj))
    elif type(obj) is dict or isinstance(obj, Mapping):
        for key, value in obj.items():
            _collect(value, (*path, key), found)
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            _collect(value, (*path, index), found)


def _replace(obj: Any, path: Path, value: Any) -> Any:
    """``obj`` with the value at ``path`` replaced (copies along the path only)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if type(obj) is dict or isinstance(obj, Mapping):
        return {k: (_replace(v, rest, value) if k == head else v) for k, v in obj.items()}
    return [(_replace(v, rest, value) if i == head else v) for i, v in enumerate(obj)]


class Packer:
    """Packs the prompts of one plan; learns its shared texts from the first ones (see module doc).

    ``learn(prompts)`` with the plan's first prompts (as JSON objects), then ``pack(prompt)`` for each;
    ``texts`` are the shared texts referenced so far (key → text), for the caller to store.
    """

    def __init__(self) -> None:
        #: slot → (prefix, suffix) shared by the learnt prompts
        self._shared: dict[Path, tuple[str, str]] = {}
        self.texts: dict[str, str] = {}
        self._keys: dict[str, str] = {}  # shared text -> its text_key

    def learn(self, prompts: Iterable[Mapping[str, Any]]) -> None:
        seen: dict[Path, list[str]] = {}
        for prompt in prompts:
            for path, text in _slots(prompt):
                seen.setdefault(path, []).append(text)
        for path, texts in seen.items():
            prefix = texts[0]
            for text in texts[1:]:
                prefix = prefix[:_common_prefix(prefix, text)]
            rests = [text[len(prefix):] for text in texts]
            suffix = rests[0]
            for rest in rests[1:]:
                suffix = suffix[len(suffix) - _common_suffix(suffix, rest):]
            prefix = prefix if len(prefix) >= MIN_SHARED else ""
            suffix = suffix if len(suffix) >= MIN_SHARED else ""
            if prefix or suffix:
                self._shared[path] = (prefix, suffix)

    def _ref(self, text: str) -> list[str]:
        key = self._keys.get(text)
        if key is None:  # a plan has a handful of shared texts: each hashed once, not per prompt
            key = self._keys[text] = text_key(text)
        self.texts.setdefault(key, text)
        return [key]

    def pack(self, prompt: Mapping[str, Any]) -> Any:
        """The prompt's JSON with each slot that holds a shared text as ``{"$pieces": [...]}``."""
        packed: Any = prompt
        for path, text in _slots(prompt):
            prefix, suffix = self._shared.get(path, ("", ""))
            if prefix and not text.startswith(prefix):
                prefix = ""
            if suffix and not (text.endswith(suffix) and len(text) - len(suffix) >= len(prefix)):
                suffix = ""
            if not prefix and not suffix:
                continue
            pieces: list[Any] = []
            if prefix:
                pieces.append(self._ref(prefix))
            own = text[len(prefix):len(text) - len(suffix)]
            if own:
                pieces.append(own)
            if suffix:
                pieces.append(self._ref(suffix))
            packed = _replace(packed, path, {PIECES: pieces})
        return packed


def is_packed(obj: Any) -> bool:
    return isinstance(obj, Mapping) and len(obj) == 1 and PIECES in obj


def referenced(obj: Any) -> set[str]:
    """The shared-text keys a packed prompt refers to."""
    if is_packed(obj):
        return {piece[0] for piece in obj[PIECES] if isinstance(piece, list)}
    if isinstance(obj, Mapping):
        return set().union(*(referenced(v) for v in obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*(referenced(v) for v in obj)) if obj else set()
    return set()


def unpack(obj: Any, texts: Mapping[str, str]) -> Any:
    """The prompt JSON :meth:`Packer.pack` was given (``texts``: key → shared text).

    Every request unpacks its prompt as it is sent, so the JSON's own types (decoded dicts, lists
    and strings) go a fast way — exact type checks, string leaves not recursed into; measured ×1.3
    over the general rules, which any other mapping or list still follows (same results)."""
    kind = type(obj)
    if kind is str:
        return obj
    if kind is dict:
        if len(obj) == 1 and PIECES in obj:
            return "".join(texts[piece[0]] if isinstance(piece, list) else piece for piece in obj[PIECES])
        return {k: v if type(v) is str else unpack(v, texts) for k, v in obj.items()}
    if kind is list:
        return [v if type(v) is str else unpack(v, texts) for v in obj]
    if is_packed(obj):
        return "".join(texts[piece[0]] if isinstance(piece, list) else piece for piece in obj[PIECES])
    if isinstance(obj, Mapping):
        return {k: unpack(v, texts) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unpack(v, texts) for v in obj]
    return obj
