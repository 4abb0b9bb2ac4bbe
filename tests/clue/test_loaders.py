"""Loaders on the synthetic fixtures: formats, validation messages, missing files, shot hold-out."""

import json
import shutil

import pytest

from evalpipe.data.file_records import read_records as read_json_or_jsonl
from evalpipe.data.context_budget import Document, fit_documents
from evalpipe.data.errors import DataError
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.clue.longhealth_data import read_longhealth
from evalpipe.tasks.clue.longhealth import SEPARATOR, build_examples
from evalpipe.tasks.registry import get_task
from tests.clue.conftest import FIXTURES

CREDENTIALED = ["clue_mednli", "clue_problem_summaries", "clue_medisumqa", "clue_medisumcode"]


def load(task, **kw):
    return get_task(task).load(LoadOptions(**{"data_dir": FIXTURES, "seed": 0, **kw})).materialized()


def test_credentialed_flags():
    assert all(get_task(t).credentialed for t in CREDENTIALED)
    assert not any(get_task(t).credentialed for t in ("clue_meqsum", "clue_longhealth_task1"))


@pytest.mark.parametrize("task, expected, where", [
    ("clue_mednli", "mli_test_v1.jsonl", "physionet.org/content/mednli"),
    ("clue_problem_summaries", "BioNLP2023-1A-Test.csv", "bionlp-workshop-2023-task-1a"),
    ("clue_medisumqa", "MeDiSumQA.json", "physionet.org/content/medisumqa"),
    ("clue_medisumcode", "MeDiSumCode.json", "generate_code_dataset.py"),
    ("clue_longhealth_task2", "benchmark_v5.json", "github.com/kbressem/LongHealth"),
])
def test_missing_file_names_file_source_and_access(tmp_path, task, expected, where):
    with pytest.raises(DataError) as error:
        get_task(task).load(LoadOptions(data_dir=tmp_path))
    message = str(error.value)
    assert expected in message and where in message and "--data-dir" in message
    assert ("credentialed access" in message) == (task in CREDENTIALED)
    # the cheap check (no parsing) reports the same message
    assert get_task(task).data_problem(LoadOptions(data_dir=tmp_path)) == message


def test_mednli_shots_from_train_and_all_test_rows_scored():
    data = load("clue_mednli")
    assert [ex.id for ex in data.examples] == [f"t{i}" for i in range(1, 9)]
    assert [ex.id for ex in data.shot_pool] == ["s1", "s2", "s3", "s4"]
    assert data.examples[1].gold == "contradiction" and data.examples[1].meta["line"] == 2
    # train file found beside an explicit test file, or given as role "shots"
    beside = get_task("clue_mednli").load(LoadOptions(paths={"eval": FIXTURES / "MedNLI" / "mli_test_v1.jsonl"}))
    assert len(beside.shot_pool) == 4


def test_mednli_validation(tmp_path):
    (tmp_path / "mli_train_v1.jsonl").write_text((FIXTURES / "MedNLI" / "mli_train_v1.jsonl").read_text())
    bad = tmp_path / "mli_test_v1.jsonl"
    bad.write_text('{"sentence1": "a", "sentence2": "b", "gold_label": "entailment"}\n'
                   '{"sentence1": "a", "sentence2": "b", "gold_label": "maybe"}\n')
    with pytest.raises(DataError, match=r"mli_test_v1.jsonl:2: gold_label: unknown label 'maybe'"):
        get_task("clue_mednli").load(LoadOptions(data_dir=tmp_path))
    bad.write_text('{"sentence1": "a", "gold_label": "neutral"}\n')
    with pytest.raises(DataError, match=r":1: sentence2: missing field"):
        get_task("clue_mednli").load(LoadOptions(data_dir=tmp_path))


def test_meqsum_ships_and_holds_out_the_reference_shots():
    data = get_task("clue_meqsum").load(LoadOptions())
    assert len(data.examples) == 997 and len(data.shot_pool) == 3
    shot_ids = {ex.id for ex in data.shot_pool}
    assert not shot_ids & {ex.id for ex in data.examples}
    # the shots are the rows at positions 0, 1, 2 of random.seed(1)-shuffled data, in that order
    assert [ex.meta["reference_position"] for ex in data.shot_pool] == [0, 1, 2]
    assert data.files[0].name == "meqsum.jsonl"


def test_problem_summaries_gold_and_columns(tmp_path):
    data = load("clue_problem_summaries")
    assert len(data.examples) == 3 and len(data.shot_pool) == 3
    by_id = {ex.id: ex for ex in data.examples + data.shot_pool}
    assert by_id["p1"].gold.problems == ("Congestive heart failure exacerbation", "acute kidney injury")
    assert by_id["p1"].gold.text == "Congestive heart failure exacerbation, acute kidney injury"
    assert by_id["p1"].inputs["subjective"].startswith("Pt c/o")
    bad = tmp_path / "BioNLP2023-1A-Test.csv"
    bad.write_text("File ID,Assessment,Summary\nx,y,z\n")
    with pytest.raises(DataError, match=r":1: Subjectives: missing column"):
        get_task("clue_problem_summaries").load(LoadOptions(data_dir=tmp_path))


def test_json_array_and_json_lines_read_alike(tmp_path):
    lines = (FIXTURES / "MeDiSumCode" / "MeDiSumCode.json").read_text().splitlines()
    array = tmp_path / "MeDiSumCode.json"
    array.write_text("[\n" + ",\n".join(lines) + "\n]\n")
    from_lines = read_json_or_jsonl(FIXTURES / "MeDiSumCode" / "MeDiSumCode.json")
    from_array = read_json_or_jsonl(array)
    assert [r.fields for r in from_lines] == [r.fields for r in from_array]
    assert [r.line for r in from_array] == [2, 3, 4, 5, 6]


def test_medisumcode_gold_and_validation(tmp_path):
    data = load("clue_medisumcode")
    assert [ex.id for ex in data.shot_pool] == ["1003"]
    ex = {e.id: e for e in data.examples}["1001"]
    assert ex.gold.codes == ("I5023", "E1165") and ex.gold.raw == ("I5023", "E1165")
    (tmp_path / "MeDiSumCode.json").write_text(
        '{"hadm_id": 1, "text": "t", "icd_codes": [{"code": "I10"}]}\n{"hadm_id": 2, "text": "t", "icd_codes": []}\n')
    with pytest.raises(DataError, match=r":2: icd_codes: missing or empty"):
        get_task("clue_medisumcode").load(LoadOptions(data_dir=tmp_path))


def test_medisumqa_loads_the_array():
    data = load("clue_medisumqa")
    assert len(data.examples) == 3 and len(data.shot_pool) == 1
    assert all(ex.inputs["question"] and ex.gold for ex in data.examples)


# ---- LongHealth ------------------------------------------------------------------------------

def test_longhealth_validation(tmp_path):
    raw = json.loads((FIXTURES / "LongHealth" / "benchmark_v5.json").read_text())
    raw["patient_01"]["questions"][0]["correct"] = "R-CHOP regimen"  # equals no option
    path = tmp_path / "benchmark_v5.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(DataError, match=r"patient_01.questions\[0\].correct: 'R-CHOP regimen': no option equals it"):
        read_longhealth(path)
    raw["patient_01"]["questions"][0]["correct"] = "R-CHOP"
    raw["patient_01"]["questions"][0]["answer_location"] = {"text_9": {"start": [0], "end": [1]}}
    path.write_text(json.dumps(raw))
    with pytest.raises(DataError, match="text_9"):
        read_longhealth(path)


def test_longhealth_tasks_documents_and_gold():
    patients = read_longhealth(FIXTURES / "LongHealth" / "benchmark_v5.json")
    one, two, three = (build_examples(patients, t, seed=0, repeats=1) for t in (1, 2, 3))
    q = {ex.id: ex for ex in one}["r0-patient_02-q2"]
    # task 1: the answer letters and the patient's other letter, nobody else's; options A-E
    assert sorted(q.meta["documents"]) == ["patient_02/text_0", "patient_02/text_1", "patient_02/text_2"]
    assert [o["letter"] for o in q.inputs["options"]] == list("ABCDE") and q.gold.letter == "C"
    q2 = {ex.id: ex for ex in two}["r0-patient_02-q2"]
    own = [d for d in q2.meta["documents"] if d.startswith("patient_02/")]
    assert sorted(own) == ["patient_02/text_0", "patient_02/text_1"]  # answer letters only
    assert len(q2.meta["documents"]) > 2 and q2.inputs["options"][-1]["letter"] == "F"
    q3 = {ex.id: ex for ex in three}["r0-patient_02-q2"]
    assert not any(d.startswith("patient_02/") for d in q3.meta["documents"])
    assert q3.gold.letter == "F" and q3.gold.clue_letter == "F"
    trap = {ex.id: ex for ex in one}["r0-patient_01-q2"]
    assert (trap.gold.letter, trap.gold.clue_letter) == ("B", "A")  # exact vs the reference's substring rule


def test_longhealth_sampling_is_seeded_and_independent_of_repeats():
    patients = read_longhealth(FIXTURES / "LongHealth" / "benchmark_v5.json")
    a = build_examples(patients, 2, seed=7)
    assert a == build_examples(patients, 2, seed=7)
    assert [ex.meta["documents"] for ex in a] != [ex.meta["documents"] for ex in build_examples(patients, 2, seed=8)]
    assert build_examples(patients, 2, seed=7, repeats=2) == a[:10]  # repeat-major order
    assert [ex.id[3:] for ex in a[:5]] == [ex.id[3:] for ex in a[5:10]]  # r0-… then r1-… of the same questions
    assert a[0].id.startswith("r0-") and a[5].id.startswith("r1-")
    assert a[0].meta["documents"] != a[5].meta["documents"]  # a fresh draw per repeat


def test_longhealth_budget_keeps_answer_letters():
    patients = read_longhealth(FIXTURES / "LongHealth" / "benchmark_v5.json")
    tight = build_examples(patients, 2, seed=0, budget=120, repeats=1)
    q = {ex.id: ex for ex in tight}["r0-patient_01-q1"]
    assert q.meta["documents"] == ["patient_01/text_0"] and q.meta["skipped_documents"] > 0
    assert q.meta["context_size"] <= 120 and not q.meta["answer_truncated"]


def test_fit_documents_rule_by_hand():
    sep = "--"  # 2 characters
    required = [Document("a", "x" * 10), Document("b", "y" * 10)]
    optional = [Document("c", "z" * 30), Document("d", "w" * 5)]
    # a (10) + sep + b (10) = 22; c would make 54 > 30 → skipped; d: 22 + 2 + 5 = 29 ≤ 30
    fitted = fit_documents(required, optional, 30, sep)
    assert [d.id for d in fitted.documents] == ["a", "b", "d"] and fitted.used == 29 and fitted.skipped == 1
    assert not fitted.truncated
    # budget 15: a fits (10), b is cut to 15 - 10 - 2 = 3 characters and flagged
    cut = fit_documents(required, optional, 15, sep)
    assert [d.text for d in cut.documents] == ["x" * 10, "yyy"] and cut.truncated and cut.used == 15


def test_separator_matches_the_template():
    from evalpipe.prompting import PROMPTS_DIR, _environment

    module = _environment(PROMPTS_DIR).get_template("clue/longhealth.j2").make_module({"task": {}})
    example = {"documents": ["ONE", "TWO"], "question": "Q", "options": [{"letter": "A", "text": "a"}]}
    assert f"ONE{SEPARATOR}TWO" in str(module.prompt(example, []))


def test_data_dir_finds_flat_or_clue_layout(tmp_path):
    shutil.copy(FIXTURES / "MeDiSumQA" / "MeDiSumQA.json", tmp_path / "MeDiSumQA.json")
    assert len(get_task("clue_medisumqa").load(LoadOptions(data_dir=tmp_path)).examples) == 3


def test_counted_measure_fits_by_tokens():
    from evalpipe.data.context_budget import CountedMeasure

    words = CountedMeasure(lambda text: len(text.split()), name="words")
    docs = [Document("a", "one two three four five"), Document("b", "six seven")]
    # budget 4 words: a (5 words) is cut to its longest prefix of ≤ 4 words; b no longer fits
    fitted = fit_documents(docs[:1], docs[1:], 4, " | ", words)
    assert fitted.documents[0].text.split() == ["one", "two", "three", "four"] and fitted.truncated
    assert fitted.skipped == 1 and fitted.used == 4


def test_json_array_of_non_objects_is_refused(tmp_path):
    path = tmp_path / "MeDiSumQA.json"
    path.write_text('[{"a": 1}, 3]')
    with pytest.raises(DataError, match=r"MeDiSumQA.json:1: expected a JSON object, found int"):
        read_json_or_jsonl(path)


def test_mednli_train_file_beside_the_test_file_or_missing(tmp_path):
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    test_file = FIXTURES / "MedNLI" / "mli_test_v1.jsonl"
    # --data-dir without MedNLI files (other tasks' data), --data pointing at the test file
    data = get_task("clue_mednli").load(LoadOptions(data_dir=elsewhere, paths={"eval": test_file}))
    assert len(data.shot_pool) == 4
    lonely = tmp_path / "mli_test_v1.jsonl"
    shutil.copy(test_file, lonely)
    with pytest.raises(DataError, match="mli_train_v1.jsonl not found.*few-shot"):
        get_task("clue_mednli").load(LoadOptions(paths={"eval": lonely}))


def test_too_few_records_for_the_held_out_shot(tmp_path):
    (tmp_path / "MeDiSumQA.json").write_text('[{"discharge_summary": "d", "Question": "q", "Answer": "a"}]')
    with pytest.raises(DataError, match="need more than the 1 held out"):
        get_task("clue_medisumqa").load(LoadOptions(data_dir=tmp_path))
