"""Pairwise judging with position swap: ``evalpipe judge --pairwise RUN_A RUN_B --judge MODEL=URL …``.

(This module is what the report reads too — the verdicts, the outcomes, where they live; sending
the requests is :mod:`evalpipe.judging.pairwise_run`, which alone reaches a backend.)

For every task both runs answered as free text, and every sample both answered (same id), each
judge is shown the input, the reference when there is one, and the two answers, and asked which is
better (``prompts/judge/pairwise.j2``, or ``--judge-rubric FILE``): ``{"verdict": "A" | "B" | "tie"}``
where A is the answer shown first. **Each pair is asked twice**, run A's answer first (order ``ab``)
and run B's answer first (``ba``), so a judge that prefers a position cannot make it a preference for
a run. Verdict parsing: the last JSON object of the reply with a ``verdict`` of ``A``, ``B`` or
``tie`` (any case; ``"Answer A"`` and ``1``/``2`` are read too); anything else is an unusable reply —
stored, counted as a judge failure, never a verdict.

**Where it lives.** ``<results>/pairwise/<A>__vs__<B>/`` beside run A (the run directories' names):
``judgements.sqlite`` (every reply committed on arrival, keyed by judge, rubric sha256, task,
sample, order and both answers' sha256 — a killed judging resumes, a changed answer is asked
again; a request that failed for good is not stored and is asked again next time),
``pairs.jsonl`` (per pair: each judge's verdict in both orders, and the pair's parts for the
report's bootstrap) and ``pairwise.json`` (the metrics, their declared aggregations, the judges,
the rubric, both runs). The report finds the folder when both runs are in it. An unusable reply
is not asked again (unlike the rating judges' one retry): it is a counted failure.

**Outcomes** (for run A; per judge ``j`` and task, over the *complete* pairs: both orders usable).
Each order's verdict is turned into run A's score: 1 if A's answer was preferred, 0.5 for a tie, 0 if
B's; the pair's score is the sum of its two orders' scores, ``s ∈ {0, 0.5, 1, 1.5, 2}``:

* ``pairwise[<j>]_win_rate`` — share of pairs with ``s > 1`` (A preferred in both orders, or in
  one with a tie in the other); ``loss_rate`` — ``s < 1``; ``tie_rate`` — ``s = 1`` (two ties, or
  two verdicts that contradict each other, which is a tie by consistency);
* ``pairwise[<j>]_score`` — mean of ``s / 2``: A's preference share (0.5 = no preference);
* ``pairwise[<j>]_position_bias`` — share of complete pairs whose verdict flips with the order: the
  run preferred (A, B or tie) differs between ``ab`` and ``ba`` — with an unbiased judge only its
  genuine indecision flips a verdict;
* ``pairwise[<j>]_first_position`` — share of the decisive verdicts (not ties) that chose the answer
  shown first (0.5 = no position preference);
* ``pairwise[<j>]_pairs`` (complete pairs) and ``pairwise[<j>]_failures`` (unusable or missing
  verdicts), counts without intervals.

Each rate is a ratio of per-pair parts, declared like every metric, so the report's bootstrap gives
it an interval over pairs (samples). The patient-data guard applies: a credentialed task's pairs
go only to local judges unless ``--allow-external-endpoint``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import jinja2

from evalpipe.store.answers import ResponseStore
from evalpipe.store.judgements import StoredJudgement
from evalpipe.store.keys import cache_key
from evalpipe.judging.items import JudgedItem, TaskToJudge, judgeable_tasks
from evalpipe.judging.parse import _objects
from evalpipe.judging.rubric import _describe, _resolve
from evalpipe.judging.judge_metrics import RatingMean
from evalpipe.metrics.aggregation import Total, evaluate
from evalpipe.prompting import TemplateError, sandboxed_environment
from evalpipe.records import GenerationParams, Message, Prompt
from evalpipe.results import RunDir

__all__ = ["ORDERS", "PairwiseOutcome", "PairwiseRubric", "Share", "load_pairwise_rubric", "pair_parts",
           "pairwise_dir", "pairwise_sheet", "parse_verdict", "shared_pairs"]

DEFAULT_RUBRIC = "judge/pairwise.j2"
#: run A's answer first, run B's answer first
ORDERS = ("ab", "ba")
#: verdict codes as stored: the first answer shown, the second, a tie
FIRST, SECOND, TIE = 1, 2, 0
_WORD = re.compile(r"\s*(?:answer|assistant|response)?\s*([ab12]|tie|equal|draw)\s*\.?\s*\Z", re.IGNORECASE)


def pairwise_dir(run_a: Path, run_b: Path) -> Path:
    """``<results>/pairwise/<A>__vs__<B>`` (beside run A)."""
    return Path(run_a).resolve().parent / "pairwise" / f"{Path(run_a).resolve().name}__vs__{Path(run_b).resolve().name}"


def parse_verdict(text: str | None) -> tuple[int | None, str | None]:
    """A reply → (verdict code, None) or (None, why it is unusable); see the module docstring."""
    from evalpipe.judging.items import judged_text

    body = judged_text(text or "")
    if not body:
        return None, "empty reply"
    found: int | None = None
    for obj in _objects(body):
        value = obj.get("verdict")
        match = _WORD.fullmatch(str(value)) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
        if match:
            word = match.group(1).lower()
            found = FIRST if word in ("a", "1") else SECOND if word in ("b", "2") else TIE
    if found is None:
        return None, 'no JSON object with "verdict": "A", "B" or "tie"'
    return found, None


@dataclass(frozen=True)
class PairwiseRubric:
    name: str
    path: Path
    sha256: str
    _module: Any = field(repr=False, compare=False, default=None)

    def render(self, task: TaskToJudge, item: JudgedItem, first: str, second: str, params: GenerationParams) -> Prompt:
        gold = item.gold
        reference = gold if isinstance(gold, str) else (None if gold is None else json.dumps(gold, ensure_ascii=False))
        sample = {"inputs": dict(item.inputs), "gold": gold, "reference": reference, "first": first, "second": second}
        messages: list[Message] = []
        try:
            if hasattr(self._module, "system"):
                system = str(self._module.system())
                if system.strip():
                    messages.append(Message("system", system))
            messages.append(Message("user", str(self._module.prompt(sample, {"name": task.name,
                                                                              "description": task.description}))))
        except jinja2.TemplateError as exc:
            raise TemplateError(f"{self.path}: {_describe(exc)}") from exc
        return Prompt(params=params, messages=tuple(messages))


def load_pairwise_rubric(source: str | Path = DEFAULT_RUBRIC) -> PairwiseRubric:
    path, name = _resolve(source)
    if not path.is_file():
        raise TemplateError(f"{path}: pairwise rubric not found")
    try:
        module = sandboxed_environment(path.parent).get_template(path.name).make_module({})
    except jinja2.TemplateError as exc:
        raise TemplateError(f"{path}: {_describe(exc)}") from exc
    if not hasattr(module, "prompt"):
        raise TemplateError(f"{path}: the pairwise rubric has no `prompt` macro")
    return PairwiseRubric(name, path, hashlib.sha256(path.read_bytes()).hexdigest(), module)


@dataclass(frozen=True)
class _Pair:
    task: TaskToJudge
    item_a: JudgedItem
    item_b: JudgedItem

    @property
    def sample_id(self) -> str:
        return self.item_a.sample_id

    def answers_sha256(self, order: str) -> str:
        first, second = (self.item_a, self.item_b) if order == "ab" else (self.item_b, self.item_a)
        return hashlib.sha256(f"{order}|{first.answer_sha256}|{second.answer_sha256}".encode()).hexdigest()

    def prompt(self, rubric: PairwiseRubric, order: str, params: GenerationParams) -> Prompt:
        first, second = (self.item_a, self.item_b) if order == "ab" else (self.item_b, self.item_a)
        return rubric.render(self.task, self.item_a, first.answer, second.answer, params)


@dataclass
class PairwiseOutcome:
    folder: Path
    #: task → metric → value
    metrics: dict[str, dict[str, Any]]
    sent: int = 0
    from_store: int = 0
    failed_requests: int = 0
    notes: list[str] = field(default_factory=list)


def shared_pairs(run_a: RunDir, run_b: RunDir) -> tuple[list[_Pair], dict[str, TaskToJudge], list[str], list[str]]:
    """The pairs, run A's shared tasks, a note per task, and the shared tasks either run marks credentialed."""
    notes = []
    from evalpipe.outcome import RunError  # evalpipe.outcome reaches the judging's attach step

    for run in (run_a, run_b):
        if not run.samples_path().is_file():
            raise RunError(f"{run.path}: no samples yet; finish the run first")
    tasks_a = {t.name: t for t in judgeable_tasks(run_a.read_config(), run_a.read_samples())}
    tasks_b = {t.name: t for t in judgeable_tasks(run_b.read_config(), run_b.read_samples())}
    shared = [name for name in tasks_a if name in tasks_b]
    if not shared:
        raise RunError(f"{run_a.path} and {run_b.path} share no task with free-text answers "
                       f"(A: {', '.join(tasks_a) or 'none'}; B: {', '.join(tasks_b) or 'none'})")
    pairs = []
    for name in shared:
        items_b = {item.sample_id: item for item in tasks_b[name].items}
        found = [_Pair(tasks_a[name], item, items_b[item.sample_id]) for item in tasks_a[name].items
                 if item.sample_id in items_b]
        notes.append(f"{name}: {len(found)} shared answered samples ({len(tasks_a[name].items) - len(found)} only in A, "
                     f"{len(tasks_b[name].items) - len(found)} only in B)")
        pairs.extend(found)
    if not pairs:
        raise RunError(f"{run_a.path} and {run_b.path} have no answered sample in common")
    credentialed = [n for n in shared if tasks_a[n].credentialed or tasks_b[n].credentialed]
    return pairs, {n: tasks_a[n] for n in shared}, notes, credentialed


def request_key(judge: str, prompt: Prompt, rubric: PairwiseRubric, pair: _Pair, order: str) -> str:
    blob = json.dumps({"judge": judge, "rubric": rubric.sha256, "task": pair.task.name, "sample": pair.sample_id,
                       "order": order, "answers": pair.answers_sha256(order), "request": cache_key(judge, prompt)},
                      sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _run_score(order: str, verdict: int) -> float:
    """Run A's score of one verdict: 1 if A's answer was preferred, 0.5 a tie, 0 if B's."""
    if verdict == TIE:
        return 0.5
    a_first = order == "ab"
    return 1.0 if (verdict == FIRST) == a_first else 0.0


def pair_parts(judge: str, verdicts: Mapping[str, int | None]) -> dict[str, float]:
    """One pair's parts for one judge, from its verdict per order (None = unusable or missing)."""
    p = f"{judge}."
    failures = sum(1 for o in ORDERS if verdicts.get(o) is None)
    parts: dict[str, float] = {p + "failed": float(failures)}
    if failures:
        return parts
    ab, ba = _run_score("ab", verdicts["ab"]), _run_score("ba", verdicts["ba"])  # type: ignore[arg-type]
    total = ab + ba
    decisive = [o for o in ORDERS if verdicts[o] != TIE]
    parts.update({p + "complete": 1.0, p + "win": float(total > 1), p + "loss": float(total < 1),
                  p + "tie": float(total == 1), p + "score": total / 2, p + "flip": float(ab != ba),
                  p + "decisive": float(len(decisive)),
                  p + "first": float(sum(1 for o in decisive if verdicts[o] == FIRST))})
    return parts


@dataclass(frozen=True)
class Share(RatingMean):
    """``Σ part / Σ pairs``: a share of pairs (or of verdicts); NaN, not 0, when there is none."""

    kind: ClassVar[str] = "share"

    def describe(self) -> str:
        return f"share: summed {self.numerator} over summed {self.denominator}"

    def with_prefix(self, prefix: str) -> Share:
        return Share(prefix + self.numerator, prefix + self.denominator)


def _aggregations(judge: str) -> dict[str, Any]:
    p, m = f"{judge}.", f"pairwise[{judge}]_"
    ratio = {name: Share(p + part, p + "complete") for name, part in
             (("win_rate", "win"), ("tie_rate", "tie"), ("loss_rate", "loss"), ("score", "score"),
              ("position_bias", "flip"))}
    out: dict[str, Share | Total] = {m + k: v for k, v in ratio.items()}
    out[m + "first_position"] = Share(p + "first", p + "decisive")
    out[m + "failures"] = Total(p + "failed")
    return out


def pairwise_sheet(pairs: Sequence[_Pair], judges: Sequence[str], verdicts: Mapping[tuple[str, str, str, str], int | None]
                   ) -> dict[str, dict[str, Any]]:
    """Task → {metrics, aggregations (JSON), records}: ``verdicts[(judge, task, sample, order)]``."""
    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        task = out.setdefault(pair.task.name, {"records": []})
        parts: dict[str, float] = {}
        record: dict[str, Any] = {"id": pair.sample_id, "verdicts": {}}
        for judge in judges:
            said = {o: verdicts.get((judge, pair.task.name, pair.sample_id, o)) for o in ORDERS}
            parts.update(pair_parts(judge, said))
            names = {FIRST: "first", SECOND: "second", TIE: "tie", None: None}
            record["verdicts"][judge] = {o: names[v] for o, v in said.items()}
        record["parts"] = {k: v for k, v in parts.items() if v}
        task["records"].append(record)
    for task in out.values():
        all_parts = [r["parts"] for r in task["records"]]
        metrics: dict[str, Any] = {}
        aggregations: dict[str, Any] = {}
        not_computed: dict[str, str] = {}
        for judge in judges:
            declared = _aggregations(judge)
            complete = sum(p.get(f"{judge}.complete", 0.0) for p in all_parts)
            metrics[f"pairwise[{judge}]_pairs"] = int(complete)
            for metric, aggregation in declared.items():
                value = evaluate(aggregation, all_parts)
                if value != value:  # NaN: no complete pair (or no decisive verdict)
                    not_computed[metric] = "no pair has a usable verdict in both orders" if complete else \
                        "no complete pair"
                    if metric.endswith("first_position") and complete:
                        not_computed[metric] = "every verdict is a tie"
                    continue
                metrics[metric] = int(value) if isinstance(aggregation, Total) else value
                aggregations[metric] = aggregation.to_json()
        task.update(metrics=metrics, aggregations=aggregations, not_computed=not_computed,
                    no_interval={f"pairwise[{j}]_pairs": "the number of complete pairs, fixed by the judging"
                                 for j in judges})
    return out


def read_verdicts(store: ResponseStore, tasks: Sequence[str], judges: Sequence[str], rubric: PairwiseRubric,
                   pairs: Sequence[_Pair]) -> tuple[dict[tuple[str, str, str, str], StoredJudgement], dict[tuple[str, str, str, str], int | None]]:
    rows: dict[tuple[str, str, str, str], StoredJudgement] = {}
    for task in tasks:
        for row in store.judgements(task, list(judges), rubric.sha256):
            rows[(row.judge, row.task, row.sample_id, row.answer_sha256)] = row
    verdicts = {}
    for pair in pairs:
        for judge in judges:
            for order in ORDERS:
                stored = rows.get((judge, pair.task.name, pair.sample_id, pair.answers_sha256(order)))
                verdicts[(judge, pair.task.name, pair.sample_id, order)] = (
                    parse_verdict(stored.text)[0] if stored else None)
    return rows, verdicts
