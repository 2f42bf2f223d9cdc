"""The review loop: strategies by hand, export over a tiny annotated store (order, filters,
reviewed documents left out, near-duplicate collapse with a hand-made grouping), import of
damaged and spreadsheet-edited files (per-row reasons, the rest kept, last duplicate wins,
deleted documents, another head's rows), human labels in search filters, reviewed documents
in the train split, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from testkit import tiny_model_config

from indexer.errors import InputError
from indexer.heads.classifier.head_type import SentenceExample
from indexer.heads.data import HeadData
from indexer.indexing.run import run_index
from indexer.records.annotations import Annotation, Label
from indexer.review import strategies as st
from indexer.review.files import read_review_file, write_review_file
from indexer.review.loop import import_rows, page_review, select_for_review
from indexer.review.training import add_reviewed
from indexer.store import Store
from search.cli.main import main

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]

NAMES = ["neg", "pos"]
# id -> (text, model label, probability): uncertain order is d3, d1, d5, d2, d4, d6
DOCS = {
    "d1": ("a calm day by the sea", "pos", 0.55),
    "d2": ("the dog slept", "neg", 0.80),
    "d3": ("prices went up again", "pos", 0.51),
    "d4": ("a great film", "pos", 0.97),
    "d5": ("the train was late", "neg", 0.60),
    "d6": ("rain all week", "neg", 0.99),
}


@pytest.fixture(scope="module")
def annotated(tiny_model_dir, tmp_path_factory):
    """A store of six documents labelled by head `clf` (and `clf2` for two of them)."""
    root = tmp_path_factory.mktemp("review")
    corpus = root / "docs.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": k, "text": t, "lang": "en" if k != "d5" else "fr"}) + "\n"
            for k, (t, _, _) in DOCS.items()
        )
    )
    config = tiny_model_config(tiny_model_dir, root / "store")
    run_index([str(corpus)], config, collection="docs")
    return config, root


@pytest.fixture
def store(annotated, tmp_path):
    """A fresh writable copy of the annotated store per test."""
    import shutil

    config, _ = annotated
    shutil.copytree(config.store.path, tmp_path / "store")
    with Store(tmp_path / "store") as s:
        docs = s.con.execute(
            "SELECT doc_id, text, content_hash, external_id FROM documents ORDER BY doc_id"
        ).fetchall()
        s.annotations.write(
            [d[:3] for d in docs],
            [
                Annotation(labels=[Label(DOCS[d[3]][1], DOCS[d[3]][2], "clf", 1 - DOCS[d[3]][2])])
                for d in docs
            ],
            {"clf": "v1"},
        )
        other = {"d1": "neg", "d4": "pos"}  # clf2 disagrees on d1 only
        picked = [d for d in docs if d[3] in other]
        s.annotations.write(
            [d[:3] for d in picked],
            [Annotation(labels=[Label(other[d[3]], 0.7, "clf2")]) for d in picked],
            {"clf2": "v1"},
        )
        s.reviews.record_heads(
            [
                ("clf", "classifier", NAMES, "heads/clf", "v1"),
                ("clf2", "classifier", NAMES, "heads/clf2", "v1"),
                ("ner", "ner", ["O", "B-LOC", "I-LOC"], "heads/ner", "v1"),
            ]
        )
        yield s


def ids(rows):
    return [r["id"] for r in rows]


def doc_id(store, external_id):
    return store.documents.existing("docs", [external_id])[external_id].doc_id


# ---- strategies ------------------------------------------------------------------------------


def test_strategy_orders_by_hand():
    top = np.array([0.9, 0.5, 0.7, 0.5])
    assert st.uncertain_order(top).tolist() == [1, 3, 2, 0]
    # three labels: 0.5 vs 0.45 is closer than 0.5 vs 0.1
    assert st.margin_order(np.array([0.5, 0.5, 0.9]), np.array([0.1, 0.45, 0.05])).tolist() == [
        1,
        0,
        2,
    ]
    # unknown runner-up -> 1 - top (exact for two labels)
    np.testing.assert_allclose(
        st.margins(np.array([0.8, 0.6]), np.array([np.nan, 0.3])), [0.6, 0.3]
    )
    assert st.disagree_order(
        ["a", "b", "a"], ["a", "a", "b"], np.array([0.9, 0.9, 0.6]), np.array([0.9, 0.8, 0.6])
    ).tolist() == [2, 1]
    assert sorted(st.random_order(5, 1).tolist()) == list(range(5))
    assert st.random_order(5, 1).tolist() == st.random_order(5, 1).tolist()
    assert st.collapse_groups([5, 3, 7, 1, 9], {5: 100, 7: 100, 1: 200, 9: 200}) == [5, 3, 1]
    with pytest.raises(InputError, match="choose one of uncertain, margin"):
        st.check_strategy("confident")


# ---- export ----------------------------------------------------------------------------------


def test_export_orders_filters_and_skips_reviewed(store):
    rows = select_for_review(store, "clf", "uncertain", n=3)
    assert ids(rows) == ["d3", "d1", "d5"]
    assert rows[0]["predicted"] == "pos" and rows[0]["score"] == 0.51 and rows[0]["label"] == ""
    assert rows[0]["text"] == DOCS["d3"][0] and rows[0]["collection"] == "docs"
    assert ids(select_for_review(store, "clf", "margin", n=6)) == [
        "d3",
        "d1",
        "d5",
        "d2",
        "d4",
        "d6",
    ]
    assert ids(select_for_review(store, "clf", "uncertain", n=6, where=[("lang", "fr")])) == ["d5"]
    assert ids(select_for_review(store, "clf", "disagree", n=5, other="clf2")) == ["d1"]
    assert len(select_for_review(store, "clf", "random", n=6, seed=3)) == 6
    page_review(store, "clf", doc_id(store, "d3"), "neg", reviewer="ann")
    assert ids(select_for_review(store, "clf", "uncertain", n=2)) == ["d1", "d5"]  # d3 reviewed
    with pytest.raises(InputError, match="head 'nope' has not annotated"):
        select_for_review(store, "nope")
    with pytest.raises(InputError, match="needs --other"):
        select_for_review(store, "clf", "disagree")


def test_export_collapses_near_duplicates_with_a_grouping(store, monkeypatch):
    groups = {doc_id(store, "d3"): 1, doc_id(store, "d1"): 1, doc_id(store, "d5"): 1}
    monkeypatch.setattr(
        store.dedup,
        "groups_of",
        lambda ids: {d: groups[d] for d in ids if d in groups},
        raising=False,
    )
    assert ids(select_for_review(store, "clf", "uncertain", n=3)) == ["d3", "d2", "d4"]


def test_review_file_round_trip_csv_and_jsonl(tmp_path):
    rows = [
        {
            "id": "x,1",
            "collection": "c",
            "head": "h",
            "predicted": "pos",
            "score": 0.5,
            "label": "",
            "title": None,
            "text": 'say "hi",\nthen go',
        }
    ]
    for suffix in (".csv", ".jsonl"):
        path = tmp_path / f"r{suffix}"
        write_review_file(path, rows)
        back = list(read_review_file(path))
        assert [r.fields["id"] for r in back] == ["x,1"] and back[0].fields["text"] == rows[0][
            "text"
        ]
    with pytest.raises(InputError, match=r"\.jsonl or \.csv"):
        write_review_file(tmp_path / "r.xlsx", rows)


# ---- import ----------------------------------------------------------------------------------


def test_import_checks_every_row_and_keeps_the_rest(store, tmp_path):
    path = tmp_path / "labels.jsonl"
    lines = [
        {"id": "d1", "label": "neg", "reviewer": "ann", "reviewed_at": "2026-11-30T10:00:00Z"},
        {"id": "d2", "label": "maybe"},  # unknown label
        {"label": "pos"},  # no id
        {"id": "gone", "label": "pos"},  # not in the store
        {"id": "d4", "head": "clf2", "label": "pos"},  # another head's row
        "not json",
        {"id": "d5", "label": ""},  # left empty
        {"id": "d6", "label": "pos"},
        {"id": "d6", "label": "neg"},  # duplicate: last wins
        {"id": "d2", "label": "pos", "reviewed_at": "yesterday"},
        {"id": ["d3"], "label": "pos"},  # not text
    ]
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    before = store.reviews.count("clf")
    s = import_rows(store, read_review_file(path), "clf", "labels.jsonl", reviewer="bob")
    reasons = {r["line"]: r["reason"] for r in s.rejected}
    assert sorted(reasons) == [2, 3, 4, 5, 6, 10, 11]
    assert "'id' must be text, not list" in reasons[11]
    assert "not one of head 'clf''s labels ['neg', 'pos']" in reasons[2]
    assert "no 'id'" in reasons[3]
    assert "no document 'gone'" in reasons[4] and "deleted since the export" in reasons[4]
    assert "--head clf2" in reasons[5]
    assert "broken JSON" in reasons[6]
    assert "ISO date-time" in reasons[10]
    assert (s.rows, s.stored, s.unlabelled, s.changed) == (11, 2, 1, 0)
    assert s.duplicates == [{"id": "d6", "lines": [8, 9], "kept": 9}]
    assert store.reviews.count("clf") == before + 2
    d1, d6 = doc_id(store, "d1"), doc_id(store, "d6")
    assert store.reviews.current_labels("clf", [d1, d6]) == {d1: "neg", d6: "neg"}
    row = store.con.execute(
        "SELECT reviewer, reviewed_at::VARCHAR, source FROM reviews WHERE doc_id = ?", [d1]
    ).fetchone()
    assert row == ("ann", "2026-11-30 10:00:00", "labels.jsonl")
    # again: nothing new; then a changed label is appended, the earlier one kept in history
    assert import_rows(store, read_review_file(path), "clf", "labels.jsonl").stored == 0
    path.write_text(json.dumps({"id": "d1", "label": "pos"}) + "\n")
    again = import_rows(store, read_review_file(path), "clf", "labels.jsonl")
    assert (again.stored, again.changed) == (1, 1)
    assert store.reviews.current_labels("clf", [d1]) == {d1: "pos"}
    assert store.reviews.count("clf") == before + 3


def test_import_a_spreadsheet_csv_bom_crlf_quotes(store, tmp_path):
    path = tmp_path / "sheet.csv"
    body = (
        "id,collection,text,label,reviewer\r\n"
        'd1,docs,"a calm day, by the ""sea""\r\nsecond line",pos,"Smith, Ann"\r\n'
        "d2,docs,x,neg,\r\n"
        "d9,docs,x,pos,\r\n"
        ",,,,\r\n"
    )
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    s = import_rows(store, read_review_file(path), "clf", "sheet.csv", reviewer="env-user")
    assert (s.stored, s.rejected_total) == (2, 1)
    assert s.rejected[0]["line"] == 5 and s.rejected[0]["id"] == "d9"
    who = dict(store.con.execute("SELECT label, reviewer FROM reviews").fetchall())
    assert who == {"pos": "Smith, Ann", "neg": "env-user"}


def test_import_refusals_for_the_whole_file(store, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("doc,label\nd1,pos\n")
    with pytest.raises(InputError, match="'id' and 'label'"):
        list(read_review_file(path))
    path.write_bytes(b"id,label\nd1,\xff\n")
    with pytest.raises(InputError, match="not UTF-8"):
        list(read_review_file(path))
    with pytest.raises(InputError, match="ner head"):
        import_rows(store, [], "ner", "x")
    with pytest.raises(InputError, match="has not annotated"):
        import_rows(store, [], "nobody", "x")


def test_deleted_documents_are_rejected_and_lose_nothing_else(store, tmp_path):
    rows = select_for_review(store, "clf", "uncertain", n=2)
    store.documents.delete("docs", keep=[k for k in DOCS if k != "d3"])
    for r in rows:
        r["label"] = "neg"
    path = tmp_path / "r.jsonl"
    write_review_file(path, rows)
    s = import_rows(store, read_review_file(path), "clf", "r.jsonl")
    assert s.stored == 1 and s.rejected[0]["id"] == "d3"


# ---- search filters and annotate -------------------------------------------------------------


def test_label_filters_prefer_human_labels_and_annotate_never_overwrites(store):
    d1, d2 = doc_id(store, "d1"), doc_id(store, "d2")
    page_review(store, "clf", d1, "neg")  # model said pos
    pos = set(store.filters.doc_ids(labels=[("clf", "pos")]).tolist())
    neg = set(store.filters.doc_ids(labels=[("clf", "neg")]).tolist())
    assert d1 in neg and d1 not in pos and d2 in neg
    assert store.filters.doc_ids(labels=[("clf", "neg")], human=True).tolist() == [d1]
    # the model labels the document again: the person's label still decides
    docs = store.con.execute(
        "SELECT doc_id, text, content_hash FROM documents WHERE doc_id = ?", [d1]
    ).fetchall()
    store.annotations.write(docs, [Annotation(labels=[Label("pos", 0.99, "clf")])], {"clf": "v2"})
    assert store.reviews.current_labels("clf", [d1]) == {d1: "neg"}
    assert d1 not in set(store.filters.doc_ids(labels=[("clf", "pos")]).tolist())
    rid = page_review(store, "clf", d2, "pos")
    assert store.reviews.delete("clf", rid) and not store.reviews.delete("clf", rid)
    assert store.reviews.current_labels("clf", [d2]) == {}


# ---- training --------------------------------------------------------------------------------


def test_reviewed_documents_join_the_train_split_only(store, tmp_path):
    page_review(store, "clf", doc_id(store, "d1"), "neg")
    page_review(store, "clf", doc_id(store, "d2"), "pos")
    page_review(store, "clf", doc_id(store, "d4"), "pos")
    store.con.execute("UPDATE documents SET content_hash = 'changed' WHERE external_id = 'd4'")
    path = store.path
    store.close()
    data = HeadData(
        "classifier",
        NAMES,
        {
            "train": [SentenceExample("t1", "x", 0)],
            "validation": [SentenceExample("v1", DOCS["d2"][0], 1)],  # d2's text: left out
            "test": [SentenceExample("s1", "z", 0)],
        },
    )
    add_reviewed(data, path, "clf")
    assert [(e.id, e.label) for e in data.splits["train"]] == [("t1", 0), ("reviewed:d1", 0)]
    assert len(data.splits["validation"]) == len(data.splits["test"]) == 1
    assert data.reviewed == {
        "head": "clf",
        "store": str(path),
        "added_to_train": 1,
        "stale": 1,
        "in_eval": 1,
    }
    with pytest.raises(InputError, match="not in the data's labels"):
        add_reviewed(HeadData("classifier", ["a", "b"], {"train": []}), path, "clf")


# ---- CLI ------------------------------------------------------------------------------------


def test_cli_export_import_and_search_human(store, tmp_path, annotated):
    config, _ = annotated
    path = store.path
    store.close()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(config.with_overrides(**{"store.path": str(path)}).model_dump()))
    runner = CliRunner()
    out = tmp_path / "next.csv"
    r = runner.invoke(
        main,
        [
            "review",
            "export",
            "--head",
            "clf",
            "--n",
            "2",
            "--out",
            str(out),
            "--config",
            str(cfg),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["exported"] == 2
    text = out.read_text()
    assert text.splitlines()[0] == "id,collection,head,predicted,score,label,title,text"
    out.write_text(
        text.replace(",pos,0.51,,", ",pos,0.51,neg,").replace(",pos,0.55,,", ",pos,0.55,bad,")
    )
    r = runner.invoke(
        main, ["review", "import", str(out), "--head", "clf", "--config", str(cfg), "--json"]
    )
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert (summary["stored"], summary["rejected"]) == (1, 1)
    assert "rejected" in r.stderr and ":3 (d1): label 'bad'" in r.stderr
    r = runner.invoke(main, ["status", "--config", str(cfg), "--json"])  # the run log has it
    review_runs = [x for x in json.loads(r.stdout)["runs"] if x["kind"] == "review"]
    assert [x["status"] for x in review_runs] == ["completed"]
    r = runner.invoke(
        main,
        [
            "search",
            "prices",
            "--label",
            "clf=neg",
            "--human",
            "--mode",
            "keyword",
            "--config",
            str(cfg),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    hits = [json.loads(x) for x in r.stdout.splitlines()]
    assert [h["id"] for h in hits] == ["d3"]
    assert hits[0]["labels"][0]["label"] == "pos"  # the model's, kept beside the person's
    assert [(x["head"], x["label"]) for x in hits[0]["reviewed"]] == [("clf", "neg")]
    r = runner.invoke(main, ["search", "x", "--human", "--config", str(cfg)])
    assert r.exit_code == 2
    r = runner.invoke(
        main,
        [
            "review",
            "export",
            "--head",
            "clf",
            "--out",
            str(tmp_path / "a.txt"),
            "--config",
            str(cfg),
        ],
    )
    assert r.exit_code == 1 and ".jsonl or .csv" in r.output


# ---- the page's API (the browser test drives the page itself) -----------------------------


def test_review_api_answers_and_refusals(store, annotated):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from indexer.indexing.steps import sync_vector_index
    from search.error_map import install
    from search.review_page import add_review_routes

    app = FastAPI()
    install(app)
    add_review_routes(app, store.path)
    client = TestClient(app)
    path = store.path
    config = annotated[0].with_overrides(**{"store.path": str(path)})
    sync_vector_index(store, config, [], [])  # as annotate ends: the labels are published
    # the test holds the writer: the page's reads come from the published snapshot regardless
    r = client.get("/review/api/next", params={"head": "clf"})
    assert r.status_code == 200 and r.json()["document"] is not None
    label = client.post("/review/api/label", json={"head": "clf", "doc_id": 1, "label": "pos"})
    assert label.status_code == 409 and "try again" in label.json()["detail"]  # a write waits
    store.close()
    r = client.get("/review/api/next", params={"head": "clf", "skip": str(doc_id_at(path, "d3"))})
    assert r.status_code == 200
    assert r.json()["document"]["id"] == "d1" and r.json()["labels"] == NAMES
    d1 = r.json()["document"]["doc_id"]
    assert (
        client.get("/review/api/next", params={"head": "clf", "strategy": "disagree"}).status_code
        == 400
    )
    assert client.get("/review/api/next", params={"head": "clf", "skip": "1,x"}).status_code == 400
    assert client.get("/review/api/next", params={"head": "nope"}).status_code == 400
    bad = client.post("/review/api/label", json={"head": "clf", "doc_id": d1, "label": "maybe"})
    assert bad.status_code == 400 and "not one of" in bad.json()["detail"]
    gone = client.post("/review/api/label", json={"head": "clf", "doc_id": 999999, "label": "pos"})
    assert gone.status_code == 400 and "no longer in the store" in gone.json()["detail"]
    ok = client.post(
        "/review/api/label",
        json={"head": "clf", "doc_id": d1, "label": "pos", "reviewer": "kim", "session": "s" * 32},
    )
    assert ok.status_code == 200
    undo = {"head": "clf", "review_id": ok.json()["review_id"], "ticket": ok.json()["undo"]}
    assert client.post("/review/api/undo", json=undo).status_code == 403  # no session: not its
    assert client.post("/review/api/undo", json={**undo, "session": "s" * 32}).json() == {
        "undone": True
    }
    page = client.get("/review")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert client.get("/review/static/../../config.yaml").status_code == 404
    assert client.get("/review/static/review.js").status_code == 200


def doc_id_at(path, external_id):
    with Store(path) as s:
        return doc_id(s, external_id)
