"""`reindex` with another encoder: a new generation built beside the live one, searches on the
old version until the switch, doc ids kept, a killed reindex resumes to the same result."""

import multiprocessing
import os
import signal

import pytest

from flows.reindex import run_reindex
from indexer.encode.encoder import load_encoder
from indexer.errors import ProvenanceMismatch
from indexer.indexing.run import run_index
from indexer.ops.consistency import check_store
from indexer.query.searcher import Searcher
from indexer.store import Store

pytestmark = pytest.mark.heavy


def search_ids(cfg, query, k=5):
    with Store(cfg.store.path, read_only=True) as store:
        return [h.id for h in Searcher(cfg, store).search(query, k, mode="dense")]


def _child(cfg, crash_at):
    import torch

    torch.set_num_threads(1)
    os.environ["BERTINDEX_CRASH_AT"] = crash_at
    run_reindex(cfg, batch_size=2)


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
