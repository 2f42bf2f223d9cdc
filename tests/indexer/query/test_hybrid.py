"""Hybrid search: fusion by hand-computed cases, the keyword index in step with the store,
`--mode` on the CLI, and the HTTP server."""

import json

import pytest
import yaml
from click.testing import CliRunner

from indexer.index import fusion
from indexer.index.keyword import KeywordIndex, query_terms, sync_keyword_index
from indexer.indexing.run import run_index
from indexer.query.hits import HIT_FIELDS
from indexer.query.searcher import Searcher
from indexer.store import Store
from search.cli.main import main

pytestmark = pytest.mark.heavy


# -- fusion ------------------------------------------------------------------------------
def test_rrf_by_hand():
    dense = [(1, 0.9), (2, 0.8), (3, 0.1)]
    keyword = [(3, 12.0), (1, 5.0)]
    fused = dict(fusion.rrf([dense, keyword], k=60))
    assert fused[1] == pytest.approx(1 / 61 + 1 / 62)
    assert fused[2] == pytest.approx(1 / 62)
    assert fused[3] == pytest.approx(1 / 63 + 1 / 61)
    assert [d for d, _ in fusion.rrf([dense, keyword], k=60)] == [1, 3, 2]
    # k=1, keyword list weighted 3: doc 3 has 1/4 + 3/2, doc 1 has 1/2 + 3/3
    assert fusion.rrf([dense, keyword], k=1, weights=[1, 3]) == [
        (3, pytest.approx(1.75)),
        (1, pytest.approx(1.5)),
        (2, pytest.approx(1 / 3)),
    ]


def test_weighted_min_max_by_hand():
    dense = [(1, 0.9), (2, 0.7), (3, 0.5)]  # normalised 1, 0.5, 0
    keyword = [(3, 20.0), (4, 10.0), (1, 0.0)]  # normalised 1, 0.5, 0
    fused = dict(fusion.weighted([dense, keyword], [0.6, 0.4]))
    assert fused == pytest.approx({1: 0.6, 2: 0.3, 3: 0.4, 4: 0.2})
    assert [d for d, _ in fusion.weighted([dense, keyword], [0.6, 0.4])] == [1, 3, 2, 4]
    # equal scores normalise to 1; an empty list contributes nothing; ties keep first-seen order
    assert fusion.weighted([[(7, 2.0), (8, 2.0)], []], [0.5, 0.5]) == [(7, 0.5), (8, 0.5)]
    with pytest.raises(ValueError):
        fusion.weighted([dense], [0.5, 0.5])


def test_zscore_by_hand():
    dense = [(1, 0.9), (2, 0.6), (3, 0.3)]  # mean 0.6, std sqrt(0.06)
    keyword = [(3, 10.0), (4, 2.0)]  # mean 6, std 4
    fused = dict(fusion.zscore([dense, keyword], [0.5, 0.5]))
    std = 0.06**0.5
    assert fused[1] == pytest.approx(0.5 * 0.6 / std)
    assert fused[2] == pytest.approx(0.5 * 0.3 / std)
    assert fused[3] == pytest.approx(0.5 * 8 / 4)
    assert fused[4] == pytest.approx(0.0)
    assert [d for d, _ in fusion.zscore([dense, keyword], [0.5, 0.5])] == [1, 3, 2, 4]
    assert fusion.zscore([[(7, 2.0), (8, 2.0)], []], [0.5, 0.5]) == [(7, 0.5), (8, 0.5)]


def test_query_terms_strip_syntax():
    assert query_terms('title:"Cats" AND +dogs -(x)') == "title cats and dogs x"
    assert query_terms("  ?!  ") == ""


# -- keyword index in step with the store ------------------------------------------------
def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _keyword_ids(cfg, query, k=10, **kw):
    with Store(cfg.store.path, read_only=True) as store:
        return [h.id for h in Searcher(cfg, store).search(query, k, mode="keyword", **kw)]


def test_keyword_index_follows_adds_changes_and_deletes(tiny_config, small_corpus, tmp_path):
    summary = run_index([str(small_corpus)], tiny_config)
    assert summary["index"]["keyword"]["added"] == 5
    assert _keyword_ids(tiny_config, "gzip") == ["b2"]
    assert _keyword_ids(tiny_config, "sitting cats") == [
        "a1"
    ]  # stemmed: sat != sitting, cats -> cat
    # change a1's text, add d1
    rows = [json.loads(line) for line in small_corpus.read_text().splitlines()]
    rows[0]["text"] = "a banana boat"
    rows.append({"id": "d1", "text": "gzip compression of command output", "kind": "code"})
    summary = run_index([str(_write(tmp_path / "v2.jsonl", rows))], tiny_config)
    assert summary["index"]["keyword"] == {
        "documents": 6,
        "added": 1,
        "updated": 1,
        "removed": 0,
        "rebuilt": False,
    }
    assert "a1" not in _keyword_ids(tiny_config, "cat")
    assert _keyword_ids(tiny_config, "boat") == ["a1"]
    assert sorted(_keyword_ids(tiny_config, "gzip")) == ["b2", "d1"]
    # a document removed from the store leaves the keyword index on the next sync
    with Store(tiny_config.store.path) as store:
        doc_id = store.con.execute(
            "SELECT doc_id FROM documents WHERE external_id = 'b2'"
        ).fetchone()[0]
        store.con.execute("DELETE FROM documents WHERE doc_id = ?", [doc_id])
        assert sync_keyword_index(store)["removed"] == 1
        assert sync_keyword_index(store) == {
            "documents": 5,
            "added": 0,
            "updated": 0,
            "removed": 0,
            "rebuilt": False,
        }
    assert _keyword_ids(tiny_config, "gzip") == ["d1"]


def test_damaged_keyword_index_is_rebuilt(tiny_config, small_corpus):
    run_index([str(small_corpus)], tiny_config)
    folder = KeywordIndex.for_store(tiny_config.store.path).folder
    (folder / "manifest.parquet").unlink()
    with Store(tiny_config.store.path) as store:
        assert sync_keyword_index(store)["rebuilt"] is True
    assert _keyword_ids(tiny_config, "gzip") == ["b2"]


def test_filters_apply_in_every_mode(tiny_config, small_corpus):
    run_index([str(small_corpus)], tiny_config)
    with Store(tiny_config.store.path, read_only=True) as store:
        searcher = Searcher(tiny_config, store)
        for mode in ("dense", "keyword", "hybrid"):
            hits = searcher.search(
                "the cat sat on the mat python", 10, where=[("kind", "code")], mode=mode
            )
            assert hits and {h.metadata["kind"] for h in hits} == {"code"}, mode
            assert searcher.search("cat", 5, collection="other", mode=mode) == []
        hybrid = searcher.search("parse command line arguments in python", 3, mode="hybrid")
        assert hybrid[0].id == "b1" and [h.rank for h in hybrid] == [1, 2, 3]


def test_hybrid_ranks_only_k_dense_documents_with_the_full_rescoring_depth(
    tiny_config, small_corpus, monkeypatch
):
    """The dense side of a hybrid search hands `search.candidates` documents to the fusion
    but asks the index to rank only the k the user wants with its full rescoring depth
    (`ranked`), the rest from its first pass: on an exact index the same hits either way."""
    from indexer.index.vector import VectorIndex

    run_index([str(small_corpus)], tiny_config)
    asked: list[tuple[int, int | None]] = []
    search = VectorIndex.search

    def spy(self, queries, k, allowed=None, ranked=None):
        asked.append((k, ranked))
        return search(self, queries, k, allowed, ranked=ranked)

    monkeypatch.setattr(VectorIndex, "search", spy)
    query = "parse command line arguments in python"
    with Store(tiny_config.store.path, read_only=True) as store:
        searcher = Searcher(tiny_config, store)
        hybrid = searcher.search(query, 3, mode="hybrid")
        assert asked and all(ranked == 3 for _, ranked in asked)
        assert max(k for k, _ in asked) > 3  # the pool stays wider: every chunk here
        asked.clear()
        searcher.search(query, 2, mode="dense")
        assert asked and all(ranked == 2 for _, ranked in asked)
        every = searcher.rank_documents([query], tiny_config.search.candidates, mode="hybrid")
        assert [m.doc_id for m in every[0][:3]] == [
            m.doc_id for m in searcher.rank_documents([query], 3, mode="hybrid")[0]
        ]
    assert hybrid[0].id == "b1"


def test_an_unfiltered_hybrid_search_runs_its_keyword_side_beside_the_dense_one(
    tiny_config, small_corpus, monkeypatch
):
    """Unfiltered, the keyword side runs on a pool thread while the dense side runs on the
    caller's (`indexer.query.sides`), with the answers of one side after the other; with a
    filter (answered through the store's one connection) both stay on the caller's thread."""
    import threading

    run_index([str(small_corpus)], tiny_config)
    threads: list[tuple[str, str]] = []
    dense, keyword = Searcher.dense_ranked, Searcher.keyword_ranked

    def on(name, method):
        def spy(self, *args, **kwargs):
            threads.append((name, threading.current_thread().name))
            return method(self, *args, **kwargs)

        return spy

    monkeypatch.setattr(Searcher, "dense_ranked", on("dense", dense))
    monkeypatch.setattr(Searcher, "keyword_ranked", on("keyword", keyword))
    query = "parse command line arguments in python"
    here = threading.current_thread().name
    with Store(tiny_config.store.path, read_only=True) as store:
        searcher = Searcher(tiny_config, store)
        together = searcher.rank_documents([query], 5, mode="hybrid")[0]
        assert dict(threads)["dense"] == here
        assert dict(threads)["keyword"].startswith("bertindex-side")
        vectors = searcher.encode_queries([query])
        depth = tiny_config.search.candidates
        fused = searcher.fuse(
            [(m.doc_id, m.score) for m in dense(searcher, vectors, depth, ranked=5)[0]],
            keyword(searcher, [query], depth)[0],
        )
        assert [h.doc_id for h in together] == [d for d, _ in fused[:5]]
        threads.clear()
        assert searcher.search(query, 5, where=[("kind", "code")], mode="hybrid")
        assert {thread for _, thread in threads} == {here}


# -- CLI ---------------------------------------------------------------------------------
@pytest.fixture
def cli_config(tiny_config, small_corpus, tmp_path):
    run_index([str(small_corpus)], tiny_config)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_config.model_dump()))
    return path


def test_cli_mode(cli_config):
    runner = CliRunner()
    for mode in ("dense", "keyword", "hybrid"):
        result = runner.invoke(
            main,
            [
                "search",
                "gzip compress",
                "--config",
                str(cli_config),
                "--mode",
                mode,
                "--json",
                "-k",
                "2",
            ],
        )
        assert result.exit_code == 0, result.output
        hits = [json.loads(line) for line in result.stdout.splitlines()]
        assert hits and hits[0]["rank"] == 1, mode
        if mode != "dense":
            assert hits[0]["id"] == "b2", mode
        # the hit of POST /search (`SearchHit.to_dict`), then the document's labels and entities
        assert all(list(h) == [*HIT_FIELDS, "labels", "entities"] for h in hits)
        if mode == "dense":
            assert all(h["keyword"] is None and h["dense"] == h["score"] for h in hits)
        if mode == "keyword":
            assert all(h["dense"] is None and h["keyword"] == h["score"] for h in hits)
        if mode == "hybrid":  # b2 is both sides' best: it has both scores
            assert hits[0]["dense"] is not None and hits[0]["keyword"] is not None
    result = runner.invoke(main, ["search", "gzip", "--config", str(cli_config), "--mode", "bm25"])
    assert result.exit_code == 2
    result = runner.invoke(
        main, ["search", "zebra", "--config", str(cli_config), "--mode", "keyword", "--json"]
    )
    assert result.exit_code == 0 and result.stdout == ""


# -- server ------------------------------------------------------------------------------
def test_server_endpoints(tiny_config, small_corpus):
    from fastapi.testclient import TestClient

    from search.server import create_app

    run_index([str(small_corpus)], tiny_config)
    with Store(tiny_config.store.path, read_only=True) as store:
        client = TestClient(create_app(Searcher(tiny_config, store), max_body_bytes=512))
        assert store.vectors.count() == 7  # c1 is chunked into 3 windows
        health = client.get("/health").json()  # open: it says nothing about the store
        assert health["status"] == "ok" and "store" not in health and "vectors" not in health
        answer = client.post("/search", json={"query": "gzip", "k": 2, "mode": "keyword"})
        assert answer.status_code == 200
        assert [h["id"] for h in answer.json()["hits"]] == ["b2"]
        filtered = client.post("/search", json={"query": "the cat", "where": {"kind": "code"}})
        assert {h["metadata"]["kind"] for h in filtered.json()["hits"]} == {"code"}
        assert client.post("/search", json={"query": "x" * 600}).status_code == 413
        assert client.post("/search", json={"query": "cat", "k": 0}).status_code == 422
        assert client.post("/search", json={"query": "cat", "mode": "bm25"}).status_code == 422
        assert client.post("/search", json={"query": "cat", "drop": 1}).status_code == 422


def test_cli_search_through_a_real_server(tiny_config, small_corpus):
    import threading
    import time

    import uvicorn

    from search.client import remote_search
    from search.server import create_app

    run_index([str(small_corpus)], tiny_config)
    with Store(tiny_config.store.path, read_only=True) as store:
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(Searcher(tiny_config, store)),
                host="127.0.0.1",
                port=0,
                log_level="warning",
            )
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        try:
            assert [h.id for h in remote_search(url, "gzip", 2, mode="keyword")] == ["b2"]
            result = CliRunner().invoke(
                main, ["search", "gzip", "--server", url, "--mode", "keyword", "--json"]
            )
            assert result.exit_code == 0, result.output
            assert json.loads(result.stdout.splitlines()[0])["id"] == "b2"
        finally:
            server.should_exit = True
            thread.join(5)
    down = CliRunner().invoke(main, ["search", "gzip", "--server", url])
    assert down.exit_code == 1 and "cannot reach" in down.stderr


def test_eval_beir_reports_each_mode(tiny_config, tmp_path):
    folder = tmp_path / "mini"
    (folder / "qrels").mkdir(parents=True)
    docs = [
        {"_id": "d1", "title": "cats", "text": "the cat sat on the mat"},
        {"_id": "d2", "title": "code", "text": "parse command line arguments in python"},
        {"_id": "d3", "title": "", "text": "compress a file with gzip"},
    ]
    _write(folder / "corpus.jsonl", docs)
    _write(
        folder / "queries.jsonl",
        [{"_id": "q1", "text": "gzip a file"}, {"_id": "q2", "text": "cat on a mat"}],
    )
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td3\t1\nq2\td1\t1\n")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config.model_dump()))
    result = CliRunner().invoke(
        main,
        [
            "eval",
            "beir",
            str(folder),
            "--config",
            str(config),
            "--mode",
            "keyword",
            "--mode",
            "hybrid",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    assert set(scores["modes"]) == {"keyword", "hybrid"} and scores["queries"] == 2
    assert scores["modes"]["keyword"]["ndcg@10"] == pytest.approx(1.0)


def test_qrels_with_or_without_a_header(tmp_path):
    from indexer.errors import InputError
    from indexer.evaluation.beir import read_qrels

    plain = tmp_path / "plain.tsv"
    plain.write_text("q1\td1\t2\nq1\td2\t0\nq2\td3\t1\n")
    headed = tmp_path / "headed.tsv"
    headed.write_text("qid\tdocid\trelevance\n" + plain.read_text())
    expected = {"q1": {"d1": 2, "d2": 0}, "q2": {"d3": 1}}
    assert read_qrels(plain) == read_qrels(headed) == expected  # nothing dropped, nothing added
    bad = tmp_path / "bad.tsv"
    bad.write_text("q1\td1\t1\nq2\td2\tvery\n")
    with pytest.raises(InputError, match=r"bad.tsv:2: expected .* integer score"):
        read_qrels(bad)


@pytest.mark.slow
def test_scifact_hybrid_beats_both_halves():
    """SciFact's BEIR test split against its published scores, each abstract cut at 256 tokens
    as MTEB scored the model (`--long-documents truncate`): the dense side is the model's
    published 0.645 (within 0.005 either way; 0.6442 here), the keyword side BM25's (BEIR
    paper), and the hybrid default (weighted fusion, the dense weight the index run tunes on
    the store's own pseudo-queries) beats both and reaches 0.70 (0.7103 here).

    Truncated, not the default overlapping windows: the windows encode SciFact's long
    abstracts 1.7 times over (9,981 windows, 2.06M tokens against 1.24M), ~2 min more of one
    core in every `make test`, and the published score is of the truncated text. The
    windowed figures (dense 0.6538, hybrid 0.7116; `docs/benchmarks.md`) come from `bertindex
    eval beir ../shared/data/scifact`; windowing itself is tested on small models
    (tests/indexer/ingest/test_chunking.py), and the encoder's equality with
    sentence-transformers' own vectors in tests/indexer/evaluation/test_reference.py."""
    from testkit import require_shared

    folder = require_shared("scifact")
    result = CliRunner().invoke(
        main, ["eval", "beir", str(folder), "--long-documents", "truncate", "--json"]
    )
    assert result.exit_code == 0, result.output
    modes = json.loads(result.stdout)["modes"]
    assert abs(modes["keyword"]["ndcg@10"] - 0.665) <= 0.01  # BEIR paper BM25
    assert abs(modes["dense"]["ndcg@10"] - 0.645) <= 0.005  # MTEB all-MiniLM-L6-v2
    assert modes["hybrid"]["ndcg@10"] >= 0.70
    assert modes["hybrid"]["ndcg@10"] > max(modes["dense"]["ndcg@10"], 0.665)


@pytest.mark.slow
def test_msmarco_subset_default_holds_against_the_better_half():
    """A collection the default was not tuned on (web questions, qrels without a header):
    the default mode is never more than 0.005 nDCG@10 below the better of its halves."""
    from testkit import require_shared

    folder = require_shared("msmarco-subset")
    result = CliRunner().invoke(main, ["eval", "beir", str(folder), "--json"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    modes = scores["modes"]
    assert scores["queries"] == 43 and modes["hybrid"]["queries"] == 43  # all judged queries
    assert (
        modes["hybrid"]["ndcg@10"]
        >= max(modes["dense"]["ndcg@10"], modes["keyword"]["ndcg@10"]) - 0.005
    )
