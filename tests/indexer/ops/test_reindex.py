"""`reindex` with another encoder: a new generation built beside the live one, searches on the
old version until the switch, doc ids kept, a killed reindex resumes to the same result; its
vectors are files of the live store's folder, which its base rescores from."""

import json
import multiprocessing
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from crash_kit import write_corpus

import indexer.indexing.steps as steps
from flows.reindex import run_reindex
from indexer.encode.encoder import load_encoder
from indexer.errors import ProvenanceMismatch
from indexer.index.version_files import named_row_files
from indexer.indexing.run import run_index
from indexer.ops.consistency import check_store
from indexer.query.searcher import Searcher
from indexer.records.versions import current_version
from indexer.store import Store
from indexer.store.vector_files import on_disk

pytestmark = pytest.mark.heavy


def search_ids(cfg, query, k=5):
    with Store(cfg.store.path, read_only=True) as store:
        return [h.id for h in Searcher(cfg, store).search(query, k, mode="dense")]


def _child(cfg, crash_at, batch_size=2):
    import faiss
    import torch

    torch.set_num_threads(1)  # no OpenMP pool in a forked child: the parent's threads are gone
    faiss.omp_set_num_threads(1)
    os.environ["BERTINDEX_CRASH_AT"] = crash_at
    run_reindex(cfg, batch_size=batch_size)


def test_reindex_switches_encoder_and_survives_kills(tiny_config, small_corpus, tmp_path):
    run_index([str(small_corpus)], tiny_config)
    with Store(tiny_config.store.path) as store:
        doc_ids = store.reads.document_hashes()
        store.con.execute(
            "INSERT INTO annotations (doc_id, head, head_version, label, probability) "
            "VALUES (?, 'topic', 'h1', 'pets', 0.9)",
            [min(doc_ids)],
        )
    old_hits = search_ids(tiny_config, "parse command line arguments in python")
    new_cfg = tiny_config.with_overrides(**{"model.pooling": "cls"})
    load_encoder.cache_clear()

    ctx = multiprocessing.get_context("fork")
    for point in ("batch.before_commit:2", "reindex.before_swap"):
        proc = ctx.Process(target=_child, args=(new_cfg, point))
        proc.start()
        proc.join(60)
        assert proc.exitcode == -signal.SIGKILL, point
        # until the switch, searches with the old encoder work on the old version
        assert search_ids(tiny_config, "parse command line arguments in python") == old_hits
        with pytest.raises(ProvenanceMismatch):
            search_ids(new_cfg, "cat")

    summary = run_reindex(new_cfg, batch_size=2)
    assert summary["mode"] == "new_generation" and summary["documents"] == 5
    assert summary["encoded"] == 0  # resumed: the killed runs had encoded everything
    assert search_ids(new_cfg, "parse command line arguments in python")[0] == "b1"
    with pytest.raises(ProvenanceMismatch):
        search_ids(tiny_config, "cat")
    with Store(new_cfg.store.path, read_only=True, snapshot=False) as store:
        assert store.reads.document_hashes() == doc_ids  # same doc ids: the keyword index holds
        assert store.vectors.provenance().pooling == "cls"
        assert store.counts.annotations() == {"topic": 1}  # annotations follow the documents
    assert check_store(new_cfg).problems == []

    # the same as a clean reindex of a fresh store
    clean = new_cfg.with_overrides(**{"store.path": str(tmp_path / "clean")})
    clean_old = clean.with_overrides(**{"model.pooling": "mean"})
    run_index([str(small_corpus)], clean_old)
    proc = ctx.Process(target=_child, args=(clean, "reindex.before_pointer"))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL  # store file swapped, CURRENT not yet moved
    assert search_ids(clean_old, "parse command line arguments in python") == old_hits
    assert run_reindex(clean)["mode"] == "rebuild"  # finishes the switch from stored vectors
    assert check_store(new_cfg).differences(check_store(clean)) == []

    again = run_reindex(new_cfg)  # same encoder now: the index is rebuilt, nothing encoded
    assert (again["mode"], again["encoded"]) == ("rebuild", 0)
    assert check_store(new_cfg).problems == []


def _base_files(cfg) -> set[str]:
    path = Path(cfg.store.path) / "index" / current_version(cfg.store.path) / "provenance.json"
    return {r["name"] for r in json.loads(path.read_text())["base"]["rows"] or []}


def test_reindex_writes_its_vectors_as_files_of_the_live_store(tiny_config, tmp_path, monkeypatch):
    """The next generation's full batches keep their vectors in files written into the live
    store's folder. Killed before the switch, they stay there through the live store's own index
    runs (whose collection deletes unrecorded files); after the switch the new base rescores
    from them (no codes of its own), and the next run collects what nothing records or reads."""
    monkeypatch.setattr(steps, "VECTOR_FILE_MIN_ROWS", 50)
    corpus = write_corpus(tmp_path / "docs.jsonl", 400, seed=3)
    cfg = tiny_config.with_overrides(**{"index.spec": "IVF4,PQ8x4fs,Refine(SQfp16)"})
    run_index([str(corpus)], cfg, batch_size=100)
    live = Path(cfg.store.path)
    old_files = set(on_disk(live))
    assert old_files and _base_files(cfg) == old_files
    new_cfg = cfg.with_overrides(**{"model.pooling": "cls"})
    load_encoder.cache_clear()

    ctx = multiprocessing.get_context("fork")
    for point in ("batch.before_commit:2", "reindex.before_swap"):
        proc = ctx.Process(target=_child, args=(new_cfg, point, 100))
        proc.start()
        proc.join(120)
        assert proc.exitcode == -signal.SIGKILL, point
        written = set(on_disk(live)) - old_files
        assert written, point  # the generation's files, in the live store's folder
        run_index([str(corpus)], cfg, batch_size=100)  # the live store's run collects files
        assert written <= set(on_disk(live)), point

    assert run_reindex(new_cfg, batch_size=100)["encoded"] == 0  # resumed
    assert not (live / "generations").exists()
    with Store(live, read_only=True, snapshot=False) as store:
        assert store.vectors.provenance().pooling == "cls"
        assert store.vectors.all_in_files() and store.vectors.missing_files() == []
        recorded = {vf.name for vf in store.vectors.files()}
    assert not recorded & old_files
    assert _base_files(new_cfg) == recorded  # rescored from the generation's files
    assert check_store(new_cfg).problems == []
    assert search_ids(new_cfg, "parse command line arguments")

    run_index([str(corpus)], new_cfg, batch_size=100)  # nothing changed: the run collects
    kept = named_row_files(live)  # the files of the bases of kept versions, the old one's too
    assert kept is not None and recorded <= kept
    assert set(on_disk(live)) == recorded | kept


def _documents_as_stored(cfg) -> dict:
    """external id -> (ingested_at, [(ordinal, start, end, tokens, vector bytes)])."""
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        rows = store.con.execute(
            "SELECT d.external_id, d.ingested_at, c.chunk_id, c.ordinal, c.start_char, "
            "c.end_char, c.n_tokens FROM documents d JOIN chunks c USING (doc_id) "
            "ORDER BY c.chunk_id"
        ).fetchall()
        vectors = store.vectors.fetch(np.array([r[2] for r in rows], np.int64))
    out: dict = {}
    for (external, ingested, _, *span), vector in zip(rows, vectors):
        out.setdefault(external, (ingested, []))[1].append((*span, vector.tobytes()))
    return out


def test_reindex_rewrites_a_store_of_vector_rows_into_files(tiny_config, tmp_path):
    """A store that keeps its vectors as rows of store.duckdb (every batch under a file's worth,
    as every store did before vector files): a same-encoder reindex copies it into a new
    generation, nothing encoded, killed once and resumed. Afterwards every vector is in files,
    and each document keeps its chunks, its vectors bit for bit and when it was taken in."""
    corpus = write_corpus(tmp_path / "docs.jsonl", 5000, seed=4)  # a stream of several reads
    run_index([str(corpus)], tiny_config, batch_size=500)  # every batch's vectors as rows
    before = _documents_as_stored(tiny_config)
    assert len({ingested for ingested, _ in before.values()}) > 1  # batches committed apart
    with Store(tiny_config.store.path, read_only=True, snapshot=False) as store:
        assert store.vectors.rows_kept() == store.vectors.count() >= 5000
        assert store.vectors.files() == []
    hits = search_ids(tiny_config, "parse command line arguments", k=10)

    ctx = multiprocessing.get_context("fork")
    proc = ctx.Process(target=_child, args=(tiny_config, "batch.before_commit:2", 1000))
    proc.start()
    proc.join(120)
    assert proc.exitcode == -signal.SIGKILL
    assert search_ids(tiny_config, "parse command line arguments", k=10) == hits  # old version

    summary = run_reindex(tiny_config, batch_size=1000)
    assert (summary["mode"], summary["documents"], summary["encoded"]) == ("rewrite", 5000, 0)
    assert not (Path(tiny_config.store.path) / "generations").exists()
    assert _documents_as_stored(tiny_config) == before
    with Store(tiny_config.store.path, read_only=True, snapshot=False) as store:
        assert store.vectors.rows_kept() == 0 and store.vectors.all_in_files()
        assert store.vectors.missing_files() == []
        assert store.con.execute("SELECT count(*) FROM vectors").fetchone()[0] == 0
    assert check_store(tiny_config).problems == []
    assert search_ids(tiny_config, "parse command line arguments", k=10) == hits
    assert run_reindex(tiny_config)["mode"] == "rebuild"  # kept once, in files: only rebuilt
