"""`bertindex train classifier --reviewed HEAD`: the documents people labelled in the store
join the train split (never validation or test) and the receipt says how many."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from testkit import tiny_model_config

from indexer.indexing.run import run_index
from indexer.records.annotations import Annotation, Label
from indexer.review.loop import page_review
from indexer.store import Store
from search.cli.heads import train

pytestmark = pytest.mark.heavy


def test_train_with_reviewed_documents(tiny_bert, classifier_json, tmp_path):
    corpus = tmp_path / "docs.jsonl"
    texts = {"r1": "john loves this film", "r2": "mary hates the awful movie", "r3": "a new film"}
    corpus.write_text("".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in texts.items()))
    config = tiny_model_config(tiny_bert, tmp_path / "store")
    run_index([str(corpus)], config, collection="docs")
    with Store(config.store.path) as store:
        docs = store.con.execute(
            "SELECT doc_id, text, content_hash FROM documents ORDER BY doc_id"
        ).fetchall()
        store.annotations.write(
            docs, [Annotation(labels=[Label("pos", 0.6, "clf")])] * 3, {"clf": "v1"}
        )
        store.reviews.record_heads([("clf", "classifier", ["neg", "pos"], "x", "v1")])
        page_review(store, "clf", docs[0][0], "pos")
        page_review(store, "clf", docs[1][0], "neg")
    items = len(json.loads(classifier_json.read_text())["train"])
    out = tmp_path / "head"
    result = CliRunner().invoke(
        train,
        [
            "classifier",
            "--data",
            str(classifier_json),
            "--format",
            "splits",
            "--out",
            str(out),
            "--base",
            str(tiny_bert),
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--head-only",
            "--reviewed",
            "clf",
            "--store",
            str(config.store.path),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["reviewed"]["added_to_train"] == 2
    receipt = json.loads((out / "run-receipt.json").read_text())
    assert receipt["reviewed"] == {
        "head": "clf",
        "store": str(config.store.path),
        "added_to_train": 2,
        "stale": 0,
        "in_eval": 0,
    }
    assert receipt["data"]["train"]["examples"] == items + 2
    doc = json.loads(classifier_json.read_text())
    assert receipt["data"]["validation"]["examples"] == len(doc["validation"])
    result = CliRunner().invoke(
        train,
        [
            "classifier",
            "--data",
            str(classifier_json),
            "--format",
            "splits",
            "--out",
            str(tmp_path / "h2"),
            "--base",
            str(tiny_bert),
            "--reviewed",
            "nobody",
            "--store",
            str(config.store.path),
        ],
    )
    assert result.exit_code == 1 and "no reviewed labels of head 'nobody'" in result.output
