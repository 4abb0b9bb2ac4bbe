"""A comparison tells answers apart without the report holding them (its records are lean): the
samples two runs answer differently at the same score are its disagreements, shown with both answers."""

import json
import shutil

from evalpipe.report.compare import compare_loaded
from evalpipe.report.reading import LEAN_FIELDS
from evalpipe.report.runs import load_report_runs


def test_compare_ranks_answers_that_differ_at_the_same_score(two_runs, tmp_path):
    a = tmp_path / "a"
    shutil.copytree(two_runs[0], a)
    b = tmp_path / "b"
    shutil.copytree(two_runs[0], b)
    lines = (b / "samples.jsonl").read_text(encoding="utf-8").splitlines()
    changed = {}
    for i in (3, 7):  # same parts and scores, another answer
        record = json.loads(lines[i])
        record["answer"] = record["answer"] + " (reworded)"
        changed[record["id"]] = record["answer"]
        lines[i] = json.dumps(record, ensure_ascii=False)
    (b / "samples.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")

    run_a, run_b = load_report_runs([a, b])
    assert not any(name in r for run in (run_a, run_b) for r in run.records for name in LEAN_FIELDS)
    result = compare_loaded(run_a, run_b, resamples=20, top=10)
    (task,) = result.tasks
    shown = {d.id: d for d in task.disagreements}
    assert set(shown) == set(changed)  # only those: every other answer is the same
    for sample_id, answer in changed.items():
        assert shown[sample_id].answer_b == answer and shown[sample_id].answer_a == answer[:-len(" (reworded)")]
        assert shown[sample_id].score_a == shown[sample_id].score_b
