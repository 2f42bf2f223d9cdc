"""Store + FAISS index through the library (no Prefect): ids round-trip, re-indexing is
incremental, filters work inside the search, provenance is enforced."""

import json
import shutil

import numpy as np
import pytest

from indexer.encode.encoder import load_encoder
from indexer.errors import ProvenanceMismatch, StoreError
from indexer.index.vector import VectorIndex
from indexer.indexing.run import Steps, run_index
from indexer.indexing.steps import commit_batch
from indexer.query.searcher import Searcher
from indexer.store import Store


def search(cfg, query, **kw):
    with Store(cfg.store.path, read_only=True) as store:
        return Searcher(cfg, store).search(query, **kw)


def test_index_then_each_document_finds_itself_first(tiny_config, small_corpus):
    summary = run_index([str(small_corpus)], tiny_config)
    assert (summary["read"], summary["encoded"], summary["rejected"]) == (5, 5, 0), summary[
        "rejections"
    ]
    assert summary["chunks"] > 5  # the long document became several windows
    for line in small_corpus.read_text().splitlines():
        row = json.loads(line)
        hits = search(tiny_config, row["text"], k=3)
        assert hits[0].id == row["id"]
        assert hits[0].score == pytest.approx(1.0, abs=1e-4) or row["kind"] == "long"
        assert len({h.id for h in hits}) == len(hits)  # a document appears once


def test_faiss_ids_are_store_chunk_ids(tiny_config, small_corpus):
    run_index([str(small_corpus)], tiny_config)
    with Store(tiny_config.store.path, read_only=True, snapshot=False) as store:
        index = VectorIndex.load(store.path, tiny_config.index)
        stored_ids = store.vectors.chunk_ids()
        assert index.ntotal == len(stored_ids)
        for ids, vectors in store.vectors.iter_batches():
            _, found = index.search(vectors, 1)
            np.testing.assert_array_equal(found[:, 0], ids)


def test_reindex_skips_unchanged_and_replaces_changed(tiny_config, small_corpus, tmp_path):
    run_index([str(small_corpus)], tiny_config)
    again = run_index([str(small_corpus)], tiny_config)
    assert (again["encoded"], again["skipped_unchanged"], again["index"]["version"]) == (0, 5, None)
    rows = [json.loads(line) for line in small_corpus.read_text().splitlines()]
    rows[0]["text"] = "a green train to the sea"
    rows.append({"id": "d9", "text": "a slow car", "kind": "new", "lang": "en"})
    small_corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    third = run_index([str(small_corpus)], tiny_config)
    assert (third["encoded"], third["skipped_unchanged"]) == (2, 4)
    assert search(tiny_config, "a green train to the sea", k=1)[0].id == "a1"
    with Store(tiny_config.store.path, read_only=True) as store:
        assert store.counts.documents() == 6
        index = VectorIndex.load(store.path, tiny_config.index)
        assert index.ntotal == store.counts.chunks()


def _stored_rows(cfg) -> dict:
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        rows = store.con.execute(
            "SELECT external_id, title, text, metadata, content_hash, ingested_at FROM documents"
        ).fetchall()
    return {r[0]: r[1:] for r in rows}


def test_a_changed_text_and_changed_metadata_are_written_over_the_stored_rows(
    tiny_config, small_corpus
):
    """A batch's changed documents and metadata-only changes are written in one statement each
    (an UPDATE from the batch's rows): each row gets its own new values, no other row moves,
    and only a re-encoded document counts as taken in again."""
    run_index([str(small_corpus)], tiny_config)
    before = _stored_rows(tiny_config)
    rows = [json.loads(line) for line in small_corpus.read_text().splitlines()]
    rows[0]["text"] = "a green train to the sea"
    rows[1]["kind"] = "animal"  # the text as it was: metadata only
    rows[2]["text"], rows[2]["title"] = "argparse reads the command line", "argparse"
    small_corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = run_index([str(small_corpus)], tiny_config)
    assert (summary["encoded"], summary["skipped_unchanged"]) == (2, 3)
    after = _stored_rows(tiny_config)
    first, second, third = (rows[i]["id"] for i in range(3))
    assert after[first][1] == "a green train to the sea" and after[first][3] != before[first][3]
    assert after[first][4] > before[first][4]  # taken in again
    assert json.loads(after[second][2])["kind"] == "animal"
    assert after[second][1] == before[second][1] and after[second][3:] == before[second][3:]
    assert after[third][:2] == ("argparse", "argparse reads the command line")
    assert {k: v for k, v in after.items() if k not in (first, second, third)} == {
        k: v for k, v in before.items() if k not in (first, second, third)
    }


def test_a_rerun_commits_the_few_changes_of_many_batches_together(
    tiny_config, tmp_path, monkeypatch
):
    """Batches with little to encode are held and sent together: a re-run whose changed and
    new documents are spread over 9 batches encodes and commits them once, and each document
    gets its own text's vector (new and changed ones of several batches mixed); a first run's
    full batches go one by one."""
    words = ["cat", "train", "river", "parser", "violin", "glacier", "tax", "orbit"]
    rows = [
        {"id": f"d{i}", "text": f"note {i} on the {words[i % 8]} {words[i * 7 % 8]}"}
        for i in range(400)
    ]
    corpus = tmp_path / "docs.jsonl"

    def write() -> None:
        corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))

    commits: list[int] = []

    def counting(plan, chunks, store, run_id):
        commits.append(len(plan.to_encode))
        return commit_batch(plan, chunks, store, run_id)

    write()
    run_index([str(corpus)], tiny_config, batch_size=50, steps=Steps(commit=counting))
    assert commits == [50] * 8
    changed = {3: "a green train by the sea", 160: "violins in the orbit", 391: "tax forms"}
    for i, text in changed.items():
        rows[i]["text"] = text
    rows.insert(100, {"id": "n1", "text": "a parser for glacier data"})
    rows.insert(300, {"id": "n2", "text": "river cats and the night train"})
    write()
    commits.clear()
    summary = run_index([str(corpus)], tiny_config, batch_size=50, steps=Steps(commit=counting))
    assert (summary["encoded"], summary["skipped_unchanged"], commits) == (5, 397, [5])
    wanted = {f"d{i}": text for i, text in changed.items()}
    wanted |= {"n1": "a parser for glacier data", "n2": "river cats and the night train"}
    for doc, text in wanted.items():
        hit = search(tiny_config, text, k=1, mode="dense")[0]
        assert (hit.id, hit.score) == (doc, pytest.approx(1.0, abs=1e-4))
    # held batches of long texts are sent sooner: here every ~3 batches' characters
    monkeypatch.setattr("indexer.indexing.run.MERGE_CHARS", 4_000)
    for i in (10, 210, 390):
        rows[i]["text"] += " and a coda"
    write()
    commits.clear()
    summary = run_index([str(corpus)], tiny_config, batch_size=50, steps=Steps(commit=counting))
    assert summary["encoded"] == 3 and sum(commits) == 3 and len(commits) >= 3


def test_where_and_collection_filters_apply_inside_the_search(tiny_config, small_corpus):
    run_index([str(small_corpus)], tiny_config, collection="one")
    hits = search(tiny_config, "the cat sat on the mat", k=10, where=[("kind", "code")])
    assert {h.id for h in hits} == {"b1", "b2"}
    assert search(tiny_config, "cat", k=5, where=[("kind", "nothing")]) == []
    assert search(tiny_config, "cat", k=5, collection="other") == []
    hostile = "x'; DROP TABLE documents; --"
    assert search(tiny_config, "cat", k=5, where=[(hostile, hostile)]) == []
    assert len(search(tiny_config, "cat", k=10, collection="one")) == 5


def test_missing_index_is_rebuilt_from_stored_vectors(tiny_config, small_corpus):
    run_index([str(small_corpus)], tiny_config)
    before = [h.id for h in search(tiny_config, "parse python arguments", k=5)]
    shutil.rmtree(f"{tiny_config.store.path}/index")
    summary = run_index([str(small_corpus)], tiny_config)
    assert summary["encoded"] == 0 and summary["index"]["rebuilt"]
    assert [h.id for h in search(tiny_config, "parse python arguments", k=5)] == before


def test_store_refuses_another_encoder_setup(tiny_config, small_corpus):
    run_index([str(small_corpus)], tiny_config)
    other = tiny_config.with_overrides(**{"model.pooling": "cls"})
    load_encoder.cache_clear()
    with pytest.raises(ProvenanceMismatch, match="pooling"):
        run_index([str(small_corpus)], other)
    with pytest.raises(ProvenanceMismatch, match="pooling"):
        search(other, "cat")


def test_newer_schema_is_refused(tiny_config, small_corpus):
    run_index([str(small_corpus)], tiny_config)
    with Store(tiny_config.store.path) as store:
        store.con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="newer bertindex"):
        Store(tiny_config.store.path)


def test_explicit_factory_string(tiny_config, small_corpus):
    cfg = tiny_config.with_overrides(**{"index.spec": "HNSW8"})
    run_index([str(small_corpus)], cfg)
    assert search(cfg, "the dog slept on the sofa", k=1)[0].id == "a2"
