"""The one place that decides how Chinese text is normalised and tokenised.

Every Chinese parser (labels, triples, term lists, PromptCBLUE answers) and every Chinese text
metric (ROUGE-L, BLEU-4) goes through this module, so "are these two strings the same answer?"
and "what is a token?" have one answer each, written down here.

Choices, and why:

* **Width folding = NFKC.** :func:`fold` applies Unicode NFKC: full-width ASCII becomes half
  width (``Ａ``→``A``, ``２``→``2``, ``，``→``,``, ``：``→``:``, ``（``→``(``, ``｜``→``|``), the
  ideographic space becomes a space, and compatibility forms are expanded (``①``→``1``,
  ``㎎``→``mg``, ``…``→``...``). Chinese punctuation that has no half-width twin (``。``, ``、``,
  ``“”``, ``《》``, ``【】``) is left as it is. Models switch between full- and half-width forms
  freely, and the gold files themselves mix them, so a comparison must not depend on it.
* **Match keys.** :func:`match_key` = fold, case-fold, and delete whitespace and invisible format
  characters. Chinese does not use spaces between words, so a space a model inserts or drops is
  never meaningful for entity, term or triple matching. Keys are for *comparison only*; predicted
  values are stored as the model wrote them.
* **Label keys.** :func:`label_key` = match key with, repeatedly until neither applies, sentence
  punctuation removed from the end (``是的。`` ≡ ``是的``) and a quote/bracket pair removed when the
  key starts with its opening and ends with its closing character (``“是”`` ≡ ``是``,
  ``“是的”！`` ≡ ``是的``, ``((是))`` ≡ ``是``). The two ends are not checked for belonging
  together: ``“是”还是“否”`` becomes ``是”还是“否`` — which matches no label, so it stays a
  parse failure. Brackets *inside* a label are kept (``症状(患者感受)``).
* **Tokens for ROUGE = characters.** :func:`rouge_tokens`: after fold + lower-casing, every
  character of a script written without spaces (Unicode category ``Lo``: Han, kana, Hangul) is
  one token; runs of letters and digits (Latin words, numbers, ``CRP``, ``5mg``) are one token
  each; whitespace, punctuation and symbols separate tokens and are dropped — as rouge-score's
  own English tokenizer drops them. A word segmenter (jieba) is deliberately not used: its
  output depends on its dictionary version, and character n-grams are what Chinese ROUGE
  reports conventionally use. rouge-score's *default* tokenizer keeps only ``[a-z0-9]`` and so
  deletes every Chinese character: Chinese ROUGE with it is 0 or undefined, never a score.
* **Tokens for BLEU = sacrebleu's ``zh``.** BLEU is computed by sacrebleu itself with
  ``tokenize="zh"`` (:data:`BLEU_TOKENIZE`): each CJK character is separated, other text is
  tokenised as by its 13a tokenizer, punctuation is kept as tokens. Inputs are passed unfolded,
  so the number equals what ``sacrebleu -tok zh`` prints for the same files.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

__all__ = [
    "BLEU_TOKENIZE",
    "CharTokenizer",
    "fold",
    "label_key",
    "match_key",
    "rouge_tokens",
]

#: sacrebleu tokenizer name used for every Chinese BLEU score
BLEU_TOKENIZE = "zh"

#: characters removed from the end of a label answer (after folding): ``是的。`` → ``是的``
_TRAILING_PUNCT = ".。!?,;:、~"
#: quote / bracket pairs removed when they wrap the whole label answer (after folding)
_WRAPPERS = (
    ("“", "”"), ("‘", "’"), ('"', '"'), ("'", "'"), ("「", "」"), ("『", "』"), ("《", "》"),
    ("【", "】"), ("〈", "〉"), ("(", ")"), ("[", "]"), ("{", "}"), ("<", ">"), ("`", "`"),
)


@lru_cache(maxsize=65536)
def fold(text: str) -> str:
    """Unicode NFKC: full-width forms to half width, compatibility characters expanded."""
    return unicodedata.normalize("NFKC", text)


def match_key(text: str) -> str:
    """Comparison key: folded, case-folded, with whitespace and format characters removed."""
    folded = fold(text).casefold()
    return "".join(ch for ch in folded if not ch.isspace() and unicodedata.category(ch) != "Cf")


def label_key(text: str) -> str:
    """Key of a label answer: :func:`match_key`, then trailing punctuation and wrapping
    quote/bracket pairs stripped repeatedly until neither applies (see the module docstring).

    Applied to both the label set and the answer, so labels that themselves end in a bracket
    still compare equal to their own key.
    """
    key = match_key(text)
    # the key is key[lo:hi]; moving the ends instead of slicing keeps deep wrappers linear
    lo, hi = 0, len(key)
    changed = True
    while lo < hi and changed:
        changed = False
        end = hi
        while end > lo and key[end - 1] in _TRAILING_PUNCT:
            end -= 1
        if end != hi:
            hi, changed = end, True
        for left, right in _WRAPPERS:
            if hi - lo >= 2 and key.startswith(left, lo, hi) and key.endswith(right, lo, hi):
                lo, hi, changed = lo + len(left), hi - len(right), True
                break
    return key[lo:hi]


def _kind(ch: str) -> str:
    """``"char"`` (one token by itself), ``"word"`` (part of a run) or ``"sep"`` (dropped)."""
    category = unicodedata.category(ch)
    if category == "Lo":
        return "char"
    if category[0] in "LN" or category in ("Mn", "Mc"):
        return "word"
    return "sep"


def rouge_tokens(text: str) -> list[str]:
    """ROUGE tokens of ``text``: one per Han character, one per letter/digit run (see module doc).

    >>> rouge_tokens("患者ＣＲＰ升高，5mg/天")
    ['患', '者', 'crp', '升', '高', '5mg', '天']
    """
    tokens: list[str] = []
    word: list[str] = []
    # NFKC directly, not the cached fold(): whole answers and references rarely repeat, and would
    # only crowd out the short keys that cache is for
    for ch in unicodedata.normalize("NFKC", text or "").lower():
        kind = _kind(ch)
        if kind == "word":
            word.append(ch)
            continue
        if word:
            tokens.append("".join(word))
            word = []
        if kind == "char":
            tokens.append(ch)
    if word:
        tokens.append("".join(word))
    return tokens


class CharTokenizer:
    """rouge-score tokenizer object (``RougeScorer(tokenizer=CharTokenizer())``).

    rouge-score calls ``tokenize(text)`` on both texts; this returns :func:`rouge_tokens`.
    """

    def tokenize(self, text: str) -> list[str]:
        return rouge_tokens(text)
