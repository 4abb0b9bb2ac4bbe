"""Loaders of the user's CBLUE / PromptCBLUE / Huatuo files: formats, layout, and every error."""

from __future__ import annotations

import json

import pytest

from evalpipe.tasks.cblue.files import read_json_records, read_term_table
from evalpipe.data.errors import DataError
from evalpipe.records import Span
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.registry import get_task
from tests.cblue import synthetic as syn


@pytest.fixture()
def cblue(tmp_path):
    return syn.write_cblue(tmp_path / "CBLUEDatasets")


def load(task, **kw):
    return get_task(task).load(LoadOptions(**kw)).materialized()


def test_every_task_loads_dev_with_train_shots(cblue):
    sizes = {}
    for task in ("cmeee", "cmeie", "chip_cdn", "chip_ctc", "chip_sts", "kuake_qic", "kuake_qtr", "kuake_qqr"):
        data = load(task, data_dir=cblue)
        assert data.split == "dev" and all(ex.id.startswith("dev-") for ex in data.examples)
        assert data.shot_pool and all(ex.id.startswith("train-") for ex in data.shot_pool)
        sizes[task] = len(data.examples)
    assert sizes == {"cmeee": 3, "cmeie": 2, "chip_cdn": 2, "chip_ctc": 3, "chip_sts": 4, "kuake_qic": 2,
                     "kuake_qtr": 2, "kuake_qqr": 2}


def test_cmeee_inclusive_end_idx_becomes_half_open_spans(cblue):
    first = load("cmeee", data_dir=cblue).examples[0]
    text = first.inputs["text"]
    # file: 腹部 start 2, end_idx 3 (inclusive) → Span(2, 4)
    assert first.gold == (Span(2, 4, "bod"), Span(2, 6, "sym"), Span(12, 17, "dis"))
    assert [text[s.start:s.end] for s in first.gold] == ["腹部", "腹部疼痛", "急性阑尾炎"]


def test_task_files_without_a_task_folder_and_explicit_eval_file(tmp_path, cblue):
    flat = tmp_path / "flat"
    syn.write_records(flat / "KUAKE-QIC_dev.json", syn.QIC["dev"], lines=False)
    assert len(load("kuake_qic", data_dir=flat, shots=0).examples) == 2
    # without a train file the default 3 shots cannot be drawn: said when loading, naming the file
    with pytest.raises(DataError, match=r"KUAKE-QIC_train.json not found \(the file the few-shot examples come from"):
        load("kuake_qic", data_dir=flat)
    data = load("kuake_qic", paths={"eval": cblue / "KUAKE-QIC" / "KUAKE-QIC_dev.json"})
    assert len(data.shot_pool) == 3  # the train file next to the eval file


def test_entity_text_mismatch_names_file_line_and_field(tmp_path):
    records = [syn.CMEEE["dev"][0], {"text": "患者咳嗽。", "entities": [
        {"start_idx": 2, "end_idx": 2, "type": "sym", "entity": "咳嗽"}]}]
    path = syn.write_records(tmp_path / "CMeEE_dev.json", records, lines=False)
    with pytest.raises(DataError) as err:
        load("cmeee", paths={"eval": path})
    line = next(i for i, text in enumerate(path.read_text().splitlines(), start=1) if "患者咳嗽" in text)
    assert err.value.line == line - 1  # the line where the record's "{" is
    assert err.value.field == "entities[0].entity" and "end_idx is inclusive" in str(err.value)
    assert str(path) in str(err.value)


def test_unknown_entity_type_and_out_of_range_offsets(tmp_path):
    bad_type = [{"text": "头痛", "entities": [{"start_idx": 0, "end_idx": 1, "type": "symptom", "entity": "头痛"}]}]
    with pytest.raises(DataError, match="unknown type 'symptom'"):
        load("cmeee", paths={"eval": syn.write_records(tmp_path / "a.json", bad_type, lines=False)})
    bad_range = [{"text": "头痛", "entities": [{"start_idx": 1, "end_idx": 5, "type": "sym", "entity": "痛"}]}]
    with pytest.raises(DataError, match="outside the text"):
        load("cmeee", paths={"eval": syn.write_records(tmp_path / "b.json", bad_range, lines=False)})


def test_missing_file_names_the_expected_file_and_where_it_is_published(tmp_path):
    with pytest.raises(DataError) as err:
        load("chip_sts", data_dir=tmp_path)
    message = str(err.value)
    assert "CHIP-STS_dev.json" in message and "tianchi.aliyun.com" in message
    assert "not shipped" in message and "no credentialed access" in message


def test_test_split_without_labels_says_labels_are_hidden(tmp_path, cblue):
    syn.write_records(cblue / "KUAKE-QIC" / "KUAKE-QIC_test.json", [{"id": "s1", "query": "胃痛"}], lines=False)
    with pytest.raises(DataError) as err:
        load("kuake_qic", data_dir=cblue, split="test")
    assert err.value.field == "label" and "fields found: id, query" in str(err.value)
    assert "test labels are hidden" in str(err.value)
    with pytest.raises(DataError, match="unknown split"):
        load("kuake_qic", data_dir=cblue, split="validation")


def test_labels_outside_the_set_duplicate_ids_and_qqr_na(tmp_path, cblue):
    bad = [{"id": "s1", "query": "胃痛", "label": "治疗"}]
    with pytest.raises(DataError, match="unknown label '治疗'"):
        load("kuake_qic", paths={"eval": syn.write_records(tmp_path / "q.json", bad, lines=False)})
    dup = [{"id": "s1", "query": "a", "label": "其他"}, {"id": "s1", "query": "b", "label": "其他"}]
    with pytest.raises(DataError, match="duplicate id '(dev-)?s1'"):
        load("kuake_qic", paths={"eval": syn.write_records(tmp_path / "d.json", dup, lines=False)})
    pool = load("kuake_qqr", data_dir=cblue).shot_pool
    assert [ex.gold for ex in pool] == ["2", "0", "0"]  # "NA" read as "0", as CBLUE's processor does


def test_cmeie_needs_its_schema_and_known_predicates(tmp_path, cblue):
    (cblue / "CMeIE" / "53_schemas.json").unlink()
    with pytest.raises(DataError, match="53_schemas.json"):
        load("cmeie", data_dir=cblue)
    syn.write_records(cblue / "CMeIE" / "53_schemas.json", syn.CMEIE_SCHEMAS[:1], lines=True)
    with pytest.raises(DataError) as err:
        load("cmeie", data_dir=cblue)
    assert err.value.field == "spo_list[1].predicate" and err.value.line == 1


def test_cmeie_object_without_value(tmp_path, cblue):
    record = {"text": "x", "spo_list": [{"subject": "a", "predicate": "药物治疗", "object": {"value": "b"}}]}
    path = syn.write_records(tmp_path / "CMeIE_dev.json", [record], lines=True)
    with pytest.raises(DataError, match=r"@value: missing field \(fields found: value\)"):
        load("cmeie", paths={"eval": path}, data_dir=cblue)


def test_invalid_json_reports_the_line(tmp_path):
    lines = tmp_path / "l.json"
    lines.write_text('{"a": 1}\n{"a": \n', encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_json_records(lines)
    assert err.value.line == 2
    array = tmp_path / "a.json"
    array.write_text('[\n  {"a": 1},\n  {"a": 2,}\n]', encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_json_records(array)
    assert err.value.line == 3
    array.write_text('[\n  {"a": 1},\n\n  {"a": 2}\n]', encoding="utf-8")
    assert read_json_records(array) == [(2, {"a": 1}), (4, {"a": 2})]


def test_term_table_formats(tmp_path):
    assert read_term_table(syn.write_term_table(tmp_path / "t.xlsx")) == tuple(syn.CDN_TERMS)
    (tmp_path / "t.txt").write_text("高血压\n\n心绞痛\n高血压\n", encoding="utf-8")
    assert read_term_table(tmp_path / "t.txt") == ("高血压", "心绞痛")
    (tmp_path / "t.tsv").write_text("I10\t高血压\nI20\t心绞痛\n", encoding="utf-8")
    assert read_term_table(tmp_path / "t.tsv") == ("高血压", "心绞痛")
    with pytest.raises(DataError, match="term table not found"):
        read_term_table(tmp_path / "missing.xlsx")
    (tmp_path / "broken.xlsx").write_text("not a zip", encoding="utf-8")
    with pytest.raises(DataError, match="not a readable .xlsx"):
        read_term_table(tmp_path / "broken.xlsx")


def test_cdn_candidates_come_from_the_term_table(tmp_path, cblue):
    table = syn.write_term_table(tmp_path / "terms.xlsx")
    data = load("chip_cdn", data_dir=cblue, paths={"cdn_terms": table})
    second = data.examples[1]  # 2型糖尿病伴肾病 → gold 2型糖尿病##糖尿病肾病
    assert {"2型糖尿病", "糖尿病肾病"} <= set(second.inputs["candidates"])
    assert second.inputs["candidates"][0] in ("2型糖尿病", "糖尿病肾病")
    assert table in data.files
    assert load("chip_cdn", data_dir=cblue).examples[1].inputs["candidates"] == []  # no table: free generation


# ---- PromptCBLUE -----------------------------------------------------------------------------

def test_promptcblue_loads_and_rejects_unsupported_datasets(tmp_path):
    path = syn.write_promptcblue(tmp_path / "dev.json")
    data = load("promptcblue", data_dir=tmp_path)
    assert len(data.examples) == len(syn.PROMPTCBLUE) and data.files == (path,)
    text2dt = syn.pc("dev-99", "Text2DT", "tree", "x", "y", None)
    syn.write_promptcblue(tmp_path / "other.json", [*syn.PROMPTCBLUE[:2], text2dt])
    with pytest.raises(DataError) as err:
        load("promptcblue", paths={"eval": tmp_path / "other.json"})
    assert err.value.line == 3 and err.value.field == "task_dataset" and "grep -v" in str(err.value)


@pytest.mark.parametrize("change, field, message", [
    (lambda r: r.pop("target"), "target", "targets are hidden"),
    (lambda r: r.update(answer_choices="是的，不是"), "answer_choices", "list of strings"),
    (lambda r: r.update(target="也许"), "target", "outside answer_choices"),
])
def test_promptcblue_record_errors(tmp_path, change, field, message):
    record = dict(syn.PROMPTCBLUE[5])  # CHIP-STS
    change(record)
    path = syn.write_promptcblue(tmp_path / "dev.json", [syn.PROMPTCBLUE[0], record])
    with pytest.raises(DataError) as err:
        load("promptcblue", paths={"eval": path})
    assert err.value.line == 2 and err.value.field == field and message in str(err.value)


def test_promptcblue_duplicate_sample_ids(tmp_path):
    path = syn.write_promptcblue(tmp_path / "dev.json", [syn.PROMPTCBLUE[0], syn.PROMPTCBLUE[0]])
    with pytest.raises(DataError, match="duplicate 'dev-1'"):
        load("promptcblue", paths={"eval": path})


# ---- Huatuo-26M ------------------------------------------------------------------------------

def test_huatuo_fields_are_validated_and_named(tmp_path):
    path = syn.write_huatuo(tmp_path / "test_datasets.jsonl")
    data = load("huatuo_generation", data_dir=tmp_path)
    assert [ex.gold for ex in data.examples] == [r["answers"] for r in syn.HUATUO]
    listed = syn.write_huatuo(tmp_path / "l.jsonl", [{"questions": ["", "问题一？"], "answers": ["回答一。"]}])
    assert load("huatuo_generation", paths={"eval": listed}).examples[0].inputs == {"question": "问题一？"}
    wrong = syn.write_huatuo(tmp_path / "w.jsonl", [{"question": "q", "answer": "a"}])
    with pytest.raises(DataError) as err:
        load("huatuo_generation", paths={"eval": wrong})
    assert err.value.field == "questions" and "fields found: answer, question" in str(err.value)
    with pytest.raises(DataError, match="test_datasets.jsonl"):
        load("huatuo_generation", data_dir=tmp_path / "nowhere")
    with pytest.raises(DataError, match="unknown split .dev."):
        load("huatuo_generation", data_dir=tmp_path, split="dev")
    assert json.loads(path.read_text(encoding="utf-8").splitlines()[0])["questions"]
