"""Fuzz every parser in evalpipe/parsers and the compatibility parsers with hostile answers.

Properties: nothing raises; every parser returns a :class:`Prediction` with a bool ``failed``
and a mapping of diagnostics, whose value converts to JSON; a failed parse says so instead of
pretending (xml_tags: no spans when failed); spans stay inside the source; the evalscope compat
parser agrees with the literal transcription of its rules; and cost grows linearly with an
answer made of one drawn fragment repeated.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from evalpipe.compat import clue, promptcblue
from evalpipe.compat.evalscope_ner import NCBI_TAG_MAP, evalscope_predicted_tags
from evalpipe.parsers.choice import parse_choice
from evalpipe.parsers.icd10 import find_codes, parse_icd10_codes
from evalpipe.parsers.letter import parse_letter
from evalpipe.parsers.nli_label import parse_nli_label
from evalpipe.parsers.term_list import parse_term_list
from evalpipe.parsers.triples import parse_triples
from evalpipe.parsers.xml_tags import char_spans_to_token_spans, parse_tagged_answer, to_prediction, token_offsets
from evalpipe.parsers.zh_labels import LabelSet, parse_label
from evalpipe.records import Prediction, to_jsonable
from tests.compat import slow_evalscope
from tests.fuzz.strategies import FRAGMENTS, answers, fuzz_settings
from tests.parsers.scaling import assert_linear

SOURCES = ["Clustering of missense mutations in the ataxia - telangiectasia gene in a sporadic T - cell leukaemia .",
           "患者腹部疼痛三天，诊断为急性阑尾炎。", "", " ", "x", "colon cancer colon cancer", "a\udcffb \u202e"]
TAG_MAP = {"disease": "Disease", "dis": "dis", "sym": "sym", "bod": "bod"}

PARSERS = {
    "choice": lambda a: parse_choice(a, {"A": "colon cancer", "B": "hypertension", "C": "pulmonary hypertension"}),
    "icd10": parse_icd10_codes,
    "nli_label": parse_nli_label,
    "letter": lambda a: parse_letter(a, {"A": "colon cancer", "B": "hypertension", "C": "asthma", "D": "gout"}),
    "term_list": lambda a: parse_term_list(a, known_keys={"头痛", "colon cancer"}),
    "term_list_unchecked": parse_term_list,
    "triples": lambda a: parse_triples(a, predicates=["治疗", "病因"]),
    "zh_labels": lambda a: parse_label(a, LabelSet.of(["是", "否"], {"不是": "否"})),
    "xml_tags": lambda a: to_prediction(parse_tagged_answer(a, SOURCES[0], TAG_MAP)),
    "xml_tags_zh": lambda a: to_prediction(parse_tagged_answer(a, SOURCES[1], TAG_MAP, wrapper="")),
}


def _check_prediction(prediction: object) -> None:
    assert isinstance(prediction, Prediction)
    assert isinstance(prediction.failed, bool)
    assert isinstance(prediction.diagnostics, Mapping)
    json.dumps(to_jsonable(prediction.value), ensure_ascii=False)
    json.dumps(to_jsonable(dict(prediction.diagnostics)), ensure_ascii=False)


@fuzz_settings(60)
@given(answer=answers, parser=st.sampled_from(sorted(PARSERS)))
def test_every_parser_returns_a_prediction(answer, parser):
    _check_prediction(PARSERS[parser](answer))


@fuzz_settings(60)
@given(answer=answers)
def test_all_parsers_on_the_same_answer(answer):
    for parser in PARSERS.values():
        _check_prediction(parser(answer))
    assert all(code == code.upper() and "." not in code for code in find_codes(answer))


@fuzz_settings(80)
@given(answer=answers, source=st.one_of(st.sampled_from(SOURCES), st.text(max_size=80)),
       wrapper=st.sampled_from(["response", "", "ans"]))
def test_tagged_parse_invariants(answer, source, wrapper):
    parsed = parse_tagged_answer(answer, source, TAG_MAP, wrapper=wrapper)
    assert isinstance(parsed.failed, bool)
    assert not (parsed.failed and parsed.spans)  # a failed parse predicts nothing, and says so
    assert list(parsed.spans) == sorted(set(parsed.spans))
    for span in parsed.spans:
        assert 0 <= span.start < span.end <= len(source) and span.label in TAG_MAP.values()
    offsets = token_offsets(source.split(" "))
    tokens, cut = char_spans_to_token_spans(parsed.spans, offsets)
    assert 0 <= cut <= len(parsed.spans) and all(0 <= t.start < t.end <= len(offsets) for t in tokens)
    diagnostics = parsed.diagnostics
    assert 0.0 <= diagnostics["source_coverage"] <= 1.0 and 0.0 <= diagnostics["answer_coverage"] <= 1.0


@fuzz_settings(80)
@given(answer=answers, sentence=st.one_of(st.sampled_from(SOURCES), st.text(max_size=60)))
def test_evalscope_compat_parser_matches_its_rules(answer, sentence):
    tokens = sentence.split()
    tags = evalscope_predicted_tags(answer, tokens, NCBI_TAG_MAP)
    assert len(tags) == len(tokens) and all(isinstance(t, str) and t for t in tags)
    if len(answer) <= 2_000:  # the literal transcription is quadratic: keep it to short answers
        assert tags == slow_evalscope.predicted_tags(answer, tokens, NCBI_TAG_MAP)


FAMILIES = [("ner", "CMeEE-V2", ["疾病", "症状"]), ("spo", "CMeIE", None), ("cdn", "CHIP-CDN", ["头痛", "x"]),
            ("cdee", "CHIP-CDEE", None), ("attr", "IMCS-V2-SR", ["阳性", "阴性"]), ("attr", "CHIP-MDCFNPC", ["阳性"]),
            ("cls", "CHIP-STS", None), ("cls", "KUAKE-QIC", None), ("report", "IMCS-V2-MRG", None),
            ("gen", "MedDG", None)]


@fuzz_settings(60)
@given(answer=answers)
def test_compat_parsers_never_raise(answer):
    assert isinstance(clue.nli_credited(answer, "entailment"), bool)
    letter = clue.stated_letter(answer)
    assert letter is None or len(letter) == 1
    assert all(isinstance(code, str) and "." not in code for code in clue.icd_codes(answer))
    for family, dataset, choices in FAMILIES:
        structured = promptcblue.structure(family, dataset, answer, choices)
        json.dumps(structured, ensure_ascii=False)


@fuzz_settings(25)
@given(unit=st.one_of(st.sampled_from(FRAGMENTS), st.text(min_size=1, max_size=6)),
       parser=st.sampled_from(sorted(PARSERS) + ["evalscope"]))
def test_cost_grows_linearly_with_a_repeated_fragment(unit, parser):
    if parser == "evalscope":
        def run(answer: str) -> object:
            return evalscope_predicted_tags(answer, SOURCES[0].split(), NCBI_TAG_MAP)
    else:
        run = PARSERS[parser]
    n = max(1, 4_000 // len(unit))
    assert_linear(run, unit * n, unit * (4 * n))
