"""Chinese label, triple and term-list parsers, and CMeEE's nested XML through xml_tags."""

from __future__ import annotations

import pytest

from evalpipe.parsers.term_list import format_term_list, parse_term_list
from evalpipe.parsers.triples import Triple, format_triples, parse_triples
from evalpipe.parsers.zh_labels import LabelSet, parse_label
from evalpipe.records import Example, Span
from evalpipe.tasks.cblue.cmeee import TAG_MAP, parse, tagged_text
from evalpipe.text.chinese import match_key

STS = LabelSet.of(("0", "1"), {"是": "1", "是的": "1", "否": "0", "不是": "0"})
CTC = LabelSet.of(("Disease", "Age", "Symptom"), {"疾病": "Disease", "年龄": "Age", "症状(患者感受)": "Symptom"})
QTR = LabelSet.of(("0", "1", "2", "3"))


SETS = {"sts": STS, "ctc": CTC, "qtr": QTR}


@pytest.mark.parametrize("labels, answer, label", [
    ("sts", "是", "1"), ("sts", "是的。", "1"), ("sts", "“否”", "0"), ("sts", " 不 是 ！", "0"),
    ("qtr", "２", "2"), ("qtr", "3。", "3"), ("qtr", "（1）", "1"),
    ("ctc", "Ｄｉｓｅａｓｅ", "Disease"), ("ctc", "disease", "Disease"), ("ctc", "年龄", "Age"),
    ("ctc", "症状（患者感受）", "Symptom"), ("ctc", "答：Age", "Age"),
    ("sts", "答案：是", "1"), ("sts", "<think>想一想……应该是</think>\n是", "1"), ("sts", "```\n否\n```", "0"),
])
def test_labels_after_normalisation(labels, answer, label):
    prediction = parse_label(answer, SETS[labels])
    assert prediction.value == label and not prediction.failed


@pytest.mark.parametrize("labels, answer", [
    ("sts", "可能是"), ("sts", "是，因为两个问题都问糖尿病"), ("qtr", "4"), ("ctc", "Diseases"), ("sts", "是或否"),
])
def test_anything_but_a_label_is_a_counted_failure(labels, answer):
    prediction = parse_label(answer, SETS[labels])
    assert prediction.value is None and prediction.failed
    assert prediction.diagnostics["invalid_label"] and not prediction.diagnostics["empty"]


def test_empty_and_unclosed_reasoning_are_empty_failures():
    for answer in ("", None, "   ", "<think>truncated reasoning 是"):
        prediction = parse_label(answer, STS)
        assert prediction.failed and prediction.diagnostics["empty"]


def test_label_set_rejects_labels_that_collide_after_normalisation():
    with pytest.raises(ValueError, match="same key"):
        LabelSet.of(("是", "是。"))
    with pytest.raises(ValueError, match="not a label"):
        LabelSet.of(("0",), {"是": "1"})


# ---- triples ---------------------------------------------------------------------------------

def test_triples_lines_full_width_separators_markers_and_json():
    answer = "三元组如下：\n1. 糖尿病 ｜ 药物治疗 ｜ 二甲双胍\n- 糖尿病|临床表现|“多饮多尿”\n[\"痛风\", \"实验室检查\", \"血尿酸\"]\n"
    prediction = parse_triples(answer, ["药物治疗", "临床表现", "实验室检查"])
    assert prediction.value == (
        Triple("痛风", "实验室检查", "血尿酸"), Triple("糖尿病", "临床表现", "多饮多尿"), Triple("糖尿病", "药物治疗", "二甲双胍"))
    assert not prediction.failed and prediction.diagnostics["bad_lines"] == 0


def test_triples_bad_lines_unknown_predicates_and_none_answers():
    prediction = parse_triples("糖尿病 | 并发症 | 肾病\n糖尿病可用胰岛素治疗", ["药物治疗"])
    assert prediction.value == (Triple("糖尿病", "并发症", "肾病"),)
    assert prediction.diagnostics["bad_lines"] == 1 and prediction.diagnostics["unknown_predicates"] == 1
    for none in ("无", "无。", "三元组：\n无"):
        p = parse_triples(none)
        assert p.value == () and not p.failed and p.diagnostics["none_answer"]
    failed = parse_triples("我无法完成这个任务，因为文本太短")
    assert failed.failed and failed.value == ()
    assert parse_triples("").diagnostics["empty"]


def test_format_triples_round_trips():
    triples = (Triple("糖尿病", "药物治疗", "二甲双胍"), Triple("痛风", "实验室检查", "血尿酸"))
    assert parse_triples(format_triples(triples)).value == tuple(sorted(triples))  # value is sorted
    assert format_triples(()) == "无" and parse_triples(format_triples(())).value == ()


# ---- term lists ------------------------------------------------------------------------------

def test_term_list_separators_prefix_and_unknown_terms():
    known = {match_key(t) for t in ("2型糖尿病", "糖尿病肾病")}
    prediction = parse_term_list("标准词：２型糖尿病＃＃糖尿病肾病。\n- 高血压", known)
    assert prediction.value == ("２型糖尿病", "糖尿病肾病", "高血压")
    assert prediction.diagnostics["unknown_terms"] == 1  # ２型糖尿病 matches 2型糖尿病 by key
    assert parse_term_list("腰椎间盘突出，伴神经根压迫").value == ("腰椎间盘突出，伴神经根压迫",)  # comma stays
    assert parse_term_list("无").diagnostics["none_answer"] and not parse_term_list("无").failed
    assert parse_term_list("").failed
    assert parse_term_list(format_term_list(["高血压", "心绞痛"])).value == ("高血压", "心绞痛")


# ---- CMeEE nested XML ------------------------------------------------------------------------

TEXT = "患者腹部疼痛三天，诊断为急性阑尾炎。"
GOLD = (Span(2, 4, "bod"), Span(2, 6, "sym"), Span(12, 17, "dis"))


def _cmeee(text: str) -> Example:
    return Example(id="x", inputs={"text": text}, gold=())


def test_cmeee_nested_tags_give_inner_and_outer_spans():
    answer = "<response>患者<sym><bod>腹部</bod>疼痛</sym>三天，诊断为<dis>急性阑尾炎</dis>。</response>"
    prediction = parse(answer, _cmeee(TEXT))
    assert prediction.value == GOLD and not prediction.failed
    assert tagged_text(TEXT, GOLD) == answer[len("<response>"):-len("</response>")]


def test_cmeee_alignment_survives_width_and_spacing_changes():
    # the model turned "，" into ", ", "。" into "." and added spaces; spans still land on the source
    answer = "<response>患者 <sym><bod>腹部</bod>疼痛</sym> 三天, 诊断为 <dis>急性阑尾炎</dis>.</response>"
    prediction = parse(answer, _cmeee(TEXT))
    assert prediction.value == GOLD
    assert prediction.diagnostics["text_altered"] is True
    full_width = "<response>患者<sym><bod>腹部</bod>疼痛</sym>三天，诊断为<dis>急性阑尾炎</dis>。</response>"
    source = "患者腹部疼痛三天,诊断为急性阑尾炎."  # source with half-width punctuation, answer full-width
    assert parse(full_width, _cmeee(source)).value == GOLD


def test_cmeee_unknown_tags_and_refusals_are_counted():
    prediction = parse("<response>患者<symptom>腹部疼痛</symptom>三天，诊断为<dis>急性阑尾炎</dis>。</response>", _cmeee(TEXT))
    assert prediction.value == (Span(12, 17, "dis"),) and prediction.diagnostics["unknown_tags"] == 1
    refusal = parse("抱歉，我不能提供医疗建议。", _cmeee(TEXT))
    assert refusal.failed and refusal.value == ()


def test_tagged_text_leaves_out_crossing_spans():
    text = "腹部疼痛"
    crossing = (Span(0, 3, "sym"), Span(2, 4, "bod"))
    assert tagged_text(text, crossing) == "<sym>腹部疼</sym>痛"
    assert set(TAG_MAP) == {"dis", "sym", "pro", "equ", "dru", "ite", "bod", "dep", "mic"}


def test_parsers_never_raise_on_junk():
    import random

    from evalpipe.tasks.cblue.promptcblue import FAMILIES, parse_answer

    rng = random.Random(0)
    alphabet = "是否的。，,：:|｜#＃\n 　<>/think实体头尾为关系主体词无abc123“”（）()[]{}\"'\\"
    junk = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(80)]
    junk += [None, "", "\x00", "[" * 500, "<think>" * 50, "##" * 100, "|" * 100]
    for text in junk:
        for p in (parse_label(text, STS), parse_triples(text, ["药物治疗"]), parse_term_list(text, {"高血压"}),
                  parse(text, _cmeee(TEXT))):
            assert isinstance(p.failed, bool)
        for dataset, family in FAMILIES.items():
            assert isinstance(parse_answer(text, family, dataset, ["是的", "不是"]).failed, bool)


def test_label_after_prefix_with_colon_and_in_markdown_emphasis():
    from evalpipe.parsers.zh_labels import LabelSet, parse_label

    yes_no = LabelSet.of(["0", "1"], {"是": "1", "否": "0"})
    assert parse_label("答案是：是", yes_no).value == "1"
    assert parse_label("**是**", yes_no).value == "1"
    assert parse_label("答案为：完全一致", LabelSet.of(["完全一致", "部分一致"])).value == "完全一致"
    assert parse_label("不是", yes_no).failed  # contains 是 but is not the label: never guessed
