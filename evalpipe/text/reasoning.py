"""A reasoning model's ``<think>`` block, taken out of its answer — one rule for every parser and judge.

Reasoning models (DeepSeek-R1, Qwen3, QwQ …) write ``<think> … </think>`` before the answer. The
reasoning may quote options, labels and tags it then rejects, so it is never read as the answer:

* **Closed block.** Everything up to the *last* closing tag is reasoning (``<think>A or B?</think>B``
  → ``B``). This also covers chat templates that put the opening ``<think>`` in the prompt, so the
  answer holds only ``… </think> B``.
* **Unclosed block.** An opening tag with no closing tag after it: the model was still reasoning when
  it stopped (``max_tokens`` reached, or a stop sequence inside the reasoning). Only the text before
  the tag is the answer (``<think>It is probably B`` → ``""``); ``unclosed`` is set, so a parser
  counts "truncated in reasoning" as its own failure instead of guessing from half a thought.
  A caller whose answer format has its own wrapper (``<response>``) may resume the answer there
  (``resume_at``): ``<think>… <response>…`` keeps the response.

Tags are matched in any case, with blanks inside the brackets and attributes (``< THINK >``,
``</think >``, ``<think type="x">``), never across a line break.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Reasoning", "strip_reasoning"]

_OPEN = re.compile(r"<[ \t]{0,4}think(?![A-Za-z0-9_.:-])[^<>\n]{0,256}>", re.IGNORECASE)
_CLOSE = re.compile(r"<[ \t]{0,4}/[ \t]{0,4}think(?![A-Za-z0-9_.:-])[^<>\n]{0,256}>", re.IGNORECASE)


@dataclass(frozen=True)
class Reasoning:
    """An answer split from its reasoning.

    ``answer`` is the text a grader reads (not stripped of blanks: callers differ); ``stripped``
    says a reasoning block was removed; ``unclosed`` says the block was never closed (the model
    stopped inside its reasoning)."""

    answer: str
    stripped: bool
    unclosed: bool

    @property
    def only_reasoning(self) -> bool:
        """The model stopped inside its reasoning and wrote no answer before it: truncated in reasoning."""
        return self.unclosed and not self.answer.strip()


def strip_reasoning(text: str | None, resume_at: re.Pattern[str] | None = None) -> Reasoning:
    """``text`` without its reasoning block (see the module docstring); never raises."""
    text = text if isinstance(text, str) else ""
    closes = list(_CLOSE.finditer(text))
    if closes:
        last = closes[-1].end()
        # a block re-opened after the last close and never closed: the model stopped in it
        reopened = _OPEN.search(text, last)
        if reopened is None:
            return Reasoning(text[last:], True, False)
        return Reasoning(text[last:reopened.start()], True, True)
    opened = _OPEN.search(text)
    if opened is None:
        return Reasoning(text, False, False)
    resumed = resume_at.search(text, opened.end()) if resume_at is not None else None
    tail = text[resumed.start():] if resumed is not None else ""
    return Reasoning(text[: opened.start()] + tail, True, resumed is None)
