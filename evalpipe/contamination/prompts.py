"""The probe's two instructions, Jinja templates under ``prompts/contamination/``.

``guided.j2`` names the data set (the task's ``data.dataset``, else its name) and the split and asks
for the exact continuation; ``general.j2`` asks to complete the text without naming a source. Both
are rendered in the sandboxed, ``StrictUndefined`` environment task templates use, with
``dataset``, ``split``, ``first_piece`` and ``endpoint``; the chat form is one user message, the
completions form (base models) the same text as a plain prompt. Their sha256 goes into
``contamination.json``; an edited template changes every prompt's key, so its answers are asked anew.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import jinja2

from evalpipe.paths import REPO_ROOT
from evalpipe.prompting import TemplateError, sandboxed_environment
from evalpipe.records import GenerationParams, Message, Prompt

FOLDER = REPO_ROOT / "prompts" / "contamination"
GUIDED, GENERAL = "guided", "general"
INSTRUCTIONS = (GUIDED, GENERAL)


@dataclass(frozen=True)
class Instructions:
    """The rendered request for one first half, in the run's endpoint form."""

    dataset: str
    split: str
    endpoint: str

    def prompt(self, instruction: str, first_piece: str, params: GenerationParams) -> Prompt:
        try:
            text = sandboxed_environment(FOLDER).get_template(f"{instruction}.j2").render(
                dataset=self.dataset, split=self.split, first_piece=first_piece, endpoint=self.endpoint)
        except jinja2.TemplateError as exc:
            raise TemplateError(f"{FOLDER / (instruction + '.j2')}: {exc}") from None
        if self.endpoint == "completions":
            return Prompt(params=params, text=text)
        return Prompt(params=params, messages=(Message("user", text.strip()),))


def template_sha256() -> dict[str, str]:
    """Each instruction template's sha256 (recorded with the result)."""
    return {name: hashlib.sha256((FOLDER / f"{name}.j2").read_bytes()).hexdigest() for name in INSTRUCTIONS}
