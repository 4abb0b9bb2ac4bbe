"""evalpipe.text.chinese and evalpipe.metrics.chinese_text against hand computations."""

from __future__ import annotations

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from evalpipe.metrics.chinese_text import bleu4, rouge_l, text_score_sheet
from evalpipe.text.chinese import CharTokenizer, fold, label_key, match_key, rouge_tokens


def test_fold_maps_full_width_forms_and_keeps_chinese_punctuation():
    assert fold("ＣＲＰ：１２，（阴性）") == "CRP:12,(阴性)"
    assert fold("是。、“否”") == "是。、“否”"  # no half-width twin: unchanged


def test_match_key_ignores_width_case_and_spaces():
    assert match_key(" 2型 糖尿病 ") == match_key("２型糖尿病") == "2型糖尿病"
    assert match_key("HbA1c") == match_key("ｈｂａ１ｃ")


def test_label_key_strips_trailing_punctuation_and_wrapping_quotes_only():
    assert label_key("是的。") == label_key("“是的”！") == label_key(" 是 的 ") == "是的"
    assert label_key("症状(患者感受）") == label_key("症状（患者感受)") == "症状(患者感受)"  # inner brackets kept
    assert label_key("（２）") == "2"


def test_rouge_tokens_split_han_characters_and_keep_words_whole():
    assert rouge_tokens("患者ＣＲＰ升高，5mg/天") == ["患", "者", "crp", "升", "高", "5mg", "天"]
    assert rouge_tokens("") == [] and rouge_tokens("，。！") == []


def test_rouge_l_chinese_pair_matches_hand_computation():
    # hyp 患者腹痛发热 vs ref 患者腹部疼痛: LCS = 患者腹痛 = 4 of 6 tokens each side
    # P = R = 4/6 → F = 2/3
    assert rouge_l("患者腹痛发热", "患者腹部疼痛") == pytest.approx(2 / 3)
    # different lengths: hyp 5 tokens 腹痛三天了, ref 3 tokens 腹痛伴 → LCS 腹痛 = 2
    # P = 2/5, R = 2/3 → F = 2PR/(P+R) = (8/15)/(16/15) = 0.5
    assert rouge_l("腹痛三天了", "腹痛伴") == pytest.approx(0.5)
    # punctuation and width do not count: "血压，１５０" ≡ "血压150"
    assert rouge_l("血压，１５０", "血压150") == 1.0


def test_rouge_score_default_tokenizer_silently_drops_chinese():
    default = rouge_scorer.RougeScorer(["rougeL"])
    # identical Chinese texts: the default tokenizer keeps only [a-z0-9], so there is nothing to match
    assert default.score("患者腹部疼痛", "患者腹部疼痛")["rougeL"].fmeasure == 0.0
    ours = rouge_scorer.RougeScorer(["rougeL"], tokenizer=CharTokenizer())
    assert ours.score("患者腹部疼痛", "患者腹部疼痛")["rougeL"].fmeasure == 1.0


def test_empty_answer_scores_zero_rouge():
    assert rouge_l("", "患者腹痛") == 0.0


def test_bleu4_equals_sacrebleu_and_hand_computation():
    hyps = ["我爱北京天安门"]
    refs = ["我爱北京故宫"]
    # zh tokens: hyp 7 characters, ref 6. Matches: 1-gram 4/7, 2-gram 3/6, 3-gram 2/5, 4-gram 1/4;
    # BP = 1 (hyp longer); BLEU = (4/7 · 1/2 · 2/5 · 1/4) ** (1/4) = (1/35) ** 0.25
    assert bleu4(hyps, refs) == pytest.approx((1 / 35) ** 0.25)
    corpus_h = ["我爱北京天安门", "今天天气很好", "多喝水注意休息"]
    corpus_r = ["我爱北京故宫", "今天天气不错", "注意休息多喝水"]
    expected = sacrebleu.corpus_bleu(corpus_h, [corpus_r], tokenize="zh").score / 100
    assert bleu4(corpus_h, corpus_r) == pytest.approx(expected)
    assert 0.0 < expected < 1.0


def test_text_score_sheet_is_corpus_bleu_and_mean_rouge():
    sheet = text_score_sheet(["患者腹痛发热", ""], ["患者腹部疼痛", "多喝水"])
    assert sheet.corpus["rouge_l"] == pytest.approx((2 / 3 + 0.0) / 2)
    assert [s["rouge_l"] for s in sheet.per_sample] == pytest.approx([2 / 3, 0.0])
    assert sheet.corpus["bleu4"] == pytest.approx(bleu4(["患者腹痛发热", ""], ["患者腹部疼痛", "多喝水"]))
    with pytest.raises(ValueError):
        text_score_sheet([], [])
