"""Tests for evalpipe.parsers.xml_tags: one test per documented rule, plus scale and fuzz."""

from __future__ import annotations

import random

import pytest

from evalpipe.parsers.xml_tags import (
    MAX_SOURCE_KEYS,
    WHITESPACE,
    TaggedParse,
    char_spans_to_token_spans,
    parse_tagged_answer,
    to_prediction,
    token_offsets,
)
from evalpipe.records import Prediction, Span
from tests.parsers.scaling import assert_linear

SRC = "Clustering of missense mutations in the ataxia - telangiectasia gene in a sporadic T - cell leukaemia ."
TAGGED = (
    "Clustering of missense mutations in the <disease>ataxia - telangiectasia</disease> gene in a "
    "sporadic <disease>T - cell leukaemia</disease> ."
)
AT = Span(40, 63, "Disease")  # "ataxia - telangiectasia"
TCL = Span(83, 101, "Disease")  # "T - cell leukaemia"
TAGS = {"disease": "Disease"}
CMEEE = {"dis": "dis", "sym": "sym", "bod": "bod", "dru": "dru", "ite": "ite",
         "pro": "pro", "mic": "mic", "equ": "equ", "dep": "dep"}
KEYS = {"empty", "wrapper_missing", "tags_unbalanced", "unknown_tags", "text_altered",
        "unaligned_entities", "code_fence"}


def parse(answer, source=SRC, tag_map=TAGS, **kw) -> TaggedParse:
    return parse_tagged_answer(answer, source, tag_map, **kw)


def texts(p: TaggedParse, source=SRC):
    return [source[s.start:s.end] for s in p.spans]


def test_fixture_offsets():
    assert SRC[AT.start:AT.end] == "ataxia - telangiectasia"
    assert SRC[TCL.start:TCL.end] == "T - cell leukaemia"


def test_clean_answer():
    p = parse(f"<response>{TAGGED}</response>")
    assert p.spans == (AT, TCL) and not p.failed
    assert p.diagnostics == {
        "empty": False, "wrapper_missing": False, "code_fence": False, "tags_unbalanced": 0,
        "unknown_tags": 0, "unaligned_entities": 0, "text_altered": False,
        "unknown_tag_names": (), "source_coverage": 1.0, "answer_coverage": 1.0, "fullwidth_tags": 0,
        "source_truncated": False,
    }


# 1. wrapper
def test_chatter_outside_wrapper_ignored():
    p = parse(f"Sure! Tags: <disease>x</disease>\n<response>{TAGGED}</response>\nHope <disease>this</disease> helps.")
    assert p.spans == (AT, TCL)
    assert not p.diagnostics["wrapper_missing"] and not p.diagnostics["text_altered"]


def test_missing_wrapper_uses_whole_answer():
    p = parse(TAGGED)
    assert p.spans == (AT, TCL) and not p.failed
    assert p.diagnostics["wrapper_missing"] is True
    assert p.diagnostics["text_altered"] is False


def test_unclosed_wrapper_truncated_answer():
    p = parse("<response>Clustering of missense mutations in the <disease>ataxia - telangiectasia</disease> gene in")
    assert p.spans == (AT,) and not p.failed
    assert p.diagnostics["wrapper_missing"] is False
    assert p.diagnostics["text_altered"] is True  # truncated copy differs from the source
    assert p.diagnostics["answer_coverage"] == 1.0


def test_wrapper_case_and_attributes():
    assert parse(f'<RESPONSE lang="en">{TAGGED}</Response>').spans == (AT, TCL)


def test_custom_and_no_wrapper():
    assert parse(f"<answer>{TAGGED}</answer>", wrapper="answer").spans == (AT, TCL)
    p = parse(TAGGED, wrapper="")
    assert p.spans == (AT, TCL) and p.diagnostics["wrapper_missing"] is False


# 2. code fences
@pytest.mark.parametrize("fence", ["```xml\n", "```\n", "```"])
def test_code_fences_removed(fence):
    p = parse(f"{fence}<response>{TAGGED}</response>\n```")
    assert p.spans == (AT, TCL) and p.diagnostics["code_fence"] is True
    assert p.diagnostics["text_altered"] is False


def test_fenced_block_without_wrapper_drops_chatter():
    p = parse(f"Here you go:\n```xml\n{TAGGED}\n```\nAnything else?")
    assert p.spans == (AT, TCL)
    assert p.diagnostics["code_fence"] and p.diagnostics["wrapper_missing"]
    assert p.diagnostics["text_altered"] is False


# 3. tag spelling
@pytest.mark.parametrize("open_, close", [
    ("<Disease>", "</Disease>"), ("<DISEASE>", "</disease>"), ("< disease >", "</ disease >"),
    ('<disease type="x">', "</disease >"), ("<disease\ttype='y'>", "< /DISEASE>"),
])
def test_tag_case_blanks_attributes(open_, close):
    p = parse(f"<response>{TAGGED.replace('<disease>', open_).replace('</disease>', close)}</response>")
    assert p.spans == (AT, TCL)
    assert p.diagnostics["tags_unbalanced"] == 0 and p.diagnostics["unknown_tags"] == 0


def test_blank_after_lt_is_text_for_unknown_names():
    src = "x < y and z > w"
    p = parse("<response>x < y and z > w</response>", source=src)
    assert p.diagnostics["text_altered"] is False and p.diagnostics["unknown_tags"] == 0


# 4. broken tags
def test_near_miss_closing_tag_closes_entity():
    p = parse(f"<response>{TAGGED.replace('</disease> gene', '</diseases> gene')}</response>")
    assert p.spans == (AT, TCL)
    assert p.diagnostics["tags_unbalanced"] == 1 and p.diagnostics["unknown_tags"] == 0


def test_unclosed_tag_is_dropped():
    answer = TAGGED.replace("telangiectasia</disease>", "telangiectasia")
    p = parse(f"<response>{answer}</response>")
    assert p.spans == (TCL,) and p.diagnostics["tags_unbalanced"] == 1 and not p.failed


def test_unclosed_tag_at_end_is_dropped():
    p = parse(f"<response>{TAGGED.replace('leukaemia</disease>', 'leukaemia')}</response>")
    assert p.spans == (AT,) and p.diagnostics["tags_unbalanced"] == 1


def test_stray_closing_tag_is_ignored():
    p = parse(f"<response>Clustering</disease> of{TAGGED[13:]}</response>")
    assert p.spans == (AT, TCL) and p.diagnostics["tags_unbalanced"] == 1


def test_wrong_known_closing_tag_is_not_a_near_miss():
    p = parse("<response>a <disease>b</chemical> c</response>", source="a b c",
              tag_map={"disease": "Disease", "chemical": "Chemical"})
    assert p.spans == () and p.diagnostics["tags_unbalanced"] == 2 and not p.failed


def test_crossed_tags_drop_the_inner_one():
    p = parse("<response><sym>腹<bod>部</sym>疼</bod>痛</response>", source="腹部疼痛", tag_map=CMEEE)
    assert p.spans == (Span(0, 2, "sym"),)
    assert p.diagnostics["tags_unbalanced"] == 2  # <bod> left open inside <sym>, stray </bod>


def test_empty_and_self_closing_entities_yield_nothing():
    p = parse("<response>Clustering <disease></disease>of<disease/> missense</response>",
              source="Clustering of missense")
    assert p.spans == () and p.diagnostics["tags_unbalanced"] == 0 and not p.failed


# 5. adjacent entities
@pytest.mark.parametrize("between", [" ", ""])
def test_adjacent_same_type_entities_stay_separate(between):
    src = "breast cancer ovarian cancer"
    p = parse(f"<response><disease>breast cancer</disease>{between}<disease>ovarian cancer</disease></response>",
              source=src)
    assert texts(p, src) == ["breast cancer", "ovarian cancer"]
    assert p.spans == (Span(0, 13, "Disease"), Span(14, 28, "Disease"))


# 6. spacing
def test_answer_removes_spaces():
    p = parse("<response>Clustering of missense mutations in the <disease>ataxia-telangiectasia</disease> "
              "gene in a sporadic <disease>T-cell leukaemia</disease>.</response>")
    assert p.spans == (AT, TCL)
    assert p.diagnostics["text_altered"] is False  # whitespace only


def test_answer_adds_spaces():
    src = "the T-cell leukaemia."
    p = parse("<response>the <disease>T - cell  leukaemia</disease> .</response>", source=src)
    assert texts(p, src) == ["T-cell leukaemia"] and p.spans == (Span(4, 20, "Disease"),)


def test_entity_boundary_spaces_are_not_included():
    p = parse(f"<response>{TAGGED.replace('<disease>T', '<disease> T').replace('leukaemia</disease>', 'leukaemia </disease>')}</response>")
    assert p.spans == (AT, TCL)


# 7. repeated entity text
def test_repeated_text_picks_occurrence_by_position():
    src = "cancer risk and family history of cancer ."
    p = parse("<response>cancer risk and family history of <disease>cancer</disease> .</response>", source=src)
    assert p.spans == (Span(34, 40, "Disease"),)


def test_repeated_text_position_survives_rewording():
    src = "cancer risk and family history of cancer ."
    p = parse("<response>Cancer risk and a familial history of <disease>cancer</disease>.</response>", source=src)
    assert p.spans == (Span(34, 40, "Disease"),) and p.diagnostics["text_altered"] is True


# 8. unknown tags
def test_unknown_tags_keep_their_text():
    answer = TAGGED.replace("ataxia - telangiectasia</disease> gene", "ataxia - telangiectasia</disease> <gene>gene</gene>")
    p = parse(f"<response><b>Clustering</b> of{answer[13:]}<br/></response>")
    assert p.spans == (AT, TCL)
    assert p.diagnostics["unknown_tags"] == 3
    assert p.diagnostics["unknown_tag_names"] == ("b", "br", "gene")
    assert p.diagnostics["text_altered"] is False and p.diagnostics["tags_unbalanced"] == 0


def test_unknown_tag_inside_entity():
    p = parse(f"<response>{TAGGED.replace('T - cell', '<i>T - cell</i>')}</response>")
    assert p.spans == (AT, TCL) and p.diagnostics["unknown_tags"] == 1


# 9. rewritten text
def test_rewritten_text_keeps_alignable_entities():
    answer = ("<response>Clusters of missense mutations were found in the <disease>ataxia telangiectasia</disease> "
              "gene of a <disease>sporadic T-cell leukemia</disease> and in <disease>gout</disease>.</response>")
    p = parse(answer)
    assert not p.failed
    assert texts(p) == ["ataxia - telangiectasia", "sporadic T - cell leukaemia"]
    assert p.diagnostics["text_altered"] is True
    assert p.diagnostics["unaligned_entities"] == 1  # "gout" is not in the source


def test_spelling_correction_covers_the_whole_source_word():
    src = "a malignant tumor of the colon"
    p = parse("<response>a <disease>malignant tumour</disease> of the colon</response>", source=src)
    assert texts(p, src) == ["malignant tumor"]


def test_refusal_is_a_failure():
    p = parse("I'm sorry, but I cannot help with that request.")
    assert p.failed and p.spans == ()
    assert p.diagnostics["empty"] is False and p.diagnostics["source_coverage"] < 0.5


def test_refusal_with_tags_is_a_failure():
    p = parse("<response>I cannot identify any <disease>disease</disease> here.</response>")
    assert p.failed and p.spans == ()


def test_untagged_copy_is_a_valid_empty_prediction():
    p = parse(f"<response>{SRC}</response>")
    assert not p.failed and p.spans == ()


def test_bare_entity_list_is_valid():
    p = parse("<disease>T - cell leukaemia</disease>")
    assert not p.failed and p.spans == (TCL,)


# 10. empty
@pytest.mark.parametrize("answer", [None, "", "   \n\t", "<response></response>",
                                    "<response> <disease> </disease> </response>", "<think>hmm</think>  "])
def test_empty_answers_fail(answer):
    p = parse(answer)
    assert p.failed and p.spans == () and p.diagnostics["empty"] is True
    assert KEYS <= set(p.diagnostics)


# 8. failure: the answer's own coverage counts only when it tags something
@pytest.mark.parametrize("answer", ["gene", "<response>leukaemia</response>", "Clustering of missense",
                                    "<response><b>ataxia</b></response>", "```\nsporadic\n```"])
def test_untagged_answer_that_merely_occurs_in_the_source_fails(answer):
    p = parse(answer)
    assert p.diagnostics["answer_coverage"] == 1.0  # every character of it is in the source …
    assert p.diagnostics["source_coverage"] < 0.5  # … but it is no copy of the source
    assert p.failed and p.spans == ()


def test_tagged_single_word_is_a_valid_bare_list():
    p = parse("<disease>leukaemia</disease>")
    assert not p.failed and texts(p) == ["leukaemia"]


def test_untagged_copy_must_cover_half_the_source():
    words = SRC.split(" ")
    most, little = " ".join(words[: len(words) * 2 // 3]), " ".join(words[: len(words) // 3])
    assert not parse(f"<response>{most}</response>").failed
    assert parse(f"<response>{little}</response>").failed
    # tagged, the same short copy is a truncated answer: its entity is a prediction
    tagged = parse(f"<response>{little.replace('missense', '<disease>missense</disease>')}")
    assert not tagged.failed and texts(tagged) == ["missense"]


def test_whitespace_only_entity_does_not_make_an_answer_tagged():
    assert parse("gene <disease> </disease>").failed


# 9. bounds (no absolute times: each input against one four times larger)
def test_megabyte_repeated_answer():
    answer = "<response>" + (TAGGED + " ") * (1_000_000 // len(TAGGED)) + "</response>"
    p = parse(answer)
    assert p.spans == (AT, TCL) and not p.failed
    assert p.diagnostics["unaligned_entities"] > 1000  # copies past the aligned window

    def repeated(n: int) -> str:
        return "<response>" + (TAGGED + " ") * n + "</response>"

    assert_linear(parse, repeated(1_000), repeated(4_000))


def test_megabyte_of_junk_tags():
    rnd = random.Random(7)
    parts = ["<disease>", "</disease>", "<b>", "</x>", "<", ">", "&amp;", "leukaemia ", "<gene", "</diseases>"]
    answer = "".join(rnd.choice(parts) for _ in range(150_000))
    p = parse(answer)
    assert all(0 <= s.start < s.end <= len(SRC) for s in p.spans)
    assert_linear(parse, answer[:100_000], answer[:400_000])


PATHOLOGICAL = {  # unit of a hostile answer: repeated n times
    "lt": "<", "lt-a": "<a", "lt-blank": "< ", "fences": "```", "entity-refs": "&#%d;", "amp": "&a",
    "open-disease": "<disease>x ", "nested-disease": "<disease>", "nested-response": "<response>",
    "crossed": "<disease><b></disease></b>", "near-miss": "<disease>x</diseasex%d>", "blank": "  \n",
    "think": "<think>", "fullwidth": "＜disease＞", "closing": "</disease>", "junk-close": "<disease>x</q%dq>",
}


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_answers_cost_grows_linearly(name):
    unit = PATHOLOGICAL[name]

    def answer(n: int) -> str:
        body = "".join(unit % i if "%d" in unit else unit for i in range(n))
        return body + "leukaemia" + "</disease>" * n if name == "nested-disease" else body

    p = parse(answer(1000))
    assert isinstance(p.failed, bool) and all(0 <= s.start < s.end <= len(SRC) for s in p.spans)
    assert_linear(parse, answer(5_000), answer(20_000))


def test_nested_entities_are_mapped_in_constant_time_each():
    """n nested tags around a text of n words: each entity maps in O(1), not O(its length)."""
    def case(n: int) -> tuple[str, str]:
        text = " ".join(f"w{i}" for i in range(n))
        return "<response>" + "<disease>" * n + text + "</disease>" * n + "</response>", text

    answer, text = case(2_000)
    p = parse(answer, source=text)
    assert p.spans == (Span(0, len(text), "Disease"),) and not p.failed
    assert_linear(lambda c: parse(c[0], source=c[1]), case(1_500), case(6_000))


def test_large_source_uses_search_fallback():
    src = " ".join(f"word{i}" for i in range(3000))  # ~26k chars
    answer = src.replace("word1500 word1501", "<disease>word1500  word1501</disease>").replace("word7 ", "")
    p = parse(answer, source=src)
    assert texts(p, src) == ["word1500 word1501"] and not p.failed


def test_search_fallback_with_thousands_of_absent_entities_grows_linearly():
    """Entities the source does not hold are ruled out without scanning the source each time."""
    def case(n: int) -> tuple[str, str]:
        src = " ".join(f"word{i}" for i in range(n))
        junk = "".join(f"<disease>zz{i}</disease> " for i in range(n // 2))
        return src.replace(f"word{n // 2} ", junk + f"<disease>word{n // 2}</disease> "), src

    answer, src = case(3_000)
    p = parse(answer, source=src)
    assert texts(p, src) == ["word1500"] and p.diagnostics["unaligned_entities"] == 1_500
    assert_linear(lambda c: parse(c[0], source=c[1]), case(3_000), case(12_000))


def test_nested_entities_in_the_search_fallback_are_placed_by_the_outer_one():
    src = " ".join(f"word{i}" for i in range(3000))
    answer = src.replace("word10 word11 word12", "<sym>word10 <disease>word11</disease> word12</sym>")
    p = parse(answer, source=src, tag_map={"disease": "Disease", "sym": "sym"})
    assert texts(p, src) == ["word10 word11 word12", "word11"]


def _truncated_source(extra_words: int) -> str:
    return SRC + " " + " ".join(f"filler{i % 97}" for i in range(extra_words)) + " lastword"


def test_absurd_source_is_aligned_on_its_first_part_only():
    """Past MAX_SOURCE_KEYS key characters the source is not aligned: an entity there is counted
    as unaligned, and the parse says the source was truncated."""
    src = _truncated_source(30_000)  # ~250,000 characters
    assert len("".join(src.split())) > MAX_SOURCE_KEYS
    p = parse(f"<response>{TAGGED} <disease>lastword</disease></response>", source=src)
    assert p.spans == (AT, TCL) and not p.failed
    assert p.diagnostics["source_truncated"] is True and p.diagnostics["unaligned_entities"] == 1
    short = parse(f"<response>{TAGGED}</response>")
    assert short.diagnostics["source_truncated"] is False


def test_absurd_source_costs_bounded_time_and_memory():
    """Beyond the aligned part, a longer source adds only C-speed scans: four times the source
    costs well under four times the time, and peak memory does not grow with it."""
    import tracemalloc

    answer = f"<response>{TAGGED}</response>"
    medium, huge = _truncated_source(50_000), _truncated_source(200_000)  # ~0.4 MB, ~1.7 MB

    def peak(source: str) -> int:
        tracemalloc.start()
        try:
            parse(answer, source=source)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak(huge) < 1.5 * peak(medium)
    assert_linear(lambda s: parse(answer, source=s), medium, huge)


def test_whitespace_list_is_every_isspace_character():
    import sys

    assert set(WHITESPACE) == {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}


# 12. nesting and normalisation
def test_nested_tags():
    p = parse("<response><sym><bod>腹部</bod>疼痛</sym></response>", source="腹部疼痛", tag_map=CMEEE)
    assert p.spans == (Span(0, 2, "bod"), Span(0, 4, "sym"))
    assert not p.failed and p.diagnostics["tags_unbalanced"] == 0


def test_full_width_punctuation_aligns():
    src = "患者腹痛,伴发热(38℃)。"
    p = parse("<response>患者<sym>腹痛</sym>，伴<sym>发热（38℃）</sym>。</response>", source=src, tag_map=CMEEE)
    assert texts(p, src) == ["腹痛", "发热(38℃)"]
    assert p.diagnostics["text_altered"] is True and not p.failed


def test_chinese_repeated_entity_by_position():
    src = "头痛，无头痛史"
    p = parse("<response>头痛，无<sym>头痛</sym>史</response>", source=src, tag_map=CMEEE)
    assert p.spans == (Span(4, 6, "sym"),)


# 13. HTML entities
def test_html_entities_unescaped_when_source_has_raw_char():
    src = "AT & T < 5 mg"
    p = parse("<response><disease>AT &amp; T</disease> &lt; 5 mg</response>", source=src)
    assert p.spans == (Span(0, 6, "Disease"),) and p.diagnostics["text_altered"] is False


def test_html_entities_kept_when_source_has_them_literally():
    src = "R&amp;D unit"
    p = parse("<response><disease>R&amp;D</disease> unit</response>", source=src)
    assert p.spans == (Span(0, 7, "Disease"),) and p.diagnostics["text_altered"] is False


# 14. reasoning
def test_think_block_stripped():
    p = parse(f"<think>I should tag <disease>Clustering</disease>.\n<response>x</response></think>\n<response>{TAGGED}</response>")
    assert p.spans == (AT, TCL) and not p.diagnostics["wrapper_missing"]


def test_think_without_opening_tag():
    assert parse(f"reasoning about <disease>gene</disease></think><response>{TAGGED}</response>").spans == (AT, TCL)


def test_unclosed_think_before_wrapper():
    assert parse(f"<think>hmm <disease>gene</disease><response>{TAGGED}</response>").spans == (AT, TCL)


# token mapping
def test_token_offsets():
    assert token_offsets(["ab", "c", "def"]) == [(0, 2), (3, 4), (5, 8)]
    assert token_offsets(["ab", "c"], sep="") == [(0, 2), (2, 3)]
    assert token_offsets([]) == []


def test_char_spans_to_token_spans():
    tokens = SRC.split(" ")
    p = parse(f"<response>{TAGGED}</response>")
    spans, cut = char_spans_to_token_spans(p.spans, token_offsets(tokens))
    assert cut == 0
    assert [tokens[s.start:s.end] for s in spans] == [["ataxia", "-", "telangiectasia"], ["T", "-", "cell", "leukaemia"]]


def test_char_spans_cutting_tokens_are_widened_and_counted():
    offs = token_offsets(["ataxia-telangiectasia", "gene", "x"])  # (0,21) (22,26) (27,28)
    spans = [Span(0, 6, "D"), Span(7, 26, "D"), Span(0, 21, "D"), Span(0, 21, "D"), Span(21, 22, "D")]
    out, cut = char_spans_to_token_spans(spans, offs)
    assert out == (Span(0, 1, "D"), Span(0, 2, "D"))  # whitespace-only span dropped, duplicates merged
    assert cut == 2


def test_to_prediction():
    p = parse(f"<response>{TAGGED}</response>")
    pred = to_prediction(p)
    assert isinstance(pred, Prediction) and pred.value == (AT, TCL) and not pred.failed
    assert pred.diagnostics == p.diagnostics
    assert to_prediction(parse(None)).failed


# robustness
FRAGMENTS = ["<disease>", "</disease>", "<Disease>", "</DISEASE >", "< disease >", "<disease/>",
             "</diseases>", "<gene>", "</gene>", "<b>", "</b>", "<sym>", "</bod>", "<bod>", "<", ">", "/",
             "&amp;", "&lt;", "&#x41;", "&bogus;", "```", "```xml\n", "<response>", "</response>",
             "<think>", "</think>", " ", "\n", "\t", "，", "（", "腹部", "疼痛", "T - cell", "leukaemia",
             "ataxia", "-", ".", "Clustering", "x", "\u200b", "ﬁ", "İ", "ß", "\x00", "\ud800"]


@pytest.mark.parametrize("seed", range(4))
def test_fuzz_never_raises(seed):
    rnd = random.Random(seed)
    tag_map = {"disease": "Disease", "sym": "sym", "bod": "bod"}
    sources = [SRC, "腹部疼痛，发热", "", " ", "x", "ﬁne İstanbul straße"]
    spans_seen: list[int] = []
    for _ in range(100):
        answer = "".join(rnd.choice(FRAGMENTS) for _ in range(rnd.randint(0, 40)))
        source = rnd.choice(sources)
        roll = rnd.random()
        if roll < 0.2:
            answer = "".join(chr(rnd.randint(0, 0x2FFF)) for _ in range(rnd.randint(0, 60)))
        elif roll < 0.6:  # a damaged copy of a good answer: exercises alignment and span mapping
            source = rnd.choice([SRC, "腹部疼痛，发热"])
            answer = TAGGED if source == SRC else "<sym><bod>腹部</bod>疼痛</sym>，<sym>发热</sym>"
            for _ in range(rnd.randint(0, 6)):
                at = rnd.randint(0, len(answer))
                cut = rnd.randint(0, 4) if rnd.random() < 0.5 else 0
                answer = answer[:at] + rnd.choice(FRAGMENTS) + answer[at + cut:]
            spans_seen.append(len(parse_tagged_answer(answer, source, tag_map).spans))
        p = parse_tagged_answer(answer, source, tag_map, wrapper=rnd.choice(["response", "", "ans"]))
        assert KEYS <= set(p.diagnostics)
        assert isinstance(p.failed, bool)
        assert not (p.failed and p.spans)
        assert list(p.spans) == sorted(set(p.spans))
        for s in p.spans:
            assert 0 <= s.start < s.end <= len(source) and s.label in tag_map.values()
            assert source[s.start:s.end].strip() == source[s.start:s.end]
        offs = token_offsets(source.split(" "))
        tok, cut = char_spans_to_token_spans(p.spans, offs)
        assert 0 <= cut <= len(p.spans)
        assert all(0 <= t.start < t.end <= len(offs) for t in tok)
    assert sum(spans_seen) > 20  # the damaged copies really reach span mapping


def test_fullwidth_tag_brackets_are_read_as_tags_but_fullwidth_text_is_not():
    source = "急性阑尾炎，血压＜90"
    parsed = parse_tagged_answer("＜response＞＜dis＞急性阑尾炎＜／dis＞，血压＜90＜/response＞", source, {"dis": "dis"})
    assert [(s.start, s.end, s.label) for s in parsed.spans] == [(0, 5, "dis")]
    assert parsed.diagnostics["fullwidth_tags"] == 4
    assert parsed.diagnostics["text_altered"] is False  # the literal ＜ in 血压＜90 stayed text
