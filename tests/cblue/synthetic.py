"""SYNTHETIC fixtures in the CBLUE, PromptCBLUE and Huatuo-26M file formats.

Every sentence, question, answer, label and term below was written for these tests. None of it
comes from CBLUE, PromptCBLUE or Huatuo-26M, whose data evalpipe may not ship (Tianchi terms,
no licence, hub-only). Only the *formats* (field names, file names, folder layout, inclusive
``end_idx``, ``##`` separators, PromptCBLUE's answer wording) follow the published ones.

:func:`write_cblue` writes the Tianchi folder layout under a directory; the other writers produce
single files. Entity offsets are computed from the text (``text.index``) so they cannot drift.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

SYNTHETIC = "SYNTHETIC test data written for evalpipe; not from CBLUE/PromptCBLUE/Huatuo-26M"


def ent(text: str, mention: str, kind: str, nth: int = 0) -> dict[str, Any]:
    """A CMeEE entity with CBLUE's *inclusive* end_idx."""
    start = -1
    for _ in range(nth + 1):
        start = text.index(mention, start + 1)
    return {"start_idx": start, "end_idx": start + len(mention) - 1, "type": kind, "entity": mention}


def _cmeee(text: str, *entities: tuple[str, str]) -> dict[str, Any]:
    return {"text": text, "entities": [ent(text, m, k) for m, k in entities]}


CMEEE = {
    "dev": [
        _cmeee("患者腹部疼痛三天，诊断为急性阑尾炎。", ("腹部疼痛", "sym"), ("腹部", "bod"), ("急性阑尾炎", "dis")),
        _cmeee("给予阿莫西林口服，复查血常规。", ("阿莫西林", "dru"), ("血常规", "ite")),
        _cmeee("转入心内科，行冠状动脉造影。", ("心内科", "dep"), ("冠状动脉造影", "pro"), ("冠状动脉", "bod")),
    ],
    "train": [
        _cmeee("幽门螺杆菌感染可引起胃炎。", ("幽门螺杆菌", "mic"), ("胃炎", "dis")),
        _cmeee("使用呼吸机辅助通气。", ("呼吸机", "equ")),
        _cmeee("头痛伴恶心呕吐。", ("头痛", "sym"), ("头", "bod"), ("恶心呕吐", "sym")),
        _cmeee("口服布洛芬止痛。", ("布洛芬", "dru")),
    ],
}

CMEIE_SCHEMAS = [
    {"subject_type": "疾病", "predicate": "药物治疗", "object_type": "药物"},
    {"subject_type": "疾病", "predicate": "临床表现", "object_type": "症状"},
    {"subject_type": "疾病", "predicate": "实验室检查", "object_type": "检查"},
]


def _spo(s: str, p: str, o: str) -> dict[str, Any]:
    return {"Combined": False, "predicate": p, "subject": s, "subject_type": "疾病",
            "object": {"@value": o}, "object_type": {"@value": "其他"}}


CMEIE = {
    "dev": [
        {"text": "糖尿病患者可用二甲双胍治疗，常见多饮多尿。",
         "spo_list": [_spo("糖尿病", "药物治疗", "二甲双胍"), _spo("糖尿病", "临床表现", "多饮多尿")]},
        {"text": "痛风急性发作时检测血尿酸。", "spo_list": [_spo("痛风", "实验室检查", "血尿酸")]},
    ],
    "train": [
        {"text": "高血压可选用氨氯地平。", "spo_list": [_spo("高血压", "药物治疗", "氨氯地平")]},
        {"text": "肺炎表现为咳嗽咳痰。", "spo_list": [_spo("肺炎", "临床表现", "咳嗽咳痰")]},
        {"text": "本句没有任何医学关系。", "spo_list": []},
    ],
}

CDN = {
    "dev": [
        {"text": "高血压3级", "normalized_result": "高血压"},
        {"text": "2型糖尿病伴肾病", "normalized_result": "2型糖尿病##糖尿病肾病"},
    ],
    "train": [
        {"text": "急性上感", "normalized_result": "急性上呼吸道感染"},
        {"text": "冠心病;心绞痛", "normalized_result": "冠状动脉粥样硬化性心脏病##心绞痛"},
        {"text": "腰椎间盘突出症术后", "normalized_result": "腰椎间盘突出"},
    ],
}
CDN_TERMS = ["高血压", "2型糖尿病", "糖尿病肾病", "急性上呼吸道感染", "冠状动脉粥样硬化性心脏病", "心绞痛",
             "腰椎间盘突出", "高血压性心脏病", "1型糖尿病", "肾病综合征", "胃溃疡"]

CTC = {
    "dev": [
        {"id": "s1", "label": "Age", "text": "年龄在18至65岁之间"},
        {"id": "s2", "label": "Disease", "text": "合并严重肝病者"},
        {"id": "s3", "label": "Age", "text": "年龄大于75岁者"},
    ],
    "train": [
        {"id": "s1", "label": "Consent", "text": "自愿签署知情同意书"},
        {"id": "s2", "label": "Pregnancy-related Activity", "text": "妊娠或哺乳期妇女"},
        {"id": "s3", "label": "Smoking Status", "text": "每日吸烟超过10支"},
    ],
}
STS = {
    "dev": [
        {"id": "1", "text1": "糖尿病人能吃西瓜吗", "text2": "糖尿病患者可以吃西瓜吗", "label": "1", "category": "diabetes"},
        {"id": "2", "text1": "高血压头晕怎么办", "text2": "高血压要吃什么水果", "label": "0", "category": "hypertension"},
        {"id": "3", "text1": "乙肝能治愈吗", "text2": "乙肝可以彻底治好吗", "label": "1", "category": "hepatitis"},
        {"id": "4", "text1": "艾滋病潜伏期多久", "text2": "艾滋病如何预防", "label": "0", "category": "aids"},
    ],
    "train": [
        {"id": "1", "text1": "乳腺癌早期症状", "text2": "乳腺癌早期有什么表现", "label": "1", "category": "breast_cancer"},
        {"id": "2", "text1": "糖尿病足怎么护理", "text2": "糖尿病能喝酒吗", "label": "0", "category": "diabetes"},
        {"id": "3", "text1": "高血压能运动吗", "text2": "高血压病人可以锻炼吗", "label": "1", "category": "hypertension"},
    ],
}
QIC = {
    "dev": [
        {"id": "s1", "query": "胃痛吃什么药好", "label": "治疗方案"},
        {"id": "s2", "query": "血小板偏高是什么意思", "label": "指标解读"},
    ],
    "train": [
        {"id": "s1", "query": "做胃镜多少钱", "label": "医疗费用"},
        {"id": "s2", "query": "为什么会得痔疮", "label": "病因分析"},
        {"id": "s3", "query": "感冒了去哪个科室", "label": "就医建议"},
    ],
}
QTR = {
    "dev": [
        {"id": "s1", "query": "小儿发烧怎么退烧", "title": "宝宝发烧的物理降温方法", "label": "2"},
        {"id": "s2", "query": "牙龈出血", "title": "牙龈出血是什么原因引起的", "label": "3"},
    ],
    "train": [
        {"id": "s1", "query": "颈椎病锻炼", "title": "颈椎病的康复锻炼方法", "label": "3"},
        {"id": "s2", "query": "鼻炎", "title": "眼睛干涩怎么办", "label": "0"},
        {"id": "s3", "query": "孕妇补钙", "title": "孕期饮食注意事项", "label": "1"},
    ],
}
QQR = {
    "dev": [
        {"id": "s1", "query1": "宝宝咳嗽怎么办", "query2": "婴儿咳嗽怎么办", "label": "2"},
        {"id": "s2", "query1": "胃炎吃什么", "query2": "慢性胃炎吃什么", "label": "1"},
    ],
    "train": [
        {"id": "s1", "query1": "头疼怎么缓解", "query2": "头痛如何缓解", "label": "2"},
        {"id": "s2", "query1": "失眠的原因", "query2": "睡眠不好", "label": "NA"},
        {"id": "s3", "query1": "感冒发烧", "query2": "感冒", "label": "0"},
    ],
}

#: folder → {split: records}, and whether the files are JSON lines (CMeIE) or a JSON array
TASK_FILES = {
    "CMeEE": (CMEEE, False), "CMeIE": (CMEIE, True), "CHIP-CDN": (CDN, False), "CHIP-CTC": (CTC, False),
    "CHIP-STS": (STS, False), "KUAKE-QIC": (QIC, False), "KUAKE-QTR": (QTR, False), "KUAKE-QQR": (QQR, False),
}


def write_records(path: Path, records: list[dict[str, Any]], lines: bool) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if lines:
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    else:
        path.write_text(json.dumps(records, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def write_cblue(root: Path) -> Path:
    """The Tianchi layout ``root/<TASK>/<TASK>_{train,dev}.json`` plus CMeIE's schema file."""
    for folder, (splits, lines) in TASK_FILES.items():
        for split, records in splits.items():
            write_records(root / folder / f"{folder}_{split}.json", records, lines)
    write_records(root / "CMeIE" / "53_schemas.json", CMEIE_SCHEMAS, True)
    (root / "README.txt").write_text(SYNTHETIC + "\n", encoding="utf-8")
    return root


def write_xlsx(path: Path, rows: list[list[str]]) -> Path:
    """A minimal .xlsx (shared strings, one sheet) like the ICD-10 term table: code, term."""
    strings = [cell for row in rows for cell in row]
    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    shared = f'<sst {ns} count="{len(strings)}">' + "".join(f"<si><t>{s}</t></si>" for s in strings) + "</sst>"
    body, index = [], 0
    for r, row in enumerate(rows, start=1):
        cells = []
        for c, _ in enumerate(row):
            cells.append(f'<c r="{chr(65 + c)}{r}" t="s"><v>{index}</v></c>')
            index += 1
        body.append(f'<row r="{r}">{"".join(cells)}</row>')
    sheet = f'<worksheet {ns}><sheetData>{"".join(body)}</sheetData></worksheet>'
    with zipfile.ZipFile(path, "w") as book:
        book.writestr("xl/sharedStrings.xml", shared)
        book.writestr("xl/worksheets/sheet1.xml", sheet)
    return path


def write_term_table(path: Path) -> Path:
    return write_xlsx(path, [[f"X{i:02d}.000", term] for i, term in enumerate(CDN_TERMS)])


# ---- PromptCBLUE -----------------------------------------------------------------------------

def pc(sample_id: str, dataset: str, task_type: str, input_: str, target: str, choices: list[str] | None) -> dict:
    return {"input": input_, "target": target, "answer_choices": choices, "task_type": task_type,
            "task_dataset": dataset, "sample_id": sample_id}


PROMPTCBLUE = [
    pc("dev-1", "CMeEE-V2", "ner", "找出句子中的疾病，身体部位实体：\n患者胃溃疡伴腹部不适。\n答：",
       "上述句子中的实体包含：\n疾病实体：胃溃疡\n身体部位实体：腹部", ["疾病", "身体部位"]),
    pc("dev-2", "CMeIE", "spo_generation", "找出句子中具有药物治疗关系的头尾实体对：\n哮喘可用沙丁胺醇。\n答：",
       "具有药物治疗关系的头尾实体对如下：头实体为哮喘，尾实体为沙丁胺醇。", ["药物治疗"]),
    pc("dev-3", "CHIP-CDN", "normalization", "诊断归一化：\n高血压2级\n选项：高血压，低血压，高血脂\n答：",
       "高血压", ["高血压", "低血压", "高血脂"]),
    pc("dev-4", "CHIP-CTC", "cls", "判断筛选标准类型：\n年龄18岁以上\n选项：年龄，性别\n答：", "年龄", ["年龄", "性别"]),
    pc("dev-5", "CHIP-CTC", "cls", "判断筛选标准类型：\n签署知情同意书\n选项：年龄，性别\n答：", "非上述类型", ["年龄", "性别"]),
    pc("dev-6", "CHIP-STS", "cls", "两句话意思相同吗？\n“胃痛怎么办”，“胃疼怎么处理”\n选项：是的，不是\n答：", "是的",
       ["是的", "不是"]),
    pc("dev-7", "CHIP-STS", "cls", "两句话意思相同吗？\n“头晕”，“脚痛”\n选项：是的，不是\n答：", "不是", ["是的", "不是"]),
    pc("dev-8", "KUAKE-QTR", "matching", "匹配程度如何？\n“咳嗽”，“咳嗽的原因”\n选项：完全不匹配或者没有参考价值，很少匹配有一些参考价值，部分匹配，完全匹配\n答：",
       "完全匹配", ["完全不匹配或者没有参考价值", "很少匹配有一些参考价值", "部分匹配", "完全匹配"]),
    pc("dev-9", "MedDG", "response_generation", "患者：胃不舒服怎么办？\n答：", "建议清淡饮食，必要时就医。", None),
    pc("dev-10", "IMCS-V2-MRG", "report_generation", "根据对话生成诊疗报告：\n患者：孩子咳嗽两天。\n答：",
       "诊疗报告如下：\n主诉：咳嗽两天。\n现病史：患儿咳嗽两天。\n辅助检查：\n既往史：不详。\n诊断：上呼吸道感染。\n建议：多喝水。",
       None),
    pc("dev-11", "CHIP-CDEE", "event_extraction", "临床发现事件抽取：\n腹部持续性胀痛。\n答：",
       "上述句子中的临床发现事件如下：\n主体词：疼痛；发生状态：；描述词：持续性，胀痛；解剖部位：腹部", None),
    pc("dev-12", "IMCS-V2-SR", "attr_cls", "抽取症状实体及阴阳性：\n患者：有点发烧。\n答：",
       "当前对话中的症状及其阴阳性判断为：\n发烧：患有该症状",
       ["没有患有该症状", "患有该症状", "无法根据上下文确定病人是否患有该症状"]),
]


def write_promptcblue(path: Path, records: list[dict] | None = None) -> Path:
    return write_records(path, records if records is not None else PROMPTCBLUE, lines=True)


# ---- Huatuo-26M ------------------------------------------------------------------------------

HUATUO = [
    {"questions": "感冒发烧应该吃什么药？", "answers": "可以服用对乙酰氨基酚退烧，多喝水，注意休息。"},
    {"questions": "胃痛是什么原因引起的？", "answers": "胃痛常见原因有胃炎、胃溃疡和饮食不规律。"},
    {"questions": "高血压患者饮食要注意什么？", "answers": "应低盐低脂饮食，戒烟限酒，规律运动。"},
    {"questions": "失眠怎么办？", "answers": "保持规律作息，睡前避免使用手机，必要时就医。"},
]


def write_huatuo(path: Path, records: list[dict] | None = None) -> Path:
    return write_records(path, records if records is not None else HUATUO, lines=True)
