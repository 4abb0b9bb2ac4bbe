"""Compatibility mode: score PromptCBLUE answers the way PromptCBLUE's own evaluation does.

Use this mode (``--compat promptcblue``) only to put numbers next to published PromptCBLUE
results. It re-implements, from a reading of ``src/evaluation/post_generate_process.py`` and
``src/evaluation/evaluators.py`` + ``evaluate.py`` in github.com/michael-wzhu/PromptCBLUE and of
rouge_chinese (the ROUGE package it pins), how a generated answer becomes a structured answer and
how that is scored. The gold structured answer is the same post-processing applied to ``target``
(which is what the public toy ``dev_structured.json`` shows).

Quirks reproduced, one per line (evalpipe's default behaviour in brackets; see docs/cblue.md):

1. Extraction (NER, triples, CDN, events, findings): micro P/R/F1 over exact strings, each item
   the tuple of ``json.dumps`` of its values in key order [default: width/space-insensitive
   match keys; list-valued fields compared as sets].
2. NER lines are read only if they start exactly with ``{type}实体`` for a requested type; the
   mentions after ``{type}实体：`` (full-width colon only) are split on ``，`` only; entities
   of types that were not requested are ignored, never false positives [default: ``:``/``：``,
   ``,``/``，``, leading list markers accepted; unrequested types count as false positives].
3. Triples: each line's predicate is ``line.split("关系的头尾实体对")[0][2:]``, pairs are split
   on ``。`` and ``，尾实体为``; the README's own ``头实体：…，尾实体：…；`` form yields nothing
   [default: both forms]. ``CMeIE`` (the toy file's name) is treated like ``CMeIE-V2``.
4. CDN: only the *last line* is read, split on ``，``; terms that are not among
   ``answer_choices`` are **dropped** instead of being false positives [default: all lines,
   ``,``/``，``/``##``; invented terms are false positives].
5. Events (CHIP-CDEE): the first line is always skipped as a lead-in, and every later line
   becomes an event, even a blank one; descriptor lists compare in written order [default:
   only lines with ``主体词``; lists as sets].
6. Findings (CHIP-MDCFNPC, IMCS-V2-SR): the first line is skipped; a line must contain exactly
   one ``：``; an attribute outside ``answer_choices`` is **replaced** by a fixed default
   (``不标注`` / ``无法根据上下文确定病人是否患有该症状``) [default: kept as the model wrote it,
   a false positive, counted in ``invalid_attr``].
7. Classification: the answer is only ``strip()``-ed (``是的。`` is a new label); CHIP-STS maps
   ``相同``/``不同`` to ``是的``/``不是``; an **empty answer becomes the first label of a fixed
   list** (``非上述类型``, ``是的``, ``相关``, …) [default: parse failure, always wrong].
8. Classification is scored with sklearn's ``classification_report(gold, pred,
   zero_division=0)``, so **invented labels become classes** (macro averages divide by them).
9. CHIP-STS, KUAKE-QQR, KUAKE-QTR and KUAKE-IR, called "micro-F1" in the README, are scored
   with the **weighted average** F1 of that report [default: micro-F1 = accuracy].
10. Generation (MedDG) and reports (IMCS-V2-MRG, per section, sections pooled): BERT
    BasicTokenizer tokens (Chinese characters split, English words whole, lower-cased, accents
    stripped, punctuation kept), ``rouge_chinese`` ROUGE-L ``f`` = 2PR/(P+R+1e-8) over the whole
    token sequence, averaged; an **empty answer or reference becomes "无 。"** — so an empty
    answer against an empty section scores 2/(2+1e-8) ≈ 1.0 [default: evalpipe's character ROUGE-L,
    punctuation dropped, empty = 0, sections with an empty reference not scored]. Report
    sections are read only from the second line on, as ``主诉：…`` lines.
11. The overall ``score`` is the mean of each dataset's main metric (F1, macro-F1 or ROUGE-L);
    PromptCBLUE divides by all 18 datasets, this mode by the datasets in the file.

sklearn and transformers are imported lazily, only in this mode.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, cast

from evalpipe.metrics.aggregation import MacroF1, MicroPRF, Ratio
from evalpipe.metrics.classification import class_parts
from evalpipe.metrics.grouped import COUNT, GroupScore, grouped_score_sheet
from evalpipe.records import ScoreSheet

__all__ = [
    "FIRST_LABEL",
    "MACRO_DATASETS",
    "bert_basic_tokens",
    "classification_scores",
    "extraction_scores",
    "rouge_chinese_l",
    "structure",
]

#: the fixed label list's first entry, substituted for an empty classification answer
FIRST_LABEL: Mapping[str, str] = {
    "CHIP-CTC": "非上述类型", "KUAKE-QIC": "非上述类型", "IMCS-V2-DAC": "非上述类型", "CHIP-STS": "是的",
    "KUAKE-IR": "相关", "KUAKE-QTR": "完全不匹配或者没有参考价值", "KUAKE-QQR": "完全一致",
}
#: classification datasets scored with the macro average; the others use the weighted average
MACRO_DATASETS = frozenset({"CHIP-CTC", "KUAKE-QIC", "IMCS-V2-DAC"})
#: attribute substituted for one outside ``answer_choices``
_ATTR_DEFAULT = {"CHIP-MDCFNPC": "不标注", "IMCS-V2-SR": "无法根据上下文确定病人是否患有该症状"}
_CDEE_KEYS = ("主体词", "发生状态", "描述词", "解剖部位")
_MRG_KEYS = ("主诉：", "现病史：", "辅助检查：", "既往史：", "诊断：", "建议：")


# ---- answer text → structured answer (post_generate_process) ---------------------------------

def _ner(text: str, choices: Sequence[str]) -> list[dict[str, str]]:
    out = []
    for choice in choices:
        for piece in text.split("\n"):
            if piece.startswith(f"{choice}实体"):
                for mention in piece.replace(f"{choice}实体：", "").split("，"):
                    if mention.strip():
                        out.append({"entity": mention.strip(), "type": choice})
    return out


def _spo(text: str) -> list[dict[str, str]]:
    out = []
    for line in text.split("\n"):
        predicate = line.split("关系的头尾实体对")[0][2:].strip()
        line = line.replace(f"具有{predicate}关系的头尾实体对如下：", "")
        for pair in line.split("。"):
            parts = pair.split("，尾实体为")
            if len(parts) < 2:
                continue
            head, tail = parts[0].replace("头实体为", "").strip(), parts[1].replace("尾实体为", "").strip()
            out.append({"predicate": predicate, "subject": head, "object": tail})
    return out


def _cdn(text: str, choices: Sequence[str]) -> list[dict[str, str]]:
    answers = [w.strip() for w in text.split("\n")[-1].split("，") if w.strip()]
    kept = {w for w in answers if w in choices}
    return [{"entity": w, "type": "normalization"} for w in sorted(kept)]


def _cdee(text: str) -> list[dict[str, Any]]:
    events = []
    for line in text.split("\n")[1:]:
        info: dict[str, Any] = {}
        for attr in line.split("；"):
            for key in _CDEE_KEYS:
                if attr.startswith(f"{key}："):
                    attr = attr.replace(f"{key}：", "").strip()
                    if key in ("描述词", "解剖部位"):
                        info[key] = [w.strip() for w in attr.split("，") if w.strip()]
                    else:
                        info[key] = attr
        for key in _CDEE_KEYS:
            info.setdefault(key, [] if key in ("描述词", "解剖部位") else "")
        events.append(info)
    return events


def _attr(text: str, choices: Sequence[str], dataset: str) -> list[dict[str, str]]:
    out = []
    for line in text.split("\n")[1:]:
        parts = line.split("：")
        if len(parts) != 2:
            continue
        finding, conclusion = parts
        if conclusion not in choices:
            conclusion = _ATTR_DEFAULT[dataset]
        out.append({"entity": finding.strip(), "attr": conclusion})
    return out


def _cls(text: str, dataset: str) -> str:
    answer = text.strip()
    if dataset == "CHIP-STS":
        answer = {"相同": "是的", "不同": "不是"}.get(answer, answer)
    return answer


def _report(text: str) -> dict[str, str]:
    sections: dict[str, str] = {}
    for key in _MRG_KEYS:
        for line in text.strip().split("\n")[1:]:
            if line.startswith(key):
                sections[key[:-1]] = line.strip().split(key)[-1].strip()
    return sections


def structure(family: str, dataset: str, text: str, choices: Sequence[str] | None) -> Any:
    """PromptCBLUE's post-processing of one answer (or target) text for ``dataset``."""
    text = text or ""
    choices = list(choices or [])
    if family == "ner":
        return _ner(text, choices)
    if family == "spo":
        return _spo(text)
    if family == "cdn":
        return _cdn(text, choices)
    if family == "cdee":
        return _cdee(text)
    if family == "attr":
        return _attr(text, choices, dataset)
    if family == "cls":
        return _cls(text, dataset)
    if family == "report":
        return _report(text)
    return text.strip()  # gen


# ---- scorers (evaluators.py) -----------------------------------------------------------------

def _item_key(item: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(json.dumps(item[k], ensure_ascii=False) for k in sorted(item))


def extraction_scores(golds: Sequence[Sequence[Mapping[str, Any]]], preds: Sequence[Sequence[Mapping[str, Any]]]
                      ) -> tuple[dict[str, float], list[dict[str, float]]]:
    """Micro P/R/F1 over exact json.dumps item tuples; 0 for all three when tp == 0."""
    tp = fp = fn = 0
    per_sample = []
    for gold, pred in zip(golds, preds):
        g, p = {_item_key(i) for i in gold}, {_item_key(i) for i in pred}
        s_tp, s_fp, s_fn = len(g & p), len(p - g), len(g - p)
        tp, fp, fn = tp + s_tp, fp + s_fp, fn + s_fn
        f1 = 2 * s_tp / (2 * s_tp + s_fp + s_fn) if s_tp else 0.0
        per_sample.append({"tp": s_tp, "fp": s_fp, "fn": s_fn, "score": f1})
    if tp:
        precision, recall = tp / (tp + fp), tp / (tp + fn)
        f1 = 2 * precision * recall / (precision + recall)
    else:
        precision = recall = f1 = 0.0
    return {"precision": precision, "recall": recall, "f1": f1}, per_sample


def classification_scores(golds: Sequence[str], preds: Sequence[str], dataset: str
                          ) -> tuple[dict[str, float], list[dict[str, float]]]:
    """sklearn classification_report as PromptCBLUE calls it (empty → first label; macro or weighted)."""
    from sklearn.metrics import classification_report

    filled = [p if p != "" else FIRST_LABEL[dataset] for p in preds]
    report = classification_report(list(golds), filled, output_dict=True, zero_division=0)
    average = report["macro avg" if dataset in MACRO_DATASETS else "weighted avg"]
    name = "macro_f1" if dataset in MACRO_DATASETS else "f1"
    corpus = {name: float(average["f1-score"]), "precision": float(average["precision"]),
              "recall": float(average["recall"])}
    return corpus, [{"score": 1.0 if g == p else 0.0} for g, p in zip(golds, filled)]


@cache
def _basic_tokenizer() -> Any:
    from transformers import BasicTokenizer

    return BasicTokenizer(tokenize_chinese_chars=True)  # type: ignore[no-untyped-call]


def bert_basic_tokens(text: str) -> list[str]:
    """BERT's BasicTokenizer: Chinese characters split, words whole, lower-cased, punctuation split."""
    return cast("list[str]", _basic_tokenizer().tokenize(text))


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_chinese_l(hyp: str, ref: str) -> float:
    """One pair as PromptCBLUE scores it: BasicTokenizer, "无 。" for empty, rouge_chinese's f."""
    h = " ".join(bert_basic_tokens(hyp)).strip() or "无 。"
    r = " ".join(bert_basic_tokens(ref)).strip() or "无 。"
    h_tokens, r_tokens = h.split(), r.split()
    lcs = _lcs(r_tokens, h_tokens)
    p, rec = lcs / len(h_tokens), lcs / len(r_tokens)
    return 2.0 * ((p * rec) / (p + rec + 1e-8))


def generation_scores(golds: Sequence[str], preds: Sequence[str]) -> tuple[dict[str, float], list[dict[str, float]]]:
    scores = [rouge_chinese_l(p, g) for g, p in zip(golds, preds)]
    return {"rouge_l": sum(scores) / len(scores)}, [{"score": s} for s in scores]


def report_scores(golds: Sequence[Mapping[str, str]], preds: Sequence[Mapping[str, str]], with_sections: bool = False
                  ) -> Any:
    """Every gold section of every sample is one pair; the corpus value is the mean over all pairs
    (pooled, as PromptCBLUE reports it); a sample's own value is the mean over its sections, so
    per-sample values do not average to the corpus value when samples have different numbers of
    sections."""
    pooled: list[float] = []
    per_sample = []
    sections = []
    for gold, pred in zip(golds, preds):
        mine = [rouge_chinese_l((pred.get(k, "") or "").strip(), (v or "").strip()) for k, v in gold.items()]
        pooled += mine
        per_sample.append({"score": sum(mine) / len(mine) if mine else 0.0})
        sections.append({"rouge_l_sum": sum(mine), "sections": len(mine)})
    metrics = {"rouge_l": sum(pooled) / len(pooled) if pooled else 0.0}
    # with_sections: also each sample's section count and ROUGE sum (the parts of the pooled mean)
    return (metrics, per_sample, sections) if with_sections else (metrics, per_sample)


def score_sheet(families: Sequence[str], datasets: Sequence[str], golds: Sequence[Any], preds: Sequence[Any]
                ) -> ScoreSheet:
    """Per-dataset metrics (``<dataset>.<metric>``) and ``score``, the mean of their main metrics."""

    def score_dataset(dataset: str, idx: list[int]) -> GroupScore:
        family = families[idx[0]]
        g, p = [golds[i] for i in idx], [preds[i] for i in idx]
        if family == "cls":
            metrics, samples = classification_scores(g, p, dataset)
            filled = [x if x != "" else FIRST_LABEL[dataset] for x in p]
            labels = tuple(sorted({str(x) for x in (*g, *filled)}))
            macro = dataset in MACRO_DATASETS
            # classification_report averages over the labels in gold or predictions: the macro
            # average unweighted, the "weighted avg" by gold support
            average = {"over": "present", "weighting": "uniform" if macro else "support"}
            return GroupScore(metrics, samples, "macro_f1" if macro else "f1",
                              parts=[class_parts(gold, pred) for gold, pred in zip(g, filled)],
                              aggregations={"macro_f1" if macro else "f1": MacroF1(labels, **average),
                                            "precision": MacroF1(labels, stat="precision", **average),
                                            "recall": MacroF1(labels, stat="recall", **average)})
        if family == "gen":
            metrics, samples = generation_scores(g, p)
            return GroupScore(metrics, samples, "rouge_l", parts=[{"rouge_l": s["score"]} for s in samples],
                              aggregations={"rouge_l": Ratio("rouge_l", COUNT)})
        if family == "report":
            metrics, samples, sections = report_scores(g, p, with_sections=True)
            return GroupScore(metrics, samples, "rouge_l", parts=sections,
                              aggregations={"rouge_l": Ratio("rouge_l_sum", "sections")})
        metrics, samples = extraction_scores(g, p)
        return GroupScore(metrics, samples, "f1", parts=[{k: s[k] for k in ("tp", "fp", "fn")} for s in samples],
                          aggregations={stat: MicroPRF(stat) for stat in ("precision", "recall", "f1")})

    return grouped_score_sheet(datasets, score_dataset)
