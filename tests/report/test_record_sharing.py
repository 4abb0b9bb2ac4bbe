"""The report's records share their repeated strings and flat dicts, and read back as written."""

import json

from evalpipe.report.reading import read_records
from evalpipe.report.runs import SHARING_TRIAL, _Sharing
from evalpipe.results import RunDir


def _typed(value):
    """A JSON value with every scalar's type spelled out (1, 1.0 and True differ; so do 0.0 and -0.0)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, repr(value))


def _write(tmp_path, records):
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return RunDir(tmp_path)


def test_records_read_back_exactly_with_equal_values_shared(tmp_path):
    records = []
    for i in range(40):
        records.append({
            "task": "ner", "id": f"s{i}", "key": "k" * 64,
            "inputs": {"tokens": ["the", "ataxia", f"[{i}]"], "text": f"the ataxia [{i}]"},
            "gold": {"tags": ["O", "B-Disease", "O"], "spans": [{"start": 1, "end": 2, "label": "Disease"}]},
            # look-alike values that must not be taken for one another
            "scores": [{"f1": 1.0}, {"f1": 1}, {"f1": True}, {"f1": 0.0}, {"f1": -0.0}][i % 5],
            "diagnostics": {"empty": False, "unknown": [], "coverage": 1.0} if i % 2 else
                           {"empty": False, "unknown": ["X"], "coverage": 1.0},
            "usage": {"prompt_tokens": 10 + i % 3},
        })
    read = read_records(_write(tmp_path, records), None)[0]
    for record in records:
        del record["key"]  # no part of the report reads it
    assert [_typed(r) for r in read] == [_typed(r) for r in records]
    assert [json.dumps(r) for r in read] == [json.dumps(r) for r in records]
    # one object for equal strings, token lists and flat dicts; distinct ones for look-alikes
    assert read[0]["inputs"]["tokens"][1] is read[7]["inputs"]["tokens"][1]
    assert read[0]["gold"]["tags"][1] is read[9]["gold"]["tags"][1]
    assert read[1]["diagnostics"] is read[3]["diagnostics"]
    assert read[0]["scores"] is read[5]["scores"]
    assert len({id(read[i]["scores"]) for i in range(5)}) == 5
    assert read[0]["usage"] is read[3]["usage"] and read[0]["usage"] is not read[1]["usage"]


def test_a_field_whose_dicts_are_mostly_distinct_is_no_longer_tried(tmp_path):
    records = [{"task": "t", "id": str(i), "meta": {"line": i}, "scores": {"acc": i % 2}}
               for i in range(SHARING_TRIAL + 10)]
    read = read_records(_write(tmp_path, records), None)[0]
    assert [_typed(r) for r in read] == [_typed(r) for r in records]
    assert read[0]["scores"] is read[2]["scores"]
    sharing = _Sharing()
    for record in RunDir(tmp_path).iter_samples():
        sharing.record(record)
    assert sharing.dicts["meta"] is None and len(sharing.dicts["scores"]) == 2


def test_equal_span_outcomes_are_one_object_and_read_as_classified():
    from evalpipe.records import Span
    from evalpipe.report.ner_errors import classify
    from evalpipe.report.sharing import OutcomeSharing

    shared = OutcomeSharing()
    gold, pred = (Span(1, 3, "Disease"), Span(5, 6, "Disease")), (Span(1, 3, "Disease"), Span(5, 7, "Disease"))
    first = shared.sample(classify(gold, pred))
    again = shared.sample(classify(gold, pred))
    other = shared.sample(classify(gold[:1], pred[:1]))
    assert again is first and other is not first
    assert other[0][0] is first[0][0]  # the same entity outcome in another sample: one object
    assert [list(side) for side in first] == [list(side) for side in classify(gold, pred)]
    assert [o.category for o in first[1]] == ["correct", "boundary"]


def test_parts_taken_while_reading_make_the_matrix_the_records_would():
    import numpy as np

    from evalpipe.metrics.aggregation import Mean
    from evalpipe.report.runs import TaskParts, _keys, resample_task
    from evalpipe.results import TaskSummary

    records = [{"task": "t", "id": "a", "parts": {"x": 1, "y": 2.5}}, {"task": "t", "id": "b", "error": "boom"},
               {"task": "t", "id": "c", "parts": {"x": True, "z": 9}}, {"task": "t", "id": "d"}]
    summary = TaskSummary(aggregations={"mx": Mean("x").to_json(), "my": Mean("y").to_json()})
    taken = TaskParts(_keys({"mx": Mean("x"), "my": Mean("y")}))
    for record in records:
        taken.add(record)
    held = resample_task("t", records, {"mx": 0.5}, summary, [])
    made = resample_task("t", [], {"mx": 0.5}, summary, [], taken)
    assert made.ids == held.ids == ("a", "c", "d") and made.keys == held.keys == ("x", "y")
    assert np.array_equal(made.parts, held.parts) and made.parts.tolist() == [[1.0, 2.5], [0.0, 0.0], [0.0, 0.0]]
