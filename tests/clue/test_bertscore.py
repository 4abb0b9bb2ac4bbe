"""BERTScore with the offline MiniLM encoder (one real computation), settings named in the keys."""

import pytest

from evalpipe.metrics.bertscore import BATCH_SIZE, BertScoreSetupError, bertscore_per_sample, resolve_settings
from evalpipe.metrics.options import MetricOptions


@pytest.fixture(scope="module")
def minilm_rows():
    settings = resolve_settings(MetricOptions())
    rows = bertscore_per_sample(
        ["The patient has pneumonia.", "Take one tablet daily.", "   "],
        ["The patient has pneumonia.", "Stop smoking now.", "Anything at all."],
        settings,
    )
    return settings, rows


def test_identical_text_scores_one_and_encoder_is_named(minilm_rows):
    settings, rows = minilm_rows
    assert settings.tag == "all-MiniLM-L6-v2@L6" and settings.num_layers == 6
    f1 = "bertscore[all-MiniLM-L6-v2@L6]_f1"
    assert set(rows[0]) == {"bertscore[all-MiniLM-L6-v2@L6]_precision", "bertscore[all-MiniLM-L6-v2@L6]_recall", f1}
    assert rows[0][f1] == pytest.approx(1.0, abs=1e-4)
    assert 0.0 < rows[1][f1] < 0.9  # different sentences score lower
    assert rows[2][f1] == 0.0  # empty candidate: 0, not sent to the encoder


def test_settings_tags_and_layer_resolution():
    hub = resolve_settings(MetricOptions(bertscore_model="allenai/scibert_scivocab_uncased"))
    assert hub.num_layers == 8  # bert-score's own table: the reference's setting
    assert hub.key("f1") == "bertscore[allenai/scibert_scivocab_uncased@L8]_f1"
    tuned = resolve_settings(MetricOptions(bertscore_model="emilyalsentzer/Bio_ClinicalBERT", bertscore_num_layers=9,
                                           bertscore_idf=True, bertscore_baseline="auto"))
    assert tuned.tag == "emilyalsentzer/Bio_ClinicalBERT@L9+idf+rescaled"
    with pytest.raises(BertScoreSetupError, match="bertscore_num_layers"):
        resolve_settings(MetricOptions(bertscore_model="some/unknown-model"))


def test_summary_sheet_notes_a_metric_it_did_not_compute(minilm_rows):
    from evalpipe.tasks.clue.common import summary_score_sheet

    options = MetricOptions(umls_extractor="none")
    sheet = summary_score_sheet(["heart failure"], ["heart failure"], options, concepts=True)
    assert not any(k.startswith("umls") for k in sheet.corpus)
    assert "turned off" in sheet.notes["umls"]
    assert sheet.corpus["rougeL"] == 1.0 and sheet.per_sample[0]["bertscore[all-MiniLM-L6-v2@L6]_f1"] > 0.999


def test_scores_do_not_depend_on_the_process_hash_seed():
    """bert-score batches a call's texts in a set's order; evalpipe calls it per chunk with room for
    every text in one batch, so a run and its re-scoring (another process, another hash seed) agree
    to the last bit — also with more texts than one batch holds.

    The two processes compared are this one (its encoder already loaded by the tests above) and a
    child with another hash seed: one encoder load in a fresh process instead of two."""
    import json
    import os
    import subprocess
    import sys

    preds = [f"patient {i} has fever " + "and cough " * (i % 5) for i in range(40)]
    refs = [f"patient {i} reports fever " + "and pain " * (i % 3) for i in range(40)]
    code = ("import json; from evalpipe.metrics.bertscore import bertscore_per_sample, resolve_settings; "
            "from evalpipe.metrics.options import MetricOptions; "
            f"print(json.dumps(bertscore_per_sample({preds!r}, {refs!r}, resolve_settings(MetricOptions()))))")
    assert len(preds) > BATCH_SIZE  # more texts than one batch holds
    here = bertscore_per_sample(preds, refs, resolve_settings(MetricOptions()))
    # a seed other than this process's (a random one, unless PYTHONHASHSEED fixes it)
    other = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": other, "HF_HUB_OFFLINE": "1"})
    # json writes a float's shortest repr, which reads back as the very same float: equal to the last bit
    assert json.loads(child.stdout) == here
