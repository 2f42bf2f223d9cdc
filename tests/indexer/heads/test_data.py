"""Readers on small files written in tmp: JSON, JSONL, Parquet, CoNLL, TweetEval."""

from __future__ import annotations

import json

import pytest

from indexer.errors import InputError
from indexer.heads.data import read_head_data, require_splits
from indexer.ingest.formats import labelled_format


def test_json_with_label_names(classifier_json):
    d = read_head_data("classifier", classifier_json, fmt="splits")
    assert d.label_names == ["neg", "pos"]
    assert set(d.splits) == {"train", "validation", "test"}
    first = d.splits["train"][0]
    assert (first.id, first.text, first.label) == ("train[0]", "a good movie", 1)


def test_jsonl_one_file_per_split(tmp_path):
    (tmp_path / "train.jsonl").write_text(
        '{"text": "x", "label": "b"}\n\n{"text": "y", "label": "a", "id": "q7"}\n'
    )
    (tmp_path / "dev.jsonl").write_text('{"text": "z", "label": "b"}\n')
    d = read_head_data("classifier", tmp_path / "train.jsonl", validation=tmp_path / "dev.jsonl")
    assert d.label_names == ["a", "b"]  # sorted names when none are given
    assert [(e.id, e.label) for e in d.splits["train"]] == [("line 1", 1), ("q7", 0)]
    assert d.splits["validation"][0].label == 1


def test_parquet_tokens(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"tokens": ["John", "lives"], "tags": ["B-PER", "O"]},
        {"tokens": ["Paris"], "tags": ["B-LOC"]},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    pq.write_table(pa.Table.from_pylist(rows[:1]), tmp_path / "v.parquet")
    d = read_head_data("ner", tmp_path / "t.parquet", validation=tmp_path / "v.parquet")
    assert d.label_names == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert d.splits["train"][0].tokens == ("John", "lives")
    assert d.splits["train"][0].tags == (3, 0)


def test_conll_docstart_and_whitespace_lines(tmp_path):
    path = tmp_path / "x.conll"
    path.write_text(
        "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\nrejects VBZ B-VP O\n   \n"
        "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n\n"
    )
    d = read_head_data("ner", path, validation=path)
    train = d.splits["train"]
    assert [e.tokens for e in train] == [("EU", "rejects"), ("Peter", "Blackburn")]
    assert [e.id for e in train] == ["line 3", "line 6"]
    names = d.label_names
    assert [names[t] for t in train[1].tags] == ["B-PER", "I-PER"]


def test_tweeteval_folder(tmp_path):
    (tmp_path / "mapping.txt").write_text("0\tnot-offensive\n1\toffensive")  # no final newline
    # U+2028 inside a tweet must not split it (str.splitlines would)
    (tmp_path / "train_text.txt").write_text("hello \u2028 there \n@user bad \n")
    (tmp_path / "train_labels.txt").write_text("0\n1\n")
    (tmp_path / "val_text.txt").write_text("ok\n")
    (tmp_path / "val_labels.txt").write_text("0\n")
    assert labelled_format(tmp_path).name == "tweeteval"
    d = read_head_data("classifier", tmp_path)
    assert d.label_names == ["not-offensive", "offensive"]
    assert [e.label for e in d.splits["train"]] == [0, 1]
    assert d.splits["train"][0].text == "hello \u2028 there "
    assert set(d.splits) == {"train", "validation"}
    with pytest.raises(InputError, match="--test"):
        require_splits(d, "test")


def test_errors_name_the_problem(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"label_names": ["a"], "train": [{"text": "x", "label": "zz"}]}))
    with pytest.raises(InputError, match=r"train\[0\].*'zz' is not one of \['a'\]"):
        read_head_data("classifier", bad, fmt="splits")
    bad.write_text(json.dumps({"train": [{"tokens": ["a"], "tags": ["PER"]}]}))
    with pytest.raises(InputError, match="BIO"):
        read_head_data("ner", bad, fmt="splits")
    bad.write_text(json.dumps({"train": [{"tokens": ["a", "b"], "tags": ["O"]}]}))
    with pytest.raises(InputError, match="2 tokens but 1 tags"):
        read_head_data("ner", bad, fmt="splits")
    bad.write_text(json.dumps({"trian": []}))
    with pytest.raises(InputError, match="unknown key"):
        read_head_data("classifier", bad, fmt="splits")
    (tmp_path / "mapping.txt").write_text("0\ta\n1\tb\n")
    (tmp_path / "train_text.txt").write_text("x\ny\n")
    (tmp_path / "train_labels.txt").write_text("0\n")
    with pytest.raises(InputError, match="2 lines but train_labels.txt has 1"):
        read_head_data("classifier", tmp_path)
    with pytest.raises(InputError, match="unknown format"):
        read_head_data("classifier", bad, fmt="xlsx")
    with pytest.raises(InputError, match="format 'csv' holds no classifier items; use train pair"):
        read_head_data("classifier", bad, fmt="csv")


def test_single_file_can_name_its_split(ner_conll):
    _, dev = ner_conll
    data = read_head_data("ner", dev, single_split="test")  # `eval head --data eng.testb`
    assert list(data.splits) == ["test"] and len(data.splits["test"]) == 3


def test_a_json_file_is_json_lines_and_a_splits_document_is_asked_for(tmp_path):
    """`.json` means JSON Lines for heads as for indexing; a document of splits read by
    name alone is refused with the way out (`--format splits`)."""
    lines = tmp_path / "train.json"
    lines.write_text('{"text": "x", "label": "b"}\n{"text": "y", "label": "a"}\n')
    data = read_head_data("classifier", lines)
    assert [e.id for e in data.splits["train"]] == ["line 1", "line 2"]
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps({"train": [{"text": "x", "label": "a"}]}))
    with pytest.raises(InputError, match="--format splits"):
        read_head_data("classifier", doc)
    doc.write_text(json.dumps({"train": [{"text": "x", "label": "a"}]}, indent=1))
    with pytest.raises(InputError, match="line 1: broken JSON.*--format splits"):
        read_head_data("classifier", doc)
