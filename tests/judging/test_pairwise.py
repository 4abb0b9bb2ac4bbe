"""Pairwise judging with position swap (`judge --pairwise RUN_A RUN_B`): verdict parsing, the outcome
arithmetic by hand, and end to end on the loopback fake server with a fair judge and one that always
picks the first answer (position bias 1), resume, the report section and the patient-data guard."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path

import pytest

from evalpipe.config import RunConfig
from evalpipe.judging.pairwise import FIRST, SECOND, TIE, pair_parts, pairwise_dir, parse_verdict
from evalpipe.pipeline.execute import execute
from tests.judging import scripted
from tests.judging.conftest import evalpipe
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.scripted_backend import ScriptedBackend

GOOD_IN_B = {0, 1, 2, 3, 4}  # run B's answer is as good as A's on these samples
GARBLED = 7  # the fair judge's reply to this sample, B's answer first, is unusable


def test_verdicts_are_read_from_the_reply():
    assert parse_verdict('{"rationale": "x", "verdict": "A"}') == (FIRST, None)
    assert parse_verdict('Sure.\n```json\n{"verdict": "b"}\n```') == (SECOND, None)
    assert parse_verdict('{"verdict": "Tie"}')[0] == TIE and parse_verdict('{"verdict": "Answer A"}')[0] == FIRST
    assert parse_verdict('{"verdict": 2}')[0] == SECOND
    assert parse_verdict("A is better")[0] is None and parse_verdict('{"verdict": "C"}')[0] is None
    assert parse_verdict("")[1] == "empty reply"


def test_pair_outcomes_by_hand():
    # A preferred in both orders (first in ab, second in ba): a win, no flip
    win = pair_parts("j", {"ab": FIRST, "ba": SECOND})
    assert (win["j.win"], win["j.flip"], win["j.score"], win["j.first"], win["j.decisive"]) == (1.0, 0.0, 1.0, 1.0, 2.0)
    # the first answer both times: contradictory, a tie by consistency, and a flip
    biased = pair_parts("j", {"ab": FIRST, "ba": FIRST})
    assert (biased["j.tie"], biased["j.flip"], biased["j.score"], biased["j.first"]) == (1.0, 1.0, 0.5, 2.0)
    # a tie and a B preference: a loss for A, and a flip
    loss = pair_parts("j", {"ab": TIE, "ba": FIRST})
    assert (loss["j.loss"], loss["j.flip"], loss["j.score"], loss["j.decisive"]) == (1.0, 1.0, 0.25, 1.0)
    assert pair_parts("j", {"ab": FIRST, "ba": None}) == {"j.failed": 1.0}


def _section(text: str, name: str) -> str:
    return re.search(rf"-+ANSWER {name}-+\n(.*?)\n-+END ANSWER {name}-+", text, re.S).group(1)


def responder(body):
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages") or [])
    first, second = _section(text, "A"), _section(text, "B")
    if body.get("model") == "biased":
        return '{"rationale": "the first one", "verdict": "A"}'
    i = int(re.search(r"Q(\d\d)", text).group(1))
    if i == GARBLED and first.startswith("poor"):
        return "I cannot decide."
    good = ["GOOD" in first, "GOOD" in second]
    verdict = "tie" if good[0] == good[1] else ("A" if good[0] else "B")
    return json.dumps({"rationale": "by content", "verdict": verdict})


def _run(root: Path, name: str, answer) -> Path:
    config = RunConfig(tasks=("huatuo_generation",), model=name, base_url="http://127.0.0.1:1/v1",
                       data={"huatuo_generation": str(scripted.write_questions(root / "questions.jsonl"))},
                       run_name=name)
    backend = ScriptedBackend(lambda p: answer(int(re.search(r"Q(\d\d)", "\n".join(
        m.content for m in p.messages or ())).group(1))), model=name)
    return asyncio.run(execute(config, lambda c: backend, root / "results")).run_dir.path


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairwise")
    a = _run(root, "model-a", lambda i: f"GOOD answer {i}")
    b = _run(root, "model-b", lambda i: f"GOOD answer {i}" if i in GOOD_IN_B else f"poor answer {i}")
    return a, b


def test_pairwise_end_to_end_with_a_fair_and_a_position_biased_judge(two_runs, tmp_path):
    a, b = two_runs
    with FakeOpenAIServer(models=("fair", "biased"), responder=responder, record=True) as server:
        args = ("judge", "--pairwise", str(a), str(b), "--judge", f"fair={server.url}", "--judge", f"biased={server.url}")
        first = evalpipe(*args)
        assert first.returncode == 0, first.stderr
        asked = [r for r in server.requests if isinstance(r.body, dict) and r.body.get("messages")]
        assert len(asked) == 2 * 2 * scripted.N  # 2 judges × 2 orders × 20 pairs
        orders = {json.dumps(r.body["messages"]) for r in server.requests if r.body and r.body.get("model") == "fair"}
        assert len(orders) == 2 * scripted.N - len(GOOD_IN_B)  # the orders differ unless both answers are equal
        again = evalpipe(*args)
        assert again.returncode == 0, again.stderr
        assert len([r for r in server.requests if isinstance(r.body, dict) and r.body.get("messages")]) == len(asked), \
            "a stored verdict was asked again"
    folder = pairwise_dir(a, b)
    metrics = json.loads((folder / "pairwise.json").read_text())["tasks"]["huatuo_generation"]["metrics"]
    n = scripted.N
    # fair: 19 complete pairs (one garbled reply), 5 ties, 14 wins for A, never a flip
    assert metrics["pairwise[fair]_pairs"] == n - 1 and metrics["pairwise[fair]_failures"] == 1
    assert metrics["pairwise[fair]_win_rate"] == pytest.approx(14 / 19)
    assert metrics["pairwise[fair]_tie_rate"] == pytest.approx(5 / 19) and metrics["pairwise[fair]_loss_rate"] == 0
    assert metrics["pairwise[fair]_position_bias"] == 0
    assert metrics["pairwise[fair]_score"] == pytest.approx((14 + 5 * 0.5) / 19)
    # biased: always the first answer: every pair flips and is a tie by consistency
    assert metrics["pairwise[biased]_position_bias"] == 1 and metrics["pairwise[biased]_tie_rate"] == 1
    assert metrics["pairwise[biased]_first_position"] == 1 and metrics["pairwise[biased]_score"] == 0.5
    pairs = [json.loads(line) for line in (folder / "pairs.jsonl").read_text().splitlines()]
    garbled = next(p for p in pairs if p["id"] == f"test-{GARBLED}")
    assert garbled["verdicts"]["fair"] == {"ab": "first", "ba": None}

    report = evalpipe("report", str(a), str(b), "--out", str(tmp_path / "report"), "--resamples", "200")
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Pairwise judging" in md and "huatuo_generation: A = " in md


def test_credentialed_pairs_go_to_no_external_judge(medisumqa_run, tmp_path):
    other = Path(shutil.copytree(medisumqa_run, tmp_path / "medisumqa-again"))
    result = evalpipe("judge", "--pairwise", str(medisumqa_run), str(other), "--judge", "j=http://judge.example.com/v1")
    assert result.returncode != 0 and "--allow-external-endpoint" in result.stderr, result.stderr
    assert not pairwise_dir(medisumqa_run, other).exists()


def test_pairwise_needs_two_runs(two_runs):
    result = evalpipe("judge", "--pairwise", str(two_runs[0]), "--judge", "j=http://127.0.0.1:1/v1")
    assert result.returncode != 0 and "RUN_A RUN_B" in result.stderr
