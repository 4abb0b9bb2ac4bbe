"""Scripted data, an evaluated model and two scripted judges for the judging tests.

Twenty synthetic Huatuo-style questions (``Q00`` … ``Q19``; invented text, no real data). The
evaluated model answers ``ANSWER-<i>`` followed by a sentence repeated ``1 + i % 5`` times (so answers
differ in length). Each judge rates sample ``i`` with the ratings in :data:`RATINGS` — a fixed table,
so every aggregate can be computed independently in the tests — in its own style:

* ``judge-a`` writes plain JSON with a rationale (sample 8: a trailing comma, which is tolerated);
* ``judge-b`` writes prose around a fenced ```json block; on sample 3 its first reply has no JSON
  (then its retry is usable), and on sample 5 both replies are unusable (a rating out of scale, then
  a refusal): one judge failure.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

N = 20
CRITERIA = ("accuracy", "completeness", "clarity")
JUDGES = ("judge-a", "judge-b")
EVALUATED = "evaluated-model"
#: judge-b's first reply to this sample is unusable, its retry usable
RETRIED = 3
#: judge-b's replies to this sample are unusable twice: a judge failure
FAILED = 5


def _table(seed: int, bias: int) -> dict[int, dict[str, int]]:
    rng = random.Random(seed)
    table = {}
    for i in range(N):
        base = 1 + (i * 7) % 5
        table[i] = {c: min(5, max(1, base + rng.choice((-1, 0, 0, 1)) + bias * (c == "clarity"))) for c in CRITERIA}
    return table


#: judge → sample index → criterion → rating
RATINGS: dict[str, dict[int, dict[str, int]]] = {"judge-a": _table(1, 0), "judge-b": _table(2, 1)}


def usable_ratings() -> dict[str, dict[int, dict[str, int]]]:
    """What the judges' final usable verdicts are: judge-b has none for sample FAILED."""
    return {j: {i: r for i, r in table.items() if not (j == "judge-b" and i == FAILED)} for j, table in RATINGS.items()}


def answer(i: int) -> str:
    return f"ANSWER-{i:02d} " + "多喝水，注意休息。" * (1 + i % 5)


def write_questions(path: Path) -> Path:
    """A Huatuo-format file of the N synthetic questions (invented text)."""
    rows = [{"questions": f"Q{i:02d} 我最近头痛，应该怎么办？", "answers": f"参考答案 {i:02d}：多休息，必要时就医。"}
            for i in range(N)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _all_text(body: Mapping[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in body.get("messages") or [])


def judge_reply(judge: str, i: int, retry: bool) -> str:
    ratings = RATINGS[judge][i]
    if judge == "judge-a":
        text = json.dumps({"rationale": f"sample {i} is fine", **ratings})
        return text[:-1] + ",}" if i == 8 else text
    if i == RETRIED and not retry:
        return "The answer is reasonable and I would rate it well overall."
    if i == FAILED:
        return "I cannot rate this answer." if retry else json.dumps({**ratings, "accuracy": 7})
    return f"Here is my assessment.\n```json\n{json.dumps(ratings)}\n```\nThank you."


def responder(body: Mapping[str, Any]) -> str:
    """The fake server's answers: the evaluated model's, and each judge's scripted reply."""
    model = body.get("model")
    text = _all_text(body)
    if model == EVALUATED:
        return answer(int(re.search(r"Q(\d\d)", text).group(1)))
    i = int(re.search(r"ANSWER-(\d\d)", text).group(1))
    return judge_reply(str(model), i, retry=len(body.get("messages") or []) > 2)


def prompt_reply(judge: str, prompt) -> str:
    """The scripted judge's reply to an evalpipe Prompt (for in-process backends)."""
    text = "\n".join(m.content for m in prompt.messages)
    i = int(re.search(r"ANSWER-(\d\d)", text).group(1))
    return judge_reply(judge, i, retry=len(prompt.messages) > 2)
