"""The five CBLUE label tasks: CHIP-CTC, CHIP-STS, KUAKE-QIC, KUAKE-QTR, KUAKE-QQR.

They share everything but their fields, labels and headline metric, so one module builds all five
specs from :class:`LabelTask` definitions. Data are the user's Tianchi files (JSON arrays of
``{id, <text fields>, label}``); the dev split is evaluated by default (test labels are hidden),
few-shot examples come from the train file.

Answers are parsed by :mod:`evalpipe.parsers.zh_labels`: the exact label (or one of the aliases
the prompt itself names, e.g. ``是``/``否`` for CHIP-STS's ``1``/``0``) after full-/half-width,
space and trailing-punctuation normalisation. Anything else is a counted parse failure, always
wrong, and never a class of its own.

Metrics (CBLUE's headline metric first in ``metrics``):

* ``macro_f1``: unweighted mean of per-class F1 over the **gold label set** of the evaluated
  split (:func:`evalpipe.metrics.classification.macro_f1`). CBLUE's scorer is sklearn's macro
  average, whose class set also includes *predicted* labels; the two agree whenever every
  prediction is a valid label that occurs in gold, which is what a parse failure rule ensures
  except for a valid label that happens to be absent from the split's gold.
* ``accuracy``: share of samples whose parsed label equals gold (a failure is wrong).

CHIP-CTC and CHIP-STS report macro-F1, KUAKE-QIC/QTR/QQR accuracy, as in the CBLUE paper.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evalpipe.tasks.cblue.files import TEST_HINT, LabelledDoc, read_labelled, split_files
from evalpipe.metrics.aggregation import MacroF1, Mean
from evalpipe.metrics.classification import accuracy, class_parts, macro_f1
from evalpipe.metrics.options import MetricOptions
from evalpipe.parsers.zh_labels import LabelSet, parse_label
from evalpipe.records import Example, Prediction, ScoreSheet
from evalpipe.tasks.base import EVAL, LoadOptions, SHOTS, Scoring, TaskData, TaskSpec
from evalpipe.tasks.registry import register

CBLUE_CITATION = ("Zhang N, et al. CBLUE: A Chinese Biomedical Language Understanding Evaluation Benchmark. "
                  "ACL 2022. Data: Tianchi (https://tianchi.aliyun.com/dataset/95414), Tianchi terms; not shipped.")

#: CHIP-CTC's 44 categories (CBLUE's format checker) with the Chinese names PromptCBLUE uses
CTC_LABELS: Mapping[str, str] = {
    "Disease": "疾病", "Symptom": "症状(患者感受)", "Sign": "体征(医生检测)",
    "Pregnancy-related Activity": "怀孕相关", "Neoplasm Status": "肿瘤进展",
    "Non-Neoplasm Disease Stage": "疾病分期", "Allergy Intolerance": "过敏耐受",
    "Organ or Tissue Status": "器官组织状态", "Life Expectancy": "预期寿命", "Oral related": "口腔相关",
    "Pharmaceutical Substance or Drug": "药物", "Therapy or Surgery": "治疗或手术", "Device": "设备",
    "Nursing": "护理", "Diagnostic": "诊断", "Laboratory Examinations": "实验室检查",
    "Risk Assessment": "风险评估", "Receptor Status": "受体状态", "Age": "年龄",
    "Special Patient Characteristic": "特殊病人特征", "Literacy": "读写能力", "Gender": "性别",
    "Education": "教育情况", "Address": "居住情况", "Ethnicity": "种族", "Consent": "知情同意",
    "Enrollment in other studies": "参与其它试验", "Researcher Decision": "研究者决定", "Capacity": "能力",
    "Ethical Audit": "伦理审查", "Compliance with Protocol": "依存性", "Addictive Behavior": "成瘾行为",
    "Bedtime": "睡眠", "Exercise": "锻炼", "Diet": "饮食", "Alcohol Consumer": "酒精使用",
    "Sexual related": "性取向", "Smoking Status": "吸烟状况", "Blood Donation": "献血",
    "Encounter": "病例来源", "Disabilities": "残疾群体", "Healthy": "健康群体",
    "Data Accessible": "数据可及性", "Multiple": "含有多个类别",
}
QIC_LABELS = ("病情诊断", "病因分析", "治疗方案", "就医建议", "指标解读", "疾病表述", "后果表述",
              "注意事项", "功效作用", "医疗费用", "其他")
#: KUAKE-QTR relevance levels (label → meaning shown in the prompt)
QTR_LEVELS: Mapping[str, str] = {
    "3": "完全匹配：标题与搜索词的主题完全一致",
    "2": "部分匹配：标题与搜索词的主题部分一致",
    "1": "很少匹配：标题与搜索词只有少量相关内容，有一些参考价值",
    "0": "完全不匹配：标题与搜索词的主题无关，或没有参考价值",
}
#: KUAKE-QQR relations (label → meaning shown in the prompt)
QQR_LEVELS: Mapping[str, str] = {
    "2": "完全一致：两个搜索词的语义等价",
    "1": "语义子集：搜索词2的语义是搜索词1的子集（范围更窄）",
    "0": "语义父集或无关：搜索词2的语义是搜索词1的父集（范围更宽），或两者语义无直接关联",
}


@dataclass(frozen=True)
class LabelTask:
    name: str
    folder: str
    title: str
    text_fields: tuple[str, ...]
    label_set: LabelSet
    headline: str
    #: gold label → the answer a few-shot example demonstrates (default: the label itself)
    shot_answers: Mapping[str, str] = field(default_factory=dict)
    #: label spellings in the file → canonical label
    file_aliases: Mapping[str, str] = field(default_factory=dict)
    extra_fields: tuple[str, ...] = ()
    template_vars: Mapping[str, object] = field(default_factory=dict)


TASKS = (
    LabelTask(
        name="chip_ctc", folder="CHIP-CTC", title="CHIP-CTC clinical-trial criterion classification, 44 classes",
        text_fields=("text",), headline="macro_f1",
        label_set=LabelSet.of(CTC_LABELS, {zh: en for en, zh in CTC_LABELS.items()}),
        template_vars={"labels": [{"label": en, "gloss": zh} for en, zh in CTC_LABELS.items()]},
    ),
    LabelTask(
        name="chip_sts", folder="CHIP-STS", title="CHIP-STS question-pair similarity, 是/否",
        text_fields=("text1", "text2"), extra_fields=("category",), headline="macro_f1",
        label_set=LabelSet.of(("0", "1"), {"是": "1", "是的": "1", "相同": "1", "yes": "1",
                                           "否": "0", "不是": "0", "不同": "0", "no": "0"}),
        shot_answers={"1": "是", "0": "否"},
    ),
    LabelTask(
        name="kuake_qic", folder="KUAKE-QIC", title="KUAKE-QIC search-query intent, 11 classes",
        text_fields=("query",), headline="accuracy",
        label_set=LabelSet.of(QIC_LABELS, {"疾病描述": "疾病表述"}),
        template_vars={"labels": list(QIC_LABELS)},
    ),
    LabelTask(
        name="kuake_qtr", folder="KUAKE-QTR", title="KUAKE-QTR query-title relevance, 0-3",
        text_fields=("query", "title"), headline="accuracy",
        label_set=LabelSet.of(("0", "1", "2", "3"), {m.split("：")[0]: k for k, m in QTR_LEVELS.items()}),
        template_vars={"levels": [{"label": k, "meaning": m} for k, m in QTR_LEVELS.items()]},
    ),
    LabelTask(
        name="kuake_qqr", folder="KUAKE-QQR", title="KUAKE-QQR query-query relation, 0-2",
        text_fields=("query1", "query2"), headline="accuracy",
        label_set=LabelSet.of(("0", "1", "2"), {"完全一致": "2", "语义子集": "1", "后者是前者的语义子集": "1",
                                                "语义父集": "0", "后者是前者的语义父集": "0",
                                                "语义无直接关联": "0", "语义父集或无关": "0"}),
        file_aliases={"NA": "0"},  # as CBLUE's own QQRDataProcessor maps it
        template_vars={"levels": [{"label": k, "meaning": m} for k, m in QQR_LEVELS.items()]},
    ),
)


def _examples(task: LabelTask, docs: Sequence[LabelledDoc], split: str, path: Path) -> tuple[Example, ...]:
    return tuple(
        Example(id=f"{split}-{doc.id}", inputs=dict(doc.fields), gold=doc.label,
                meta={"file": str(path), "line": doc.line, "id": doc.id})
        for doc in docs
    )


def _loader(task: LabelTask):
    def load(options: LoadOptions) -> TaskData:
        files = split_files(options, (task.folder,))
        hint = TEST_HINT if files.split == "test" else ""

        def read(path: Path, hint: str = "") -> list[LabelledDoc]:
            return read_labelled(path, task.text_fields, task.label_set.labels, task.file_aliases,
                                 task.extra_fields, hint)

        examples = _examples(task, read(files.eval_path, hint), files.split, files.eval_path)
        pool: tuple[Example, ...] = ()
        if files.shot_path is not None:
            pool = _examples(task, read(files.shot_path), files.shot_split, files.shot_path)
        used = (files.eval_path,) + ((files.shot_path,) if files.shot_path else ())
        return TaskData(examples=examples, shot_pool=pool, files=used, split=files.split)

    return load


def _scoring(task: LabelTask) -> Scoring:
    def parse(answer: str, example: Example) -> Prediction:
        return parse_label(answer, task.label_set)

    def empty(example: Example) -> Prediction:
        return Prediction(value=None, failed=True, diagnostics={"no_answer": True})

    def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
        golds = [ex.gold for ex in examples]
        preds = [p.value for p in predictions]
        per_sample = [{"accuracy": 1.0 if p is not None and p == g else 0.0} for g, p in zip(golds, preds)]
        labels = tuple(sorted({str(g) for g in golds}))
        return ScoreSheet(corpus={"accuracy": accuracy(golds, preds), "macro_f1": macro_f1(golds, preds)},
                          per_sample=per_sample,
                          parts=[{**s, **class_parts(g, p)} for s, g, p in zip(per_sample, golds, preds)],
                          aggregations={"accuracy": Mean("accuracy"), "macro_f1": MacroF1(labels, over="gold")})

    return Scoring(parse=parse, score=score, empty=empty,
                   description="exact label after width/space/punctuation normalisation; "
                   "macro-F1 over the gold label set, accuracy")


def _spec(task: LabelTask) -> TaskSpec:
    other = "accuracy" if task.headline == "macro_f1" else "macro_f1"
    return TaskSpec(
        name=task.name,
        data_roles=(EVAL, SHOTS),
        description=f"CBLUE {task.title}; {task.headline} (dev split, 3-shot).",
        template=f"cblue/{task.name}.j2",
        load=_loader(task),
        shot_target=lambda ex: task.shot_answers.get(ex.gold, ex.gold),
        scorings={"default": _scoring(task)},
        metrics=(task.headline, other),
        max_tokens=64,
        primary_metric=task.headline,
        default_shots=3,
        template_vars=dict(task.template_vars),
        completion_stop=("\n",),
        suites=("cblue",),
        citation=CBLUE_CITATION,
    )


SPECS = {task.name: register(_spec(task)) for task in TASKS}
