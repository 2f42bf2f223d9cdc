"""Bulk annotation on the tiny random BERT: every document labelled, re-runs do nothing, a new
head version re-annotates, label/entity filters inside the search, the inbox ledger, rejected
lines, `--out` order, and long texts windowed rather than cut.

The NER head is biased to tag every word `B-LOC`, so that which documents hold an entity
(`LOC=cat`) is known by hand; the classifier is random, and is checked against the table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner
from head_kit import head_args, save_head

from flows.annotate import run_annotate
from indexer.annotate.annotator import Annotator, load_heads
from indexer.indexing.run import run_index
from indexer.query.searcher import Searcher
from indexer.store import Store
from search.cli.main import main

pytestmark = pytest.mark.heavy


def _count(store_path, sql, params=()):
    with Store(store_path) as store:
        return store.con.execute(sql, list(params)).fetchall()


def test_heads_share_one_backbone_pass(heads):
    annotator = Annotator(load_heads(head_args(heads)), dtype="fp32", device="cpu")
    assert len(annotator.groups) == 1


def test_store_every_document_labelled_rerun_noop_new_version_redoes(
    tiny_config, small_corpus, heads, tmp_path
):
    run_index([str(small_corpus)], tiny_config, "docs")
    first = run_annotate(head_args(heads), tiny_config)
    assert first["annotated"] == 5 and first["skipped"] == 0
    with Store(tiny_config.store.path) as store:  # recorded in the run log, as `status` shows
        logged = store.runs.last_of("annotate")
    assert logged["status"] == "completed" and logged["summary"]["annotated"] == 5
    store_path = tiny_config.store.path
    per_head = dict(
        _count(store_path, "SELECT head, count(DISTINCT doc_id) FROM annotated GROUP BY head")
    )
    assert per_head == {"clf": 5, "ner": 5}
    assert _count(store_path, "SELECT count(*) FROM annotations")[0][0] == 5  # one label each

    again = run_annotate(head_args(heads), tiny_config)
    assert again["annotated"] == 0 and again["skipped"] == 5

    # a retrained head (other weights) is a new version: everything is re-annotated once
    from transformers import BertForSequenceClassification

    clf = BertForSequenceClassification.from_pretrained(heads["clf"])
    with torch.no_grad():
        clf.classifier.bias.add_(1.0)
    retrained = save_head(clf, heads["clf"], tmp_path / "clf2")
    third = run_annotate([f"clf={retrained}", f"ner={heads['ner']}"], tiny_config)
    assert third["annotated"] == 5
    versions = _count(store_path, "SELECT DISTINCT head_version FROM annotations")
    assert versions == [(third["heads"]["clf"],)]


def test_search_filters_by_label_and_entity(tiny_config, small_corpus, heads, tmp_path):
    run_index([str(small_corpus)], tiny_config, "docs")
    run_annotate(head_args(heads), tiny_config)
    labels = dict(
        _count(
            tiny_config.store.path,
            "SELECT d.external_id, a.label FROM annotations a JOIN documents d USING (doc_id)",
        )
    )
    with Store(tiny_config.store.path, read_only=True) as store:
        searcher = Searcher(tiny_config, store)
        for mode in ("dense", "keyword"):
            for label in ("neg", "pos"):
                hits = searcher.search("the cat", k=10, mode=mode, labels=[("clf", label)])
                expected = {i for i, lab in labels.items() if lab == label}
                got = {h.id for h in hits}
                assert got <= expected
                if mode == "dense":
                    assert got == expected  # a filter never shortens the list below k
            hits = searcher.search("the cat", k=10, mode=mode, entities=[("LOC", "CAT")])
            assert [h.id for h in hits] == ["a1"]
            assert searcher.search("x", k=10, mode=mode, entities=[("PER", None)]) == []

    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(tiny_config.model_dump(mode="json")))
    result = CliRunner().invoke(
        main,
        [
            "search",
            "sofa",
            "--config",
            str(config_file),
            "--entity",
            "LOC=sofa",
            "--mode",
            "dense",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["id"] for r in rows] == ["a2"]
    assert rows[0]["labels"][0]["head"] == "clf"
    assert {(e["type"], e["text"]) for e in rows[0]["entities"]} >= {
        ("LOC", "sofa"),
        ("LOC", "dog"),
    }
    bad = CliRunner().invoke(main, ["search", "x", "--config", str(config_file), "--label", "clf"])
    assert bad.exit_code == 2


def test_inbox_processes_each_file_once_and_reports_bad_lines(tiny_config, heads, tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    good = ['{"id": "t1", "text": "the cat sat"}', '{"id": "t2", "text": "a dog on the rug"}']
    lines = [good[0], '{"id": "t3", "text": ', '{"id": "t4", "text": 5}', good[1]]
    (inbox / "one.jsonl").write_text("\n".join(lines) + "\n")
    first = run_annotate(head_args(heads), tiny_config, "tweets", inbox=str(inbox))
    assert first["annotated"] == 2 and first["rejected"] == 2
    assert {(Path(r["source"]).name, r["row"]) for r in first["rejections"]} == {
        ("one.jsonl", 2),
        ("one.jsonl", 3),
    }
    rejected = _count(tiny_config.store.path, "SELECT source, row_number FROM rejected ORDER BY 2")
    assert [(Path(s).name, r) for s, r in rejected] == [("one.jsonl", 2), ("one.jsonl", 3)]

    # the same bytes dropped again under another name, and a second run: nothing redone
    (inbox / "one-again.jsonl").write_bytes((inbox / "one.jsonl").read_bytes())
    second = run_annotate(head_args(heads), tiny_config, "tweets", inbox=str(inbox))
    assert second["annotated"] == 0 and second["skipped_files"] == 2
    ledger = _count(tiny_config.store.path, "SELECT path, rows, status FROM inbox_ledger")
    assert [(Path(p).name, n, s) for p, n, s in ledger] == [("one.jsonl", 4, "done")]

    # a run killed after 'started' is redone by the next run, without duplicates
    (inbox / "two.csv").write_text("id,text\nu1,the big city\nu2,\n")
    from indexer.annotate.inbox import file_hash

    with Store(tiny_config.store.path) as store:
        store.annotations.ledger_start(
            file_hash(inbox / "two.csv"), str(inbox / "two.csv"), "killed"
        )
    third = run_annotate(head_args(heads), tiny_config, "tweets", inbox=str(inbox))
    assert [f["status"] for f in third["files"] if f["path"].endswith("two.csv")] == ["redone"]
    assert third["annotated"] == 1 and third["rejected"] == 1
    counts = _count(
        tiny_config.store.path, "SELECT count(*), count(DISTINCT external_id) FROM documents"
    )
    assert counts == [(3, 3)]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_out_file_keeps_order_and_leaves_store_alone(tiny_config, heads, tmp_path, suffix):
    words = ["cat", "dog", "the mat", "python data file", "red apple"]
    rows = [
        {"id": f"r{i}", "text": " ".join([words[i % 5]] * (1 + (7 * i) % 11)), "n": i}
        for i in range(30)
    ]
    rows.insert(4, {"id": "bad", "text": None})
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / f"out{suffix}"
    summary = run_annotate(head_args(heads), tiny_config, paths=[str(src)], out=str(out))
    assert summary["annotated"] == 30 and summary["rejected"] == 1
    assert summary["rejections"][0]["row"] == 5
    if suffix == ".jsonl":
        written = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["n"] for r in written] == list(range(30))
    else:
        import pyarrow.parquet as pq

        written = pq.read_table(out).to_pylist()
        assert [json.loads(r["metadata"])["n"] for r in written] == list(range(30))
    assert [r["id"] for r in written] == [f"r{i}" for i in range(30)]
    # batching and length sorting do not change a text's labels
    alone = Annotator(
        load_heads(head_args(heads)), dtype="fp32", device="cpu", max_length=16, stride=4
    )
    for r in written[:6]:
        one = alone.annotate([r["text"]])[0]
        assert r["labels"][0]["label"] == one.labels[0].label
        assert r["labels"][0]["probability"] == pytest.approx(one.labels[0].score, abs=1e-5)
    assert not Path(tiny_config.store.path).exists()


def test_long_text_windowed_not_truncated(heads):
    annotator = Annotator(
        load_heads(head_args(heads)), dtype="fp32", device="cpu", max_length=16, stride=4
    )
    words = ["red", "apple", "green", "pear", "blue", "river", "big", "mountain"] * 6
    text = " ".join(words)  # 48 words, 16-token windows: several windows
    ann = annotator.annotate([text])[0]
    assert [e.text for e in ann.entities] == words  # every word, offsets into the whole text
    assert all(text[e.start : e.end] == e.text for e in ann.entities)
    assert len(ann.labels) == 1


def test_annotate_cli_runs_the_flow(tiny_config, small_corpus, heads, tmp_path, prefect_api):
    run_index([str(small_corpus)], tiny_config, "docs")
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(tiny_config.model_dump(mode="json")))
    args = ["annotate", "--config", str(config_file), "--json"]
    for h in head_args(heads):
        args += ["--heads", h]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["annotated"] == 5 and set(summary["heads"]) == {"clf", "ner"}
    usage = CliRunner().invoke(main, ["annotate", "--heads", "x", "--out", "o.jsonl"])
    assert usage.exit_code == 2


def test_tight_batches_and_streams_keep_every_label(heads):
    from indexer.encode.encoder import plan_batches

    lengths = [30, 29, 28, 27, 20, 19, 19, 5, 141, 40, 39, 38]
    for waste in (0.0, 0.05, 0.2):
        batches = plan_batches(lengths, 1000, waste)
        assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
        for b in batches:  # every window at most `waste` shorter than its batch's longest
            assert all(lengths[i] >= lengths[b[0]] * (1 - waste) for i in b)
    assert len(plan_batches(lengths, 1000, 0.0)) == len(set(lengths))
    assert len(plan_batches(lengths, 1000)) < len(plan_batches(lengths, 1000, 0.05))

    words = ["cat", "dog", "the mat", "python data file", "red apple", "blue river sea"]
    texts = [" ".join(words[(i + j) % 6] for j in range(1 + i % 9)) for i in range(60)]
    runs = [
        Annotator(
            load_heads(head_args(heads)),
            dtype="fp32",
            device="cpu",
            max_length=16,
            stride=4,
            batch_tokens=64,
            streams=streams,
            max_waste=waste,
        ).annotate(texts)
        for streams, waste in ((1, None), (3, 0.05), (2, 0.0))
    ]
    for other in runs[1:]:
        for a, b in zip(runs[0], other):
            assert [x.label for x in a.labels] == [x.label for x in b.labels]
            assert a.labels[0].score == pytest.approx(b.labels[0].score, abs=1e-5)
            assert [(e.start, e.end, e.type) for e in a.entities] == [
                (e.start, e.end, e.type) for e in b.entities
            ]
