"""Readers: formats, field mapping, and bad records rejected with file and row."""

import gzip
import json

import polars as pl

from indexer.ingest.formats import detect_format
from indexer.ingest.readers import FieldMap, read_batches


def records_and_rejects(path, fmt="auto", fields=None, batch_size=2):
    fields = fields or FieldMap()
    records, rejected = [], []
    for batch in read_batches(path, fmt, fields, batch_size):
        records += batch.records
        rejected += batch.rejected
    return records, rejected


def test_jsonl_bad_lines_are_rejected_and_the_rest_goes_on(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_bytes(
        b'{"id": 1, "text": "good one", "n": NaN}\n'
        b'{"id": 2, "text": ""}\n'
        b"{broken\n"
        b'{"id": 3, "text": null}\n'
        b'{"id": 1, "text": "duplicate"}\n'
        b'{"id": 4, "text": "caf\xff"}\n'
        b'{"id": 5, "text": 12}\n'
        b'{"id": 6, "title": "T", "text": "body", "meta": {"a": [1, 2]}}\n'
    )
    records, rejected = records_and_rejects(path)
    assert [r.external_id for r in records] == ["1", "6"]
    assert records[0].metadata == {"n": None}
    assert records[1].title == "T" and records[1].metadata == {"meta": {"a": [1, 2]}}
    reasons = {r.row: r.reason for r in rejected}
    assert reasons[2] == "empty text"
    assert reasons[3].startswith("broken JSON")
    assert reasons[4] == "text is null"
    assert reasons[5].startswith("duplicate id '1' (first at row 1)")
    assert reasons[6].startswith("invalid UTF-8")
    assert reasons[7].startswith("text must be a string")
    assert all(r.source == str(path) for r in rejected)


def test_csv_and_parquet_with_field_mapping(tmp_path):
    frame = pl.DataFrame(
        {"doc": ["x", "y"], "body": ["first text", "second text"], "year": [2020, 2021]}
    )
    frame.write_csv(tmp_path / "c.csv")
    frame.write_parquet(tmp_path / "c.parquet")
    fields = FieldMap(id_field="doc", text_field="body", title_field=None)
    for name in ("c.csv", "c.parquet"):
        records, rejected = records_and_rejects(tmp_path / name, fields=fields)
        assert not rejected
        assert [(r.external_id, r.text, r.row) for r in records] == [
            ("x", "first text", 1),
            ("y", "second text", 2),
        ]
        assert str(records[1].metadata["year"]) == "2021"


def test_missing_text_column_names_the_columns(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("id,body\n1,hello\n")
    records, rejected = records_and_rejects(path)
    assert not records
    assert (
        "missing text field 'text'" in rejected[0].reason and "--text-field" in rejected[0].reason
    )


def test_beir_corpus_gz_and_default_ids(tmp_path):
    (tmp_path / "qrels").mkdir()
    beir = tmp_path / "corpus.jsonl.gz"
    with gzip.open(beir, "wt") as fh:
        fh.write(json.dumps({"_id": "d1", "title": "Title", "text": "Body"}) + "\n")
    assert detect_format(beir) == "beir"
    records, _ = records_and_rejects(beir)
    assert (records[0].external_id, records[0].title) == ("d1", "Title")
    plain = tmp_path / "noid.jsonl"
    plain.write_text('{"text": "a"}\n{"text": "b"}\n')
    records, _ = records_and_rejects(plain)
    assert [r.external_id for r in records] == ["noid.jsonl:1", "noid.jsonl:2"]
