"""Hypothesis strategies for hostile model answers, and the settings every fuzz test shares.

An answer is drawn from one of: arbitrary Unicode (lone surrogates, control characters, RTL and
zero-width marks included — hypothesis's ``characters()`` draws category Cs too); a soup of
fragments the parsers look for (tags, nested and unbalanced; ``<think>`` blocks; code fences;
labels, separators, ICD-like codes, Chinese punctuation); one fragment repeated thousands of
times; a JSON value (``json.dumps`` of nested lists, objects, strings, numbers); or one of
these wrapped in ``<response>``, ``<think>…</think>`` or a fence.

Settings: few examples per test (the suite must stay fast), no deadline (the machine is shared,
so speed is checked by growth, never by absolute time), no example database on disk, and a
fixed derivation so a failure reproduces; set ``EVALPIPE_FUZZ_EXAMPLES`` for a longer run.
"""

from __future__ import annotations

import json
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("EVALPIPE_FUZZ_EXAMPLES", "0")) or None


def fuzz_settings(max_examples: int) -> settings:
    return settings(
        max_examples=EXAMPLES or max_examples,
        deadline=None,
        database=None,
        derandomize=EXAMPLES is None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


FRAGMENTS = [
    # tags the parsers read, and broken ones
    "<response>", "</response>", "<RESPONSE lang='x'>", "<disease>", "</disease>", "<Disease>", "</DISEASE >",
    "< disease >", "<disease/>", "</diseases>", "<sym>", "</sym>", "<bod>", "</bod>", "<dis>", "</dis>",
    "＜dis＞", "＜／dis＞", "<b>", "</b>", "<gene", "<", ">", "</", "<>", "<疾病>", "</疾病>", "<chem>x</disease>",
    "<think>", "</think>", "< think >", "```", "```json\n", "```xml\n", "\n```\n",
    # entity references, JSON and list syntax
    "&amp;", "&lt;", "&#x41;", "&#55296;", "&bogus;", "[", "]", "{", "}", '"', "'", ",", ":", "[]", "null",
    '["头", "治疗", "尾"]', "|", "｜", "##", "＃＃", "\n", "\r\n", "\t", " ", "  ", "1.", "- ", "•",
    # labels, phrases and codes the parsers look for
    "The answer is", "Answer:", "answer", "(C)", "**B**", "A", "C:", "option", "entailment", "NEUTRAL",
    "contradiction", "not", " or ", "是", "否", "不是", "无", "答：", "标签：", "I10", "E11.9", "u07.1", "C4A.0",
    "疾病实体：", "，", "。", "头实体为", "，尾实体为", "具有治疗关系的头尾实体对如下：", "主诉：", "：",
    # text, odd characters
    "colon cancer", "leukaemia", "T - cell", "腹部", "疼痛", "急性阑尾炎", "x", "é", "ß", "ﬁ", "İ",
    "\u200b", "\u200f", "\u202e", "\ufeff", "\x00", "\x1b[31m", "\ud800", "\udcff", "\U0001f600",
]

_fragment = st.sampled_from(FRAGMENTS)
_any_text = st.text(st.characters(), max_size=200)
_soup = st.lists(st.one_of(_fragment, _fragment, st.text(st.characters(), max_size=6)), max_size=60).map("".join)
_repeated = st.builds(lambda unit, n: unit * n, st.one_of(_fragment, st.text(st.characters(), min_size=1, max_size=4)),
                      st.integers(min_value=200, max_value=3000))
_json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), _any_text, _fragment),
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.one_of(_fragment, _any_text), inner,
                                                                           max_size=4)),
    max_leaves=20,
)
_json = st.builds(lambda v, ascii_: json.dumps(v, ensure_ascii=ascii_), _json_value, st.booleans())
_base = st.one_of(_any_text, _soup, _soup, _repeated, _json)


def _wrap(kind: str, inner: str, other: str) -> str:
    return {
        "plain": inner,
        "response": f"<response>{inner}</response>",
        "unclosed": f"<response>{inner}",
        "think": f"<think>{other}</think>{inner}",
        "open-think": f"<think>{other}{inner}",
        "fence": f"```json\n{inner}\n```",
        "chatter": f"{other}\n<response>{inner}</response>\n{other}",
    }[kind]


answers = st.builds(_wrap, st.sampled_from(["plain", "plain", "response", "unclosed", "think", "open-think", "fence",
                                            "chatter"]), _base, _soup)
#: small answers, for scorers whose cost is quadratic by definition (ROUGE-L's LCS)
short_answers = st.one_of(_any_text, _soup, _json)
