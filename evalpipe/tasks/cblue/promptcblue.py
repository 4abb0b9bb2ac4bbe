"""PromptCBLUE files: CBLUE (and CHIP/IMCS/MedDG) tasks rewritten as prompts with reference answers.

Data: the user's PromptCBLUE JSON lines (``train.json``/``dev.json``/``test.json`` from the CCKS-2023
Tianchi competition; not shipped), records ``{input, target, answer_choices, task_type,
task_dataset, sample_id}``. ``input`` is sent **verbatim** (the template is ``{{ example.input }}``),
``target`` is the reference answer. One file mixes many datasets; each is scored on its own and
``score`` is the mean of the datasets' main metrics. Supported datasets: see :data:`FAMILIES`
(Text2DT and CMedCausal are not: their tree/causal-graph scoring is not implemented, and a file
holding them fails to load with a message saying how to filter them out).

Two scorings:

* ``default`` — the answer forms of the targets are parsed tolerantly (``:``/``：``, ``,``/``，``,
  list markers, either CMeIE form), items compare as width/space-insensitive match keys
  (:mod:`evalpipe.text.chinese`), invented items (unrequested entity types, terms outside the
  choices, attributes outside the choices) are false positives, labels outside the choices are
  parse failures that never become classes, macro-F1 is over the gold label set, the datasets the
  README calls "micro" report micro-F1 (= accuracy for single-label data), and generation is
  character ROUGE-L (:mod:`evalpipe.metrics.chinese_text`).
* ``promptcblue`` — :mod:`evalpipe.compat.promptcblue` reproduces PromptCBLUE's own
  post-processing and scorers, quirks included (listed there and in docs/cblue.md).

Metric names: ``<dataset>.<metric>`` (``CMeEE-V2.f1``, ``CHIP-CTC.macro_f1``, ``KUAKE-QTR.micro_f1``,
``MedDG.rouge_l``, …), ``score`` and ``datasets`` (how many were scored).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from evalpipe.compat import promptcblue as compat
from evalpipe.tasks.cblue.files import PROMPTCBLUE_SOURCE, REPO_DATA, SPLITS, PromptCBLUERecord, read_promptcblue
from evalpipe.data.errors import DataError
from evalpipe.metrics.chinese_text import rouge_l
from evalpipe.metrics.classification import accuracy, class_parts, macro_f1
from evalpipe.metrics.aggregation import MacroF1, Ratio
from evalpipe.metrics.grouped import COUNT, GroupScore, grouped_score_sheet
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.tuples import tuple_score_sheet
from evalpipe.parsers.zh_labels import LabelSet, answer_body, parse_label
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import EVAL, LoadOptions, SHOTS, Scoring, TaskData, TaskSpec
from evalpipe.tasks.registry import register
from evalpipe.text.chinese import fold, label_key, match_key

#: task_dataset → answer family
FAMILIES = {
    "CMeEE-V2": "ner", "IMCS-V2-NER": "ner",
    "CMeIE": "spo", "CMeIE-V2": "spo",
    "CHIP-CDN": "cdn",
    "CHIP-CDEE": "cdee",
    "CHIP-MDCFNPC": "attr", "IMCS-V2-SR": "attr",
    "CHIP-CTC": "cls", "CHIP-STS": "cls", "KUAKE-IR": "cls", "KUAKE-QIC": "cls", "KUAKE-QQR": "cls",
    "KUAKE-QTR": "cls", "IMCS-V2-DAC": "cls",
    "MedDG": "gen",
    "IMCS-V2-MRG": "report",
}
#: classification datasets whose README metric is macro-F1; the others are micro-F1
MACRO = frozenset({"CHIP-CTC", "KUAKE-QIC", "IMCS-V2-DAC"})
#: datasets where "none of the listed types" is a valid answer besides answer_choices
NONE_OF_THE_ABOVE = "非上述类型"
_NONE_DATASETS = frozenset({"CHIP-CTC", "KUAKE-QIC", "IMCS-V2-DAC"})
_STS_ALIASES = {"相同": "是的", "不同": "不是", "是": "是的", "否": "不是"}
_CDN_NONE = frozenset({label_key(s) for s in ("没有对应的标准化实体", "无", "没有", "none")})
#: PromptCBLUE's fixed "nothing of the requested kind" targets: the dataset's reference answer when
#: the sentence holds no entity / triple of the requested types (the public toy dev.json has one)
_NOTHING_TARGETS = {"ner": label_key("上述句子没有指定类型实体"), "spo": label_key("没有指定类型的三元组")}
_MARKER = re.compile(r"^\s*(?:[-*•·]\s*|\(?\d{1,3}[.)、]\s*)")
_NER_LINE = re.compile(r"^(.+?)实体\s*[:：]\s*(.*)$")
_SPO_HEADER = re.compile(r"(?:具有|上述句子中的?)\s*(.+?)\s*关系的(?:头尾)?实体对(?:如下)?\s*[:：]")
_SPO_PAIR = re.compile(r"头实体\s*(?:为|[:：])\s*(.+?)\s*[，,]\s*尾实体\s*(?:为|[:：])\s*(.+?)\s*(?=[。；;]|$|头实体)")
_CDEE_FIELD = re.compile(r"^\s*(主体词|发生状态|描述词|解剖部位)\s*[:：]\s*(.*)$")
_MRG_LINE = re.compile(r"^\s*(主诉|现病史|辅助检查|既往史|诊断|建议)\s*[:：]\s*(.*)$")
_LIST_SPLIT = re.compile(r"[，,]")


@dataclass(frozen=True)
class PromptCBLUEGold:
    """The reference answer: its text (compat re-parses it) and its default-parsed value."""

    dataset: str
    family: str
    target: str
    value: Any


# ---- default parsing (one function per answer family) ----------------------------------------

def _lines(body: str) -> list[str]:
    return [_MARKER.sub("", line, count=1).strip() for line in body.splitlines() if line.strip()]


def _ner(body: str, choices: Sequence[str]) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    requested = {match_key(c) for c in choices}
    items, unrequested, matched = [], 0, False
    for line in _lines(body):
        m = _NER_LINE.match(line)
        if not m:
            continue
        matched = True
        kind = m.group(1).strip()
        mentions = [x.strip() for x in _LIST_SPLIT.split(m.group(2)) if x.strip()]
        if match_key(kind) not in requested:
            unrequested += len(mentions)
        items += [(x, kind) for x in mentions]
    return tuple(items), {"unrequested_entities": unrequested}, matched


def _spo(body: str) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    items, orphan, matched, predicate = [], 0, False, None
    for line in _lines(body):
        header = _SPO_HEADER.search(line)
        rest = line
        if header:
            predicate, rest, matched = header.group(1), line[header.end():], True
        for m in _SPO_PAIR.finditer(rest):
            matched = True
            if predicate is None:
                orphan += 1
            else:
                items.append((m.group(1), predicate, m.group(2)))
    return tuple(items), {"pairs_without_relation": orphan}, matched


def _cdn(body: str, choices: Sequence[str]) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    if label_key(body) in _CDN_NONE:
        return (), {"outside_choices": 0}, True
    offered = {match_key(c) for c in choices}
    terms = []
    for piece in re.split(r"[，,\n]|##", body):
        term = _MARKER.sub("", piece, count=1).strip().rstrip("。.；;").strip()
        if term and not fold(term).endswith(":") and term not in terms:
            terms.append(term)
    outside = sum(1 for t in terms if match_key(t) not in offered)
    return tuple((t,) for t in terms), {"outside_choices": outside}, bool(terms)


def _split_list(text: str) -> tuple[str, ...]:
    return tuple(sorted(x.strip() for x in _LIST_SPLIT.split(text) if x.strip()))


def _cdee(body: str) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    events = []
    for line in _lines(body):
        if "主体词" not in line:
            continue
        fields: dict[str, str] = {}
        for part in re.split(r"[；;]", line):
            m = _CDEE_FIELD.match(part)
            if m:
                fields.setdefault(m.group(1), m.group(2).strip())
        events.append((fields.get("主体词", ""), fields.get("发生状态", ""),
                       _split_list(fields.get("描述词", "")), _split_list(fields.get("解剖部位", ""))))
    return tuple(events), {}, bool(events) or "上述句子中的临床发现事件如下" in body


def _attr(body: str, choices: Sequence[str]) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    valid = {match_key(c) for c in choices}
    items, invalid, matched = [], 0, False
    for line in _lines(body):
        parts = re.split(r"[:：]", line)
        if len(parts) < 2:
            continue
        matched = True
        entity, attr = ":".join(parts[:-1]).strip(), parts[-1].strip()
        if not entity or not attr:
            continue  # a lead-in line such as "…判别如下："
        if match_key(attr) not in valid:
            invalid += 1
        items.append((entity, attr))
    return tuple(items), {"invalid_attr": invalid}, matched


@lru_cache(maxsize=4096)
def _label_set(dataset: str, choices: tuple[str, ...]) -> LabelSet:
    labels = list(choices) + ([NONE_OF_THE_ABOVE] if dataset in _NONE_DATASETS else [])
    aliases = {a: label for a, label in _STS_ALIASES.items() if label in labels} if dataset == "CHIP-STS" else {}
    return LabelSet.of(labels, {a: label for a, label in aliases.items() if a not in labels})


def _report(body: str) -> tuple[tuple[Any, ...], dict[str, Any], bool]:
    sections: dict[str, str] = {}
    for line in _lines(body):
        m = _MRG_LINE.match(line)
        if m:
            sections[m.group(1)] = m.group(2).strip()
    return tuple(sections.items()), {}, bool(sections)


def parse_answer(text: str | None, family: str, dataset: str, choices: Sequence[str]) -> Prediction:
    """Default parse of an answer (or a target) of ``family``; never raises."""
    body, reasoning = answer_body(text)
    if family == "cls":
        p = parse_label(body, _label_set(dataset, tuple(choices)))
        return Prediction(value=p.value, failed=p.failed, diagnostics={**p.diagnostics, "reasoning_stripped": reasoning})
    diagnostics: dict[str, Any] = {"empty": not body, "reasoning_stripped": reasoning}
    if not body:
        return Prediction(value="" if family == "gen" else (), failed=True, diagnostics=diagnostics)
    if family == "gen":
        return Prediction(value=body, failed=False, diagnostics=diagnostics)
    parser = {"ner": lambda: _ner(body, choices), "spo": lambda: _spo(body), "cdn": lambda: _cdn(body, choices),
              "cdee": lambda: _cdee(body), "attr": lambda: _attr(body, choices), "report": lambda: _report(body)}
    value, extra, matched = parser[family]()
    return Prediction(value=value, failed=not matched, diagnostics={**diagnostics, **extra})


# ---- loading ---------------------------------------------------------------------------------

def _path(options: LoadOptions, split: str) -> Path:
    if "eval" in options.paths:
        return Path(options.paths["eval"])
    root = Path(options.data_dir) if options.data_dir else REPO_DATA / "promptcblue"
    places = [root / f"{split}.json", root / "PromptCBLUE" / f"{split}.json", root / f"{split}.jsonl"]
    found = next((p for p in places if p.is_file()), None)
    if found is None:
        raise DataError(places[0], None, None, f"file not found: expected {split}.json under {root} (or pass "
                        f"--data promptcblue=FILE); {PROMPTCBLUE_SOURCE}; see docs/cblue.md")
    return found


def _declares_nothing(family: str, target: str) -> bool:
    """Whether ``target`` is PromptCBLUE's "nothing found" wording for ``family``: an empty gold.

    The default parser leaves such text unparsed (value ``()``), which is the right gold value;
    only the load-time check needs to know it is a valid reference answer, not a malformed one.
    """
    return family in _NOTHING_TARGETS and label_key(target) == _NOTHING_TARGETS[family]


def _example(record: PromptCBLUERecord, path: Path) -> Example:
    family = FAMILIES.get(record.task_dataset)
    if family is None:
        raise DataError(path, record.line, "task_dataset", f"{record.task_dataset!r} is not supported (supported: "
                        f"{', '.join(FAMILIES)}); remove those lines, e.g. grep -v '\"task_dataset\": "
                        f"\"{record.task_dataset}\"'")
    choices = list(record.answer_choices or [])
    gold = parse_answer(record.target, family, record.task_dataset, choices)
    if gold.failed and not _declares_nothing(family, record.target):
        raise DataError(path, record.line, "target", f"the {record.task_dataset} reference answer has none of the "
                        f"expected forms, or a label outside answer_choices ({record.target[:80]!r})")
    return Example(
        id=record.sample_id,
        inputs={"input": record.input, "answer_choices": choices, "task_dataset": record.task_dataset,
                "task_type": record.task_type},
        gold=PromptCBLUEGold(record.task_dataset, family, record.target, gold.value),
        meta={"file": str(path), "line": record.line},
    )


def load(options: LoadOptions) -> TaskData:
    split = options.split or "dev"
    if split not in SPLITS:
        raise DataError("promptcblue", None, "split", f"unknown split {split!r} (expected one of {', '.join(SPLITS)})")
    eval_path = _path(options, split)
    examples = tuple(_example(r, eval_path) for r in read_promptcblue(eval_path))
    shot_split = "train" if split != "train" else "dev"
    shot_path = Path(options.paths["shots"]) if "shots" in options.paths else eval_path.parent / f"{shot_split}.json"
    pool: tuple[Example, ...] = ()
    if shot_path.is_file() and shot_path.resolve() != eval_path.resolve():
        pool = tuple(_example(r, shot_path) for r in read_promptcblue(shot_path))
    used = (eval_path,) + ((shot_path,) if pool else ())
    return TaskData(examples=examples, shot_pool=pool, files=used, split=split)


# ---- default scoring -------------------------------------------------------------------------

def parse(answer: str, example: Example) -> Prediction:
    inputs = example.inputs
    return parse_answer(answer, FAMILIES[inputs["task_dataset"]], inputs["task_dataset"], inputs["answer_choices"])


def empty_prediction(example: Example) -> Prediction:
    family = FAMILIES[example.inputs["task_dataset"]]
    value: Any = None if family == "cls" else "" if family == "gen" else ()
    return Prediction(value=value, failed=True, diagnostics={"no_answer": True})


def _item_key(item: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(tuple(sorted(match_key(x) for x in v)) if isinstance(v, tuple) else match_key(v) for v in item)


def _report_pairs(gold: tuple[Any, ...], pred: Any) -> list[float]:
    predicted = dict(pred) if isinstance(pred, tuple) else {}
    return [rouge_l(predicted.get(k, ""), v) for k, v in gold if v.strip()]


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    """Per dataset: extraction micro P/R/F1 over match-key items; classification accuracy,
    macro-F1 (gold label set) and micro-F1 (= accuracy); generation character ROUGE-L (mean);
    reports: character ROUGE-L per gold section with text, pooled. ``score`` = mean of the main
    metrics (F1 / macro-F1 / micro-F1 / ROUGE-L per the PromptCBLUE README)."""
    def score_dataset(dataset: str, idx: list[int]) -> GroupScore:
        family = FAMILIES[dataset]
        golds = [examples[i].gold.value for i in idx]
        preds = [predictions[i].value for i in idx]
        if family == "cls":
            acc = accuracy(golds, preds)
            metrics = {"accuracy": acc, "micro_f1": acc, "macro_f1": macro_f1(golds, preds)}
            samples = [{"score": 1.0 if p is not None and p == g else 0.0} for g, p in zip(golds, preds)]
            labels = tuple(sorted({str(g) for g in golds}))
            return GroupScore(metrics, samples, "macro_f1" if dataset in MACRO else "micro_f1",
                              parts=[{"correct": s["score"], **class_parts(g, p)} for s, g, p in zip(samples, golds, preds)],
                              aggregations={"accuracy": Ratio("correct", COUNT), "micro_f1": Ratio("correct", COUNT),
                                            "macro_f1": MacroF1(labels, over="gold")})
        if family == "gen":
            values = [rouge_l(p or "", g) for g, p in zip(golds, preds)]
            metrics = {"rouge_l": sum(values) / len(values)}
            return GroupScore(metrics, [{"score": v} for v in values], "rouge_l",
                              parts=[{"rouge_l": v} for v in values], aggregations={"rouge_l": Ratio("rouge_l", COUNT)})
        if family == "report":
            pairs = [_report_pairs(g, p) for g, p in zip(golds, preds)]
            pooled = [v for sample in pairs for v in sample]
            metrics = {"rouge_l": sum(pooled) / len(pooled) if pooled else 0.0}
            return GroupScore(metrics, [{"score": sum(s) / len(s) if s else 0.0} for s in pairs], "rouge_l",
                              parts=[{"rouge_l_sum": sum(s), "sections": len(s)} for s in pairs],
                              aggregations={"rouge_l": Ratio("rouge_l_sum", "sections")})
        sheet = tuple_score_sheet([{_item_key(x) for x in g} for g in golds],
                                  [{_item_key(x) for x in p} for p in preds])
        metrics = {k: float(v) for k, v in sheet.corpus.items() if k in ("precision", "recall", "f1")}
        return GroupScore(metrics, [{"score": s["f1"]} for s in sheet.per_sample], "f1",
                          parts=[dict(s) for s in sheet.per_sample],
                          aggregations={k: sheet.aggregations[k] for k in ("precision", "recall", "f1")})

    return grouped_score_sheet([ex.gold.dataset for ex in examples], score_dataset)


# ---- PromptCBLUE's own scoring (compat) ------------------------------------------------------

def parse_promptcblue(answer: str, example: Example) -> Prediction:
    inputs = example.inputs
    dataset = inputs["task_dataset"]
    value = compat.structure(FAMILIES[dataset], dataset, answer or "", inputs["answer_choices"])
    return Prediction(value=value, failed=not (answer or "").strip(), diagnostics={})


def empty_promptcblue(example: Example) -> Prediction:
    return Prediction(value=parse_promptcblue("", example).value, failed=True, diagnostics={"no_answer": True})


def score_promptcblue(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions
                      ) -> ScoreSheet:
    golds = [compat.structure(ex.gold.family, ex.gold.dataset, ex.gold.target, ex.inputs["answer_choices"])
             for ex in examples]
    return compat.score_sheet([ex.gold.family for ex in examples], [ex.gold.dataset for ex in examples],
                              golds, [p.value for p in predictions])


#: why PromptCBLUE is valued on the whole corpus
PER_DATASET = ("metrics per dataset found in the data, and a score averaging them: the metric set and the "
               "mean's terms depend on the corpus")


SPEC = register(
    TaskSpec(
        name="promptcblue",
        kind="custom",  # many datasets of many kinds in one file: no one kind fits
        data_roles=(EVAL, SHOTS),
        description="PromptCBLUE files (input sent verbatim; per-dataset scores and their mean; dev split).",
        template="cblue/promptcblue.j2",
        load=load,
        shot_target=lambda ex: ex.gold.target,
        scorings={
            "default": Scoring(parse=parse, score=score, empty=empty_prediction,
                               description="tolerant parse, match-key items, no invented classes, char ROUGE-L",
                               corpus_reason=PER_DATASET),
            "promptcblue": Scoring(parse=parse_promptcblue, score=score_promptcblue, empty=empty_promptcblue,
                                   description="PromptCBLUE's post-processing and scorers reproduced, quirks included",
                                   corpus_reason=PER_DATASET),
        },
        metrics=("score",),
        max_tokens=1024,
        primary_metric="score",
        default_shots=0,
        completion_stop=(),
        citation="Zhu W, et al. PromptCBLUE: A Chinese Prompt Tuning Benchmark for the Medical Domain. "
        "arXiv:2310.14151 (CCKS 2023). Data: Tianchi competition, not shipped.",
    )
)
