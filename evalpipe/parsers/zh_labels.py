"""Parse a Chinese (or any) single-label answer into one label of a fixed set.

The rule is **exact label after normalisation**, nothing cleverer: an answer that merely
*contains* a label ("这两句话的意思不是完全相同" contains both 是 and 不是) is not guessed at.

1. **Answer body** (:func:`answer_body`): reasoning is dropped by
   :func:`evalpipe.text.reasoning.strip_reasoning` (up to the last ``</think>``; an unclosed ``<think>``
   drops everything after it), code-fence markers and markdown emphasis
   markers (``**``, ``__``) are removed, and the rest is stripped.
2. **Normalisation** (:func:`evalpipe.text.chinese.label_key`): NFKC width folding (``２`` ≡ ``2``,
   ``Ｄｉｓｅａｓｅ`` ≡ ``Disease``), case folding, all whitespace removed, trailing sentence
   punctuation and wrapping quotes/brackets removed, repeatedly (``是的。`` ≡ ``是的``,
   ``“否”`` ≡ ``否``, ``“是的”！`` ≡ ``是的``). Labels and aliases are normalised the same way.
3. **Lookup**: the normalised answer must equal the key of exactly one label or alias. If it
   does not, one answer prefix from :data:`ANSWER_PREFIXES` (``答：``, ``答案：``, ``标签：`` …,
   which models echo from prompts ending in ``答：``) is removed and the lookup is tried again.
4. **Failure**: anything else is a parse failure: ``value=None``, ``failed=True``, with
   ``invalid_label`` (non-empty answer that is not a label) or ``empty`` set. A failure is never
   turned into a label, so it cannot create a class in macro-F1 (see
   :mod:`evalpipe.metrics.classification`): it is simply wrong.

Diagnostics always hold ``empty``, ``invalid_label``, ``prefix_stripped`` and
``reasoning_stripped`` so run summaries can count them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from evalpipe.records import Prediction
from evalpipe.text.chinese import label_key
from evalpipe.text.reasoning import strip_reasoning

__all__ = ["ANSWER_PREFIXES", "LabelSet", "answer_body", "parse_label"]

#: prefixes (compared as label keys) removed once before a second lookup
ANSWER_PREFIXES = ("答案是", "答案为", "答案:", "答:", "回答:", "标签:", "类别:", "类型:", "结果:",
                   "answer:", "label:")

_FENCE = re.compile(r"```[A-Za-z0-9_+-]{0,20}")
#: markdown emphasis around the label (**是**, __否__); the markers carry no meaning
_EMPHASIS = re.compile(r"\*\*|__")


def answer_body(answer: str | None) -> tuple[str, bool]:
    """The answer without reasoning or code fences, stripped; and whether reasoning was removed."""
    split = strip_reasoning(answer)
    text, reasoning = split.answer, split.stripped
    return _EMPHASIS.sub("", _FENCE.sub("", text)).strip(), reasoning


@dataclass(frozen=True)
class LabelSet:
    """The valid labels of a task and, optionally, aliases that mean the same label.

    ``labels`` are the gold label strings (``"1"``, ``"Disease"``, ``"治疗方案"``); ``aliases``
    maps other accepted answers to one of them (``"是" → "1"``). Construction fails if two
    different labels would share a normalised key: such a set could not be parsed exactly.
    """

    labels: tuple[str, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)
    #: normalised key → label, built once by ``__post_init__`` (not compared, hashed or shown)
    _keys: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        keys: dict[str, str] = {}
        for answer, label in [(label, label) for label in self.labels] + list(self.aliases.items()):
            if label not in self.labels:
                raise ValueError(f"alias {answer!r} points to {label!r}, which is not a label")
            key = label_key(answer)
            if not key:
                raise ValueError(f"label or alias {answer!r} is empty after normalisation")
            if keys.get(key, label) != label:
                raise ValueError(f"{answer!r} and {keys[key]!r} normalise to the same key {key!r}")
            keys[key] = label
        object.__setattr__(self, "_keys", keys)

    def lookup(self, text: str) -> str | None:
        """The label whose key equals ``label_key(text)``, else None."""
        return self._keys.get(label_key(text))

    @classmethod
    def of(cls, labels: Iterable[str], aliases: Mapping[str, str] | None = None) -> LabelSet:
        return cls(tuple(dict.fromkeys(labels)), dict(aliases or {}))


def parse_label(answer: str | None, label_set: LabelSet) -> Prediction:
    """Answer → one label of ``label_set`` or a counted failure (see the module docstring)."""
    body, reasoning = answer_body(answer)
    diagnostics = {"empty": False, "invalid_label": False, "prefix_stripped": False,
                   "reasoning_stripped": reasoning}
    if not label_key(body):
        diagnostics["empty"] = True
        return Prediction(value=None, failed=True, diagnostics=diagnostics)
    label = label_set.lookup(body)
    if label is None:
        key = label_key(body)
        for prefix in ANSWER_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                # 答案是：是 — the colon after a prefix that has none of its own goes too
                label = label_set.lookup(key[len(prefix):].lstrip(":"))
                diagnostics["prefix_stripped"] = label is not None
                break
    if label is None:
        diagnostics["invalid_label"] = True
        return Prediction(value=None, failed=True, diagnostics=diagnostics)
    return Prediction(value=label, failed=False, diagnostics=diagnostics)
