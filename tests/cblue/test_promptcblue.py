"""PromptCBLUE files: default scoring, and each reproduced quirk shown where compat differs from default."""

from __future__ import annotations

import asyncio

import pytest

from evalpipe.compat.promptcblue import bert_basic_tokens, rouge_chinese_l
from evalpipe.config import RunConfig
from evalpipe.records import Completion
from evalpipe.pipeline.execute import execute
from evalpipe.scoring import score_task
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task
from tests.cblue import synthetic as syn
from tests.support.scripted_backend import ScriptedBackend, last_user_text

SPEC = get_task("promptcblue")
STS_CHOICES = ["是的", "不是"]
QTR_CHOICES = ["完全不匹配或者没有参考价值", "很少匹配有一些参考价值", "部分匹配", "完全匹配"]


def examples(tmp_path, records):
    path = syn.write_promptcblue(tmp_path / "dev.json", records)
    return SPEC.load(LoadOptions(paths={"eval": path})).examples


def both(exs, answers):
    completions = [None if a is None else Completion(text=a) for a in answers]
    prompts = ["{}"] * len(exs)
    default = score_task(SPEC, exs, prompts, completions, None)
    compat = score_task(SPEC, exs, prompts, completions, "promptcblue")
    return default.metrics, compat.metrics


def test_input_is_sent_verbatim_and_perfect_targets_score_one(tmp_path):
    path = syn.write_promptcblue(tmp_path / "dev.json")
    targets = {r["input"]: r["target"] for r in syn.PROMPTCBLUE}
    config = RunConfig(tasks=("promptcblue",), model="m", base_url="http://127.0.0.1:1/v1",
                       data={"promptcblue": str(path)})
    backend = ScriptedBackend(lambda p: targets[last_user_text(p)])
    outcome = asyncio.run(execute(config, lambda _: backend, tmp_path / "runs"))
    assert [last_user_text(p) for p in backend.calls] == [r["input"] for r in syn.PROMPTCBLUE]
    m = outcome.metrics["promptcblue"]
    assert m["score"] == 1.0 and m["datasets"] == 10.0 and m["parse_failure_rate"] == 0.0
    assert m["CMeEE-V2.f1"] == m["CHIP-CTC.macro_f1"] == m["KUAKE-QTR.micro_f1"] == m["MedDG.rouge_l"] == 1.0
    exs = SPEC.load(LoadOptions(paths={"eval": path})).examples
    compat = score_task(SPEC, exs, ["{}"] * len(exs),
                        [Completion(text=r["target"]) for r in syn.PROMPTCBLUE], "promptcblue").metrics
    assert compat["score"] == pytest.approx(1.0) and compat["CHIP-STS.f1"] == 1.0


def ner(target="上述句子中的实体包含：\n疾病实体：胃溃疡\n身体部位实体：腹部"):
    return syn.pc("n1", "CMeEE-V2", "ner", "找出实体：\n患者胃溃疡伴腹部不适，服用奥美拉唑。\n答：", target, ["疾病", "身体部位"])


def test_quirk_ner_colon_and_comma_widths(tmp_path):
    d, c = both(examples(tmp_path, [ner()]), ["上述句子中的实体包含：\n疾病实体: 胃溃疡\n身体部位实体：腹部"])
    # compat keeps ": 胃溃疡" as the mention (only "：" is removed) → tp 1 fp 1 fn 1 → F1 0.5
    assert d["CMeEE-V2.f1"] == 1.0 and c["CMeEE-V2.f1"] == 0.5


def test_quirk_ner_unrequested_types_are_ignored_by_compat(tmp_path):
    answer = "上述句子中的实体包含：\n疾病实体：胃溃疡\n身体部位实体：腹部\n药物实体：奥美拉唑"
    d, c = both(examples(tmp_path, [ner()]), [answer])
    # default: 奥美拉唑 is a false positive → P 2/3, R 1 → F1 0.8; compat never reads the 药物 line
    assert d["CMeEE-V2.f1"] == pytest.approx(0.8) and c["CMeEE-V2.f1"] == 1.0


def test_quirk_cmeie_readme_form_yields_nothing_in_compat(tmp_path):
    record = syn.PROMPTCBLUE[1]
    answer = "上述句子中药物治疗关系的实体对如下：\n头实体：哮喘，尾实体：沙丁胺醇；"
    d, c = both(examples(tmp_path, [record]), [answer])
    assert d["CMeIE.f1"] == 1.0 and c["CMeIE.f1"] == 0.0


def test_quirk_cdn_invented_terms_dropped_and_only_last_line_read(tmp_path):
    record = syn.PROMPTCBLUE[2]  # gold 高血压; choices 高血压，低血压，高血脂
    d, c = both(examples(tmp_path, [record]), ["高血压，原发性高血压"])
    # default: 原发性高血压 is a false positive → P 1/2, R 1, F1 2/3; compat drops it → 1.0
    assert d["CHIP-CDN.f1"] == pytest.approx(2 / 3) and c["CHIP-CDN.f1"] == 1.0
    d, c = both(examples(tmp_path, [record]), ["高血压\n以上是标准词"])
    # compat reads only the last line ("以上是标准词", not a choice) → nothing → 0
    assert c["CHIP-CDN.f1"] == 0.0 and d["CHIP-CDN.f1"] == pytest.approx(2 / 3)


def test_quirk_cdee_first_line_skipped_and_descriptor_order(tmp_path):
    record = syn.PROMPTCBLUE[10]  # 疼痛; ; 持续性，胀痛; 腹部
    no_lead_in = "主体词：疼痛；发生状态：；描述词：持续性，胀痛；解剖部位：腹部"
    d, c = both(examples(tmp_path, [record]), [no_lead_in])
    assert d["CHIP-CDEE.f1"] == 1.0 and c["CHIP-CDEE.f1"] == 0.0
    reordered = "上述句子中的临床发现事件如下：\n主体词：疼痛；发生状态：；描述词：胀痛，持续性；解剖部位：腹部"
    d, c = both(examples(tmp_path, [record]), [reordered])
    assert d["CHIP-CDEE.f1"] == 1.0 and c["CHIP-CDEE.f1"] == 0.0


def test_quirk_attr_outside_choices_replaced_by_a_default(tmp_path):
    record = syn.pc("a1", "IMCS-V2-SR", "attr_cls", "抽取症状：\n患者：好像有点咳嗽。\n答：",
                    "症状判断为：\n咳嗽：无法根据上下文确定病人是否患有该症状", syn.PROMPTCBLUE[11]["answer_choices"])
    d, c = both(examples(tmp_path, [record]), ["症状判断为：\n咳嗽：不好说"])
    # compat replaces the invented "不好说" with the default attribute, which happens to be gold
    assert c["IMCS-V2-SR.f1"] == 1.0 and d["IMCS-V2-SR.f1"] == 0.0


def sts(i, target):
    return syn.pc(f"s{i}", "CHIP-STS", "cls", f"第{i}对问句意思相同吗？\n选项：是的，不是\n答：", target, STS_CHOICES)


def test_quirk_empty_answer_becomes_the_first_label(tmp_path):
    exs = examples(tmp_path, [sts(1, "是的"), sts(2, "不是")])
    d, c = both(exs, ["", "不是"])
    # compat: "" → "是的" (correct by accident) → all right; default: a failure, always wrong
    assert c["CHIP-STS.f1"] == 1.0
    assert d["CHIP-STS.micro_f1"] == 0.5 and d["parse_failure_rate"] == 0.5


def test_quirk_only_strip_so_punctuation_invents_a_label(tmp_path):
    exs = examples(tmp_path, [sts(1, "是的"), sts(2, "不是")])
    d, c = both(exs, ["是的。", "不是"])
    assert d["CHIP-STS.micro_f1"] == 1.0
    # compat classes {是的, 不是, 是的。}: 是的 F 0 (support 1), 不是 F 1 (support 1), 是的。 F 0 (support 0)
    # weighted by support → (0 + 1) / 2 = 0.5
    assert c["CHIP-STS.f1"] == 0.5


def test_quirk_invented_labels_become_classes_in_macro_f1(tmp_path):
    ctc = [syn.pc(f"c{i}", "CHIP-CTC", "cls", f"第{i}条筛选标准\n选项：年龄，性别\n答：", t, ["年龄", "性别"])
           for i, t in enumerate(["年龄", "非上述类型"])]
    d, c = both(examples(tmp_path, ctc), ["年龄", "年龄组"])
    # default: 年龄组 is a parse failure; macro over gold {年龄, 非上述类型} = (1 + 0) / 2
    assert d["CHIP-CTC.macro_f1"] == 0.5
    # compat: classes {年龄, 非上述类型, 年龄组} = (1 + 0 + 0) / 3
    assert c["CHIP-CTC.macro_f1"] == pytest.approx(1 / 3)


def test_quirk_micro_datasets_use_the_weighted_average(tmp_path):
    golds = ["完全匹配", "完全匹配", "完全匹配", "部分匹配"]
    qtr = [syn.pc(f"q{i}", "KUAKE-QTR", "matching", f"第{i}对匹配程度？\n答：", g, QTR_CHOICES) for i, g in enumerate(golds)]
    d, c = both(examples(tmp_path, qtr), ["完全匹配", "完全匹配", "部分匹配", "部分匹配"])
    # micro-F1 = accuracy = 3/4. Weighted: 完全匹配 P 1 R 2/3 F 0.8 (support 3), 部分匹配 P 1/2 R 1
    # F 2/3 (support 1) → (3 · 0.8 + 2/3) / 4 = 0.7667
    assert d["KUAKE-QTR.micro_f1"] == 0.75
    assert c["KUAKE-QTR.f1"] == pytest.approx((3 * 0.8 + 2 / 3) / 4)


def test_quirk_generation_tokens_and_empty_answers(tmp_path):
    assert bert_basic_tokens("服用Aspirin 100mg。") == ["服", "用", "aspirin", "100mg", "。"]
    # empty answer → "无 。" vs ref 建议清淡饮食，必要时就医。 (13 tokens incl. ， and 。): LCS = 1 (。)
    # P = 1/2, R = 1/13 → f = 2·(1/26)/(1/2 + 1/13 + 1e-8)
    expected = 2 * (1 / 26) / (1 / 2 + 1 / 13 + 1e-8)
    assert rouge_chinese_l("", "建议清淡饮食，必要时就医。") == pytest.approx(expected)
    d, c = both(examples(tmp_path, [syn.PROMPTCBLUE[8]]), [""])
    assert d["MedDG.rouge_l"] == 0.0 and c["MedDG.rouge_l"] == pytest.approx(expected)


def test_quirk_report_sections(tmp_path):
    exs = examples(tmp_path, [syn.PROMPTCBLUE[9]])
    d, c = both(exs, ["诊疗报告如下：\n主诉：咳嗽两天。"])
    # default: 5 sections with reference text; 主诉 1.0, the other four 0 → 0.2
    assert d["IMCS-V2-MRG.rouge_l"] == pytest.approx(0.2)
    # compat pools 6 sections. 主诉 1; 辅助检查: empty vs empty → "无 。" vs "无 。" = 1. The others get
    # "无 。" (2 tokens) against m reference tokens, sharing "。": f = 2·(1/2m)/(1/2 + 1/m) →
    # 现病史 m=7: 2/9, 既往史 m=3: 2/5, 诊断 m=7: 2/9, 建议 m=4: 1/3
    assert c["IMCS-V2-MRG.rouge_l"] == pytest.approx((1 + 2 / 9 + 1 + 2 / 5 + 2 / 9 + 1 / 3) / 6, abs=1e-6)
    d, c = both(exs, ["主诉：咳嗽两天。"])  # no lead-in line: compat skips the only line
    # default still reads it (0.2); compat scores 主诉 as empty too: "无 。" vs 5 tokens → 2/7
    assert d["IMCS-V2-MRG.rouge_l"] == pytest.approx(0.2)
    assert c["IMCS-V2-MRG.rouge_l"] == pytest.approx((2 / 7 + 2 / 9 + 1 + 2 / 5 + 2 / 9 + 1 / 3) / 6, abs=1e-6)


def test_failed_requests_are_left_out_in_both_modes(tmp_path):
    """evalpipe.coverage: a failed request is in no metric, in the compat scoring too (it used to be an
    empty answer there, which the reference turns into "是的" — correct by accident). Only an answer
    that came is scored; with none, nothing is computed."""
    exs = examples(tmp_path, [sts(1, "是的"), ner()])
    d, c = both(exs, [None, None])
    assert d["errors"] == c["errors"] == 2 and d["answered"] == c["answered"] == 0
    assert d["score"] is None and c["score"] is None and c["CHIP-STS.f1"] is None
    d, c = both(exs, [None, ner()["target"]])
    assert "CHIP-STS.f1" not in c and "CHIP-STS.accuracy" not in d  # its only sample got no answer
    assert d["CMeEE-V2.f1"] == c["CMeEE-V2.f1"] == 1.0 and d["score"] == c["score"] == 1.0
    assert d["coverage"] == 0.5


def test_nothing_found_targets_load_as_empty_gold(tmp_path):
    # PromptCBLUE's reference answer when nothing of the requested kind occurs (the public toy dev.json
    # has one for CMeEE-V2); these used to fail the load as "none of the expected forms"
    records = [ner(),
               syn.pc("n2", "CMeEE-V2", "ner", "找出实体：\n今日复诊。\n答：", "上述句子没有指定类型实体", ["疾病"]),
               syn.pc("r2", "CMeIE", "spo_generation", "找出三元组：\n今日复诊。\n答：", "没有指定类型的三元组", ["病因"])]
    exs = examples(tmp_path, records)
    assert [ex.gold.value for ex in exs[1:]] == [(), ()]
    answers = [records[0]["target"], "上述句子中的实体包含：\n疾病实体：复诊", "没有指定类型的三元组"]
    d, c = both(exs, answers)
    # CMeEE-V2 pooled: gold {胃溃疡, 腹部} + {}; predicted {胃溃疡, 腹部} + {复诊} → tp 2 fp 1 fn 0
    # → P 2/3, R 1, F1 0.8 in both modes
    assert d["CMeEE-V2.f1"] == pytest.approx(0.8) and c["CMeEE-V2.f1"] == pytest.approx(0.8)
    # CMeIE: empty gold answered "nothing": tp 0, and PromptCBLUE's F1 is 0 whenever tp is 0
    assert c["CMeIE.f1"] == 0.0


# Per classification dataset: two of its labels A, B; whether the README metric is macro; the first
# label of PromptCBLUE's fixed list, which an empty answer becomes
CLASSIFICATION = {
    "CHIP-CTC": ("年龄", "性别", True, "非上述类型"),
    "KUAKE-QIC": ("病情诊断", "病因分析", True, "非上述类型"),
    "IMCS-V2-DAC": ("给出诊断", "关于症状的询问", True, "非上述类型"),
    "CHIP-STS": ("不是", "是的", False, "是的"),
    "KUAKE-IR": ("不相关", "相关", False, "相关"),
    "KUAKE-QTR": ("完全匹配", "部分匹配", False, "完全不匹配或者没有参考价值"),
    "KUAKE-QQR": ("后者是前者的语义子集", "语义无直接关联", False, "完全一致"),
}


@pytest.mark.parametrize("dataset", sorted(CLASSIFICATION))
def test_compat_average_and_empty_answer_label_per_dataset(tmp_path, dataset):
    a, b, macro, first = CLASSIFICATION[dataset]
    choices = list(dict.fromkeys([a, b] + ([first] if first != "非上述类型" else [])))
    records = [syn.pc(f"k{i}", dataset, "cls", f"第{i}题\n答：", g, choices) for i, g in enumerate([a, a, a, b])]
    _, c = both(examples(tmp_path, records), [a, a, b, b])
    key = f"{dataset}.macro_f1" if macro else f"{dataset}.f1"
    # A: P 1, R 2/3, F 0.8 (support 3); B: P 1/2, R 1, F 2/3 (support 1)
    # macro (0.8 + 2/3) / 2 = 0.7333; weighted (3 · 0.8 + 2/3) / 4 = 0.7667
    assert c[key] == pytest.approx((0.8 + 2 / 3) / 2 if macro else (3 * 0.8 + 2 / 3) / 4)
    # an empty answer becomes `first`: right exactly when the gold is `first` (one class, F 1), else 0
    lone = [syn.pc("e0", dataset, "cls", "第0题\n答：", first, choices)]
    _, c = both(examples(tmp_path, lone), [""])
    assert c[key] == 1.0
    other = [syn.pc("e1", dataset, "cls", "第1题\n答：", a, choices)]
    _, c = both(examples(tmp_path, other), [""])
    assert c[key] == 0.0


def test_compat_rouge_keeps_rouge_chinese_epsilon():
    # "无" vs "无。": tokens [无] / [无, 。]: LCS 1, P 1, R 1/2 → 2·(1/2)/(3/2 + 1e-8), not 2/3
    assert rouge_chinese_l("无", "无。") == pytest.approx(1 / (1.5 + 1e-8), abs=1e-15)
    assert rouge_chinese_l("无", "无。") < 2 / 3 - 1e-9
