"""CBLUE CMeEE: Chinese medical NER with nested entities, answered as XML-tagged text.

Data: the user's ``CMeEE_{train,dev,test}.json`` from Tianchi (see :mod:`evalpipe.tasks.cblue.files`;
nothing is shipped). Records ``{text, entities: [{start_idx, end_idx, type, entity}]}`` with nine
types; ``end_idx`` is **inclusive** in the file and converted to half-open character spans
``[start_idx, end_idx + 1)`` on load, after checking ``text[start_idx:end_idx + 1] == entity``.

The model copies the text inside ``<response>`` and wraps each entity in a tag named by its type
code (``<dis>``, ``<sym>``, …). Entities nest (CBLUE nests other types only inside ``sym``:
``<sym><bod>腹部</bod>疼痛</sym>``); :mod:`evalpipe.parsers.xml_tags` reads nested tags and aligns
the tag-stripped answer to the source text character by character, so an answer that changed
spacing or full-/half-width punctuation (``，``→``,``) still yields spans over the *original*
text, with the same diagnostics as NCBI Disease.

Metric (CBLUE's): strict micro P/R/F1 over ``(start, end, type)`` character spans, inner and
outer entities each counted; per-type F1 and partial-overlap F1 are reported beside it.
Evaluated on the dev split by default because CBLUE's test labels are hidden.
"""

from __future__ import annotations

from collections.abc import Sequence

from evalpipe.tasks.cblue.files import TEST_HINT, CMeEEDoc, read_cmeee, split_files
from evalpipe.metrics.aggregation import MicroPRF
from evalpipe.metrics.options import MetricOptions
from evalpipe.metrics.spans import per_label_prf, span_score_sheet
from evalpipe.parsers.xml_tags import parse_tagged_answer, to_prediction
from evalpipe.records import Example, Prediction, ScoreSheet, Span
from evalpipe.tasks.base import EVAL, LoadOptions, SHOTS, Scoring, TaskData, TaskSpec
from evalpipe.tasks.registry import register

FOLDERS = ("CMeEE", "CMeEE-V2")
#: type code (also the XML tag name) → description shown in the prompt
TYPES = {
    "dis": "疾病", "sym": "临床表现", "pro": "医疗程序", "equ": "医疗设备", "dru": "药物",
    "ite": "医学检验项目", "bod": "身体", "dep": "科室", "mic": "微生物类",
}
TAG_MAP = {code: code for code in TYPES}


def _examples(docs: Sequence[CMeEEDoc], split: str, path: str) -> tuple[Example, ...]:
    return tuple(
        Example(id=f"{split}-{i}", inputs={"text": doc.text}, gold=doc.entities, meta={"file": path, "line": doc.line})
        for i, doc in enumerate(docs)
    )


def load(options: LoadOptions) -> TaskData:
    files = split_files(options, FOLDERS)
    hint = TEST_HINT if files.split == "test" else ""
    examples = _examples(read_cmeee(files.eval_path, tuple(TYPES), hint), files.split, str(files.eval_path))
    pool: tuple[Example, ...] = ()
    if files.shot_path is not None:
        pool = _examples(read_cmeee(files.shot_path, tuple(TYPES)), files.shot_split, str(files.shot_path))
    used = (files.eval_path,) + ((files.shot_path,) if files.shot_path else ())
    return TaskData(examples=examples, shot_pool=pool, files=used, split=files.split)


def tagged_text(text: str, spans: Sequence[Span]) -> str:
    """``text`` with each span wrapped in ``<type>…</type>``, nested spans nested.

    Spans that cross another span (neither inside nor around it) cannot be written as XML;
    the later one is left out of the rendering (this only affects few-shot answers).
    """
    accepted: list[Span] = []
    stack: list[Span] = []
    for span in sorted(set(spans), key=lambda s: (s.start, -s.end, s.label)):
        while stack and stack[-1].end <= span.start:
            stack.pop()
        if stack and span.end > stack[-1].end:
            continue
        accepted.append(span)
        stack.append(span)
    opens: dict[int, list[Span]] = {}
    closes: dict[int, list[Span]] = {}
    for span in accepted:
        opens.setdefault(span.start, []).append(span)
        closes.setdefault(span.end, []).append(span)
    out: list[str] = []
    for i in range(len(text) + 1):
        out += [f"</{s.label}>" for s in reversed(closes.get(i, []))]
        out += [f"<{s.label}>" for s in opens.get(i, [])]
        if i < len(text):
            out.append(text[i])
    return "".join(out)


def shot_target(example: Example) -> str:
    return f"<response>{tagged_text(example.inputs['text'], example.gold)}</response>"


def parse(answer: str, example: Example) -> Prediction:
    """Nested XML tags → character spans over the original text (see evalpipe.parsers.xml_tags)."""
    return to_prediction(parse_tagged_answer(answer, example.inputs["text"], TAG_MAP))


def empty_prediction(example: Example) -> Prediction:
    return Prediction(value=(), failed=True, diagnostics={"no_answer": True})


def score(examples: Sequence[Example], predictions: Sequence[Prediction], options: MetricOptions) -> ScoreSheet:
    """Strict micro P/R/F1 over (start, end, type) character spans; ``f1_<type>`` per type.

    Inner and outer entities of a nesting each count (a sentence with ``<sym><bod>腹部</bod>疼痛</sym>``
    has two gold entities). A failed parse predicts nothing, so its gold entities are false
    negatives. ``partial_*`` = same type and at least one shared character, one-to-one.
    """
    golds = [tuple(ex.gold) for ex in examples]
    preds = [tuple(p.value) for p in predictions]
    sheet = span_score_sheet(golds, preds)
    per_type = per_label_prf(golds, preds)
    extra = {f"f1_{code}": per_type[code].f1 for code in TYPES if code in per_type}
    parts = [{**counts, **_type_counts(gold, pred)} for counts, gold, pred in zip(sheet.per_sample, golds, preds)]
    aggregations = {**sheet.aggregations, **{f"f1_{code}": MicroPRF("f1", prefix=f"type:{code}:") for code in TYPES}}
    return ScoreSheet(corpus={**sheet.corpus, **extra}, per_sample=sheet.per_sample, parts=parts,
                      aggregations=aggregations)


def _type_counts(gold: Sequence[Span], pred: Sequence[Span]) -> dict[str, int]:
    """One sentence's exact-match counts per entity type (``type:<code>:tp`` …), the parts of
    ``f1_<type>`` (:func:`evalpipe.metrics.spans.per_label_prf`, summed over sentences)."""
    gold_set, pred_set = set(gold), set(pred)
    out: dict[str, int] = {}
    for span in gold_set | pred_set:
        kind = "tp" if span in gold_set and span in pred_set else "fp" if span in pred_set else "fn"
        key = f"type:{span.label}:{kind}"
        out[key] = out.get(key, 0) + 1
    return out


SPEC = register(
    TaskSpec(
        name="cmeee",
        kind="span_ner",
        data_roles=(EVAL, SHOTS),
        description="CBLUE CMeEE: Chinese medical NER, 9 types, nested; XML-tagged text (dev split, 3-shot).",
        template="cblue/cmeee.j2",
        load=load,
        shot_target=shot_target,
        scorings={
            "default": Scoring(parse=parse, score=score, empty=empty_prediction,
                               description="aligned nested XML parse, strict micro P/R/F1 over character spans",
                               corpus_reason="f1_<type> is reported for the entity types found in the corpus: "
                                             "the metric set depends on the corpus"),
        },
        metrics=("precision", "recall", "f1", "partial_f1"),
        max_tokens=2048,
        primary_metric="f1",
        default_shots=3,
        template_vars={"types": [{"tag": code, "name": name} for code, name in TYPES.items()]},
        completion_stop=("\n\n输入：",),
        suites=("cblue",),
        citation="Zhang N, et al. CBLUE: A Chinese Biomedical Language Understanding Evaluation Benchmark. "
        "ACL 2022. Data: Tianchi (https://tianchi.aliyun.com/dataset/95414), Tianchi terms; not shipped.",
    )
)
