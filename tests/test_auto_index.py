"""`index.spec: auto`: the choice by size and memory budget, and nprobe tuning to a recall target
on synthetic clustered vectors (seeded)."""

import json
from pathlib import Path

import faiss
import numpy as np
import pytest

from flows.index_corpus import run_index
from indexer.auto_index import choose_spec, estimate_bytes, tune
from indexer.config import IndexConfig
from indexer.errors import IndexError_
from indexer.vector_index import VectorIndex


def clustered(n, dim=32, clusters=64, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    x = centres[rng.integers(0, clusters, n)] + 0.35 * rng.normal(size=(n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_choice_follows_size_and_memory_budget():
    cfg = IndexConfig()
    assert choose_spec(50_000, 384, cfg) == "Flat"
    assert choose_spec(1_000_000, 384, cfg) == "IVF4096,Flat"
    full = estimate_bytes("IVF4096,Flat", 1_000_000, 384) / 2**20
    assert full == pytest.approx((1_000_000 * (1536 + 8) + 4096 * 1536) / 2**20)
    assert choose_spec(1_000_000, 384, IndexConfig(memory_budget_mb=full)) == "IVF4096,Flat"
    assert choose_spec(1_000_000, 384, IndexConfig(memory_budget_mb=full - 1)) == "IVF4096,SQ8"
    assert choose_spec(1_000_000, 384, IndexConfig(memory_budget_mb=300)) == "IVF4096,PQ192"
    assert choose_spec(50_000, 384, IndexConfig(memory_budget_mb=30)) == "IVF1024,SQ8"
    with pytest.raises(IndexError_, match="memory_budget_mb"):
        choose_spec(1_000_000, 384, IndexConfig(memory_budget_mb=5))


def test_tuning_reaches_the_recall_target_on_clustered_data():
    data = clustered(20_300)
    vectors, queries = data[:20_000], data[20_000:]  # same clusters; queries held out
    ids = np.arange(100, 20_100, dtype=np.int64)
    cfg = IndexConfig(flat_limit=1000, tune_sample=300, target_recall=0.95)
    spec = choose_spec(len(vectors), 32, cfg)
    assert spec == "IVF512,Flat"
    index = faiss.index_factory(32, spec, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors)
    index.add_with_ids(vectors, ids)
    record = tune(index, spec, vectors, ids, target=0.95, sample=300)
    assert record["reached"] and record["recall@10"] >= 0.95
    assert 1 < record["value"] < 512  # neither trivial nor exhaustive
    below = str(record["value"] - 1)
    assert below not in record["curve"] or record["curve"][below] < 0.95  # smallest that works
    # held-out queries (not in the index) reach about the same recall at the tuned nprobe
    _, exact = faiss.knn(queries, vectors, 10, metric=faiss.METRIC_INNER_PRODUCT)
    index.nprobe = record["value"]
    _, found = index.search(queries, 10)
    held = np.mean([len(set(ids[e]) & set(f)) / 10 for e, f in zip(exact, found)])
    assert held >= 0.92


def test_auto_index_records_tuning_in_provenance(tiny_config, small_corpus):
    cfg = tiny_config.with_overrides(**{"index.flat_limit": 0})
    summary = run_index([str(small_corpus)], cfg)
    assert summary["index"]["spec"].startswith("IVF")
    folder = Path(cfg.store.path) / "index" / summary["index"]["version"]
    info = json.loads((folder / "provenance.json").read_text())
    assert info["tuning"]["param"] == "nprobe" and info["tuning"]["reached"]
    assert info["memory_bytes"] > 0
    loaded = VectorIndex.load(cfg.store.path, cfg.index)
    assert loaded.tuning == info["tuning"]
