"""CoNLL loader: the shipped NCBI splits, and clear errors for malformed files."""

import pytest

from evalpipe.data.conll import read_conll
from evalpipe.data.errors import DataError
from evalpipe.tasks.base import LoadOptions
from evalpipe.tasks.ncbi.disease import DATA_DIR
from evalpipe.tasks.registry import get_task

def load(options):
    return get_task("ncbi_disease").load(options).materialized()


def test_shipped_ncbi_splits_have_published_sizes():
    assert len(read_conll(DATA_DIR / "test.tsv")) == 940
    assert len(read_conll(DATA_DIR / "devel.tsv")) == 923
    assert len(read_conll(DATA_DIR / "train.tsv")) == 5432


def test_ncbi_test_split_as_examples():
    data = load(LoadOptions())
    first = data.examples[0]
    assert first.id == "test-0"
    assert first.inputs["text"].startswith("Clustering of missense mutations in the ataxia - telangiectasia")
    # ataxia - telangiectasia (tokens 6..8) and sporadic T - cell leukaemia (12..16)
    assert [(s.start, s.end, s.label) for s in first.gold.spans] == [(6, 9, "Disease"), (12, 17, "Disease")]
    assert sum(len(ex.gold.spans) for ex in data.examples) == 960  # mentions in the test split
    assert data.split == "test" and all(ex.id.startswith("train-") for ex in data.shot_pool)


def test_evaluating_train_takes_shots_from_devel():
    data = load(LoadOptions(split="train"))
    assert data.shot_pool[0].id.startswith("devel-")


@pytest.mark.parametrize(
    "content, line, fragment",
    [
        ("a\tO\nb\tO\textra\n", 2, "3 tab-separated column(s), expected 2"),
        ("a O\n", 1, "1 tab-separated column(s)"),
        ("a\tO\nb\tI-Disease\n", 2, "bad BIO sequence"),
        ("a\tB-Gene\n", 1, "unknown entity type 'Gene'"),
        ("a\tX-Disease\n", 1, "not a BIO tag"),
        ("a\tB-Disease\n\nb\tI-Disease\n", 3, "bad BIO sequence"),
    ],
)
def test_malformed_file_names_file_line_and_field(tmp_path, content, line, fragment):
    path = tmp_path / "bad.tsv"
    path.write_text(content)
    with pytest.raises(DataError) as info:
        read_conll(path, entity_types={"Disease"})
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: ")
    assert fragment in message


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n\n")
    with pytest.raises(DataError, match="empty.tsv: no sentences"):
        read_conll(empty)
    with pytest.raises(DataError, match="nope.tsv: file not found"):
        read_conll(tmp_path / "nope.tsv")


def test_user_supplied_eval_file_is_used(tmp_path):
    path = tmp_path / "mine.tsv"
    path.write_text("Cancer\tB-Disease\nhere\tO\n")
    data = load(LoadOptions(paths={"eval": path}))
    assert len(data.examples) == 1 and data.examples[0].inputs["text"] == "Cancer here"


def test_invalid_utf8_names_file_and_line(tmp_path):
    from evalpipe.data.conll import read_conll
    from evalpipe.data.errors import DataError

    path = tmp_path / "test.tsv"
    path.write_bytes(b"Cancer\tB-Disease\n\ncaf\xe9\tO\n")
    with pytest.raises(DataError, match=r"test.tsv:3: not valid UTF-8: byte 0xe9 at column 4"):
        read_conll(path)
