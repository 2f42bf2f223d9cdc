"""`index.spec: auto`: the choice by size and memory budget, nprobe tuning to a recall target on
synthetic clustered vectors (seeded), and filtered search and deletes on the indexes that
cannot remove ids (the auto choice's rescoring stage, HNSW)."""

import json
import math
from pathlib import Path

import faiss
import numpy as np
import pytest
from vector_kit import clustered, synthetic_provenance

from indexer.config import IndexConfig
from indexer.errors import ConfigError, VectorIndexError
from indexer.index.auto import choose_spec, estimate_bytes, resident_bytes, retarget, tune
from indexer.index.vector import VectorIndex
from indexer.indexing.run import run_index
from indexer.query.searcher import Searcher
from indexer.store import Store


def test_choice_follows_size_and_memory_budget():
    cfg = IndexConfig()
    assert choose_spec(50_000, 384, cfg) == "Flat"
    fast = "IVF4096,PQ192x4fs"
    half = f"{fast},Refine(SQfp16)"
    assert choose_spec(1_000_000, 384, cfg) == half
    full = estimate_bytes(half, 1_000_000, 384)
    # 4-bit codes (96 bytes) + half-precision rescoring codes + IDMap2 ids, and the centroids
    assert full == 1_000_000 * (96 + 768 + 56) + 4096 * 1536

    def chosen(budget_bytes, n=1_000_000):
        return choose_spec(n, 384, IndexConfig(memory_budget_mb=budget_bytes / 2**20))

    assert chosen(full) == half
    assert chosen(full - 1) == f"{fast},Refine(SQ8)"  # int8 rescoring
    sq8 = estimate_bytes(f"{fast},Refine(SQ8)", 1_000_000, 384)
    assert sq8 == 1_000_000 * (96 + 384 + 56) + 4096 * 1536
    # larger than the budget: served mapped, the rescoring codes left in the file, the
    # fast-scan lists too (`block_lists`): each process keeps the ids (a plain IDMap,
    # 8 bytes a vector) and the centroids
    assert chosen(sq8 - 1) == half
    private = resident_bytes(half, 1_000_000, 384)
    assert private == 1_000_000 * 8 + 4096 * 1536
    assert chosen(private) == half
    # 8-bit codes in plain lists, mapped, keep as much to each process: never preferred
    assert resident_bytes("IVF4096,PQ96x8np,Refine(SQfp16)", 1_000_000, 384) == private
    # no codes-only index keeps less (its ids are in the IVF lists, but it is read whole)
    assert estimate_bytes(fast, 1_000_000, 384) == 1_000_000 * (96 + 8) + 4096 * 1536
    with pytest.raises(VectorIndexError, match=r"IVF4096,PQ192x4fs,Refine\(SQfp16\)"):
        chosen(private - 1)
    assert choose_spec(50_000, 384, IndexConfig(memory_budget_mb=2)) == (
        "IVF1024,PQ192x4fs,Refine(SQfp16)"
    )
    # ten million: 80 MB of ids and 25 MB of centroids a process, whatever the codes' size
    ten = {
        budget: choose_spec(10**7, 384, IndexConfig(memory_budget_mb=budget))
        for budget in (1536, 1024, 128)
    }
    assert set(ten.values()) == {"IVF16384,PQ192x4fs,Refine(SQfp16)"}
    assert choose_spec(9_000, 384, IndexConfig(memory_budget_mb=0.5)) == (
        "IVF230,PQ192x4fs,Refine(SQfp16)"
    )
    # too few vectors to train 4-bit codes (39 × 16): full or 8-bit vectors in IVF lists
    assert choose_spec(500, 32, IndexConfig(flat_limit=0)) == "IVF12,Flat"
    assert choose_spec(500, 32, IndexConfig(flat_limit=0, memory_budget_mb=0.05)) == "IVF12,SQ8"
    with pytest.raises(VectorIndexError, match="memory_budget_mb"):
        choose_spec(1_000_000, 384, IndexConfig(memory_budget_mb=5))


def test_nprobe_tuning_reaches_the_recall_target_on_clustered_data():
    data = clustered(20_300)
    vectors, queries = data[:20_000], data[20_000:]  # same clusters; queries held out
    ids = np.arange(100, 20_100, dtype=np.int64)
    spec = "IVF512,Flat"
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


def built(spec="auto", n=6000, dim=32, seed=0, **overrides):
    """A VectorIndex over n clustered vectors; `auto` is forced past exact search."""
    vectors = clustered(n, dim, seed=seed, spread=0.7)  # wider than 0.35: harder neighbours
    ids = np.arange(1000, 1000 + n, dtype=np.int64)
    cfg = IndexConfig(**{"spec": spec, "flat_limit": 0, "tune_sample": 300} | overrides)
    prov = synthetic_provenance(dim)
    chosen = choose_spec(n, dim, cfg) if spec == "auto" else spec
    return VectorIndex.build(chosen, prov, cfg, vectors, ids), vectors, ids


def held_recall(index, vectors, ids):
    queries = clustered(6300, 32, spread=0.7)[6000:]  # same clusters, not in the index
    _, exact = faiss.knn(queries, vectors, 10, metric=faiss.METRIC_INNER_PRODUCT)
    _, found = index.search(queries, 10)
    return np.mean([len(set(ids[e]) & set(f)) / 10 for e, f in zip(exact, found)])


def test_auto_scans_4bit_codes_rescores_and_tunes_nprobe():
    index, vectors, ids = built()
    assert index.spec == "IVF153,PQ16x4fs,Refine(SQfp16)"
    record = index.tuning
    assert record["param"] == "nprobe" and record["k_factor"] == 32
    assert record["reached"] and record["recall@10"] >= 0.95
    assert 1 < record["smallest"] < record["value"] < 153  # neither trivial nor exhaustive
    below = str(record["smallest"] - 1)
    assert below in record["curve"] and record["curve"][below] < 0.95  # the smallest that works
    # searches use index.tune_headroom (1.2) times it, for queries farther than held vectors
    assert record["headroom"] == 1.2 and record["value"] == math.ceil(record["smallest"] * 1.2)
    assert held_recall(index, vectors, ids) >= 0.92
    # without rescoring the 4-bit codes alone fall short at the same nprobe
    index.tuning = record | {"k_factor": 1}
    assert held_recall(index, vectors, ids) < 0.9
    # a budget below the half-precision rescoring codes rescores with int8 ones
    full_mb = estimate_bytes(index.spec, 6000, 32) / 2**20
    sq8, vectors, ids = built(memory_budget_mb=full_mb * 0.9)
    assert sq8.spec == "IVF153,PQ16x4fs,Refine(SQ8)" and sq8.tuning["reached"]
    assert held_recall(sq8, vectors, ids) >= 0.9


APPROXIMATE = ["auto", "HNSW16,Flat"]  # IVF + 4-bit codes + rescoring; an HNSW graph


@pytest.mark.parametrize("spec", APPROXIMATE)
def test_filtered_search_matches_exact_search_among_the_allowed(spec):
    index, vectors, ids = built(spec)
    rng = np.random.default_rng(1)
    queries = vectors[rng.choice(len(vectors), 50, replace=False)] + 0.01
    for share in (0.02, 0.3):  # exact under 1/16 of the vectors, a widened search above
        allowed = np.sort(rng.choice(ids, int(share * len(ids)), replace=False))
        rows = np.searchsorted(ids, allowed)
        _, exact = faiss.knn(queries, vectors[rows], 10, metric=faiss.METRIC_INNER_PRODUCT)
        _, found = index.search(queries, 10, allowed)
        # only allowed ids, and always k of them (IndexRefine reads no top-level selector:
        # a missed translation returns unfiltered ids here)
        assert np.isin(found, allowed).all()
        recall = np.mean([len(set(allowed[e]) & set(f)) / 10 for e, f in zip(exact, found)])
        assert recall == 1.0 if share < 1 / 16 else recall >= 0.9, (share, recall)


@pytest.mark.parametrize("spec", APPROXIMATE)
def test_deletes_are_left_out_until_a_rebuild_is_due(spec, tmp_path):
    index, vectors, ids = built(spec)
    gone = ids[:300]  # 5 %: recorded as deleted, the index keeps their vectors
    assert index.remove(gone)
    assert index.ntotal == len(ids) - 300 and index.index.ntotal == len(ids)
    _, found = index.search(vectors[:300], 10)
    assert not np.isin(found, gone).any() and (found >= 0).all()
    _, found = index.search(vectors[:300], 5, allowed=ids[:600])  # a filter naming deleted ids
    assert not np.isin(found, gone).any()
    # an id deleted from the base and added again lives in the delta, found once
    index.add(vectors[:1], gone[:1])
    _, found = index.search(vectors[:1], 10)
    assert found[0][0] == gone[0] and list(found[0]).count(gone[0]) == 1
    assert index.remove(gone[:1]) and index.ntotal == len(ids) - 300
    # saved and loaded with the deleted ids; adding new vectors keeps them out
    index.save(tmp_path)
    loaded = VectorIndex.load(tmp_path, index.config)
    np.testing.assert_array_equal(loaded.deleted, gone)
    loaded.add(vectors[:5] * 0.5 + 0.1, np.arange(50_000, 50_005))
    assert loaded.ntotal == len(ids) - 300 + 5
    _, found = loaded.search(vectors[:300], 10)
    assert not np.isin(found, gone).any()
    # past 10 % of the stored vectors the caller is told to rebuild, and nothing changes
    assert not loaded.remove(ids[300:700])
    assert len(loaded.deleted) == 300


@pytest.mark.parametrize("spec", ["HNSW16,Flat", "IVF2,PQ8x4fs,RFlat"])
def test_pipeline_deletes_from_an_index_that_cannot_remove(spec, tiny_config, tmp_path):
    from indexer.ops.consistency import check_store

    words = [
        "cat",
        "dog",
        "train",
        "sea",
        "river",
        "apple",
        "pear",
        "house",
        "car",
        "city",
        "rug",
        "mountain",
    ]
    rng = np.random.default_rng(0)
    rows = [{"id": f"d{i}", "text": " ".join(rng.choice(words, 5))} for i in range(60)]
    corpus = tmp_path / "many.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tiny_config.with_overrides(**{"index.spec": spec})
    first = run_index([str(corpus)], cfg)
    assert first["index"]["spec"] == spec
    # 3 of 60 gone (5 %): updated in place, the deleted ids saved beside the index
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows[3:]))
    second = run_index([str(corpus)], cfg, on_missing="delete")
    assert not second["index"]["rebuilt"]
    folder = Path(cfg.store.path) / "index" / second["index"]["version"]
    assert json.loads((folder / "provenance.json").read_text())["deleted"] == 3
    assert check_store(cfg).problems == []
    with Store(cfg.store.path, read_only=True) as store:
        searcher = Searcher(cfg, store)
        for row in rows[:3]:
            hits = searcher.search(row["text"], k=60, mode="dense")
            assert len(hits) == 57 and row["id"] not in {h.id for h in hits}
    # 10 more gone: past 10 % deleted, so the index is rebuilt without them
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows[13:]))
    third = run_index([str(corpus)], cfg, on_missing="delete")
    assert third["index"]["rebuilt"]
    loaded = VectorIndex.load(cfg.store.path, cfg.index)
    assert len(loaded.deleted) == 0 and loaded.ntotal == 47
    assert check_store(cfg).problems == []


def test_auto_index_records_tuning_in_provenance(tiny_config, small_corpus):
    cfg = tiny_config.with_overrides(**{"index.flat_limit": 0})
    summary = run_index([str(small_corpus)], cfg)
    assert summary["index"]["spec"].startswith("IVF")  # a few vectors: IVF1,Flat
    folder = Path(cfg.store.path) / "index" / summary["index"]["version"]
    info = json.loads((folder / "provenance.json").read_text())
    assert info["tuning"]["param"] == "nprobe" and info["tuning"]["reached"]
    assert info["tuning"]["recall@10"] >= 0.95 and info["tuning"]["value"] >= 1
    assert info["memory_bytes"] > 0 and info["deleted"] == 0
    loaded = VectorIndex.load(cfg.store.path, cfg.index)
    assert loaded.tuning == info["tuning"]


def test_tuning_on_example_queries_sees_what_held_vectors_hide():
    """A corpus of near-copies (10 of each text, as the scale benchmark's): a held vector's
    neighbours are its own copies, found at nprobe 2, while a new query has none; tuning on
    example queries (`index.tune_queries`) finds the probes real queries need."""
    points = clustered(1600, spread=1.5)
    bases, examples, new = points[:1000], points[1000:1300], points[1300:]
    noise = np.random.default_rng(1).normal(size=(10_000, 32)).astype(np.float32)
    x = np.repeat(bases, 10, axis=0) + 0.05 * noise
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = np.arange(10_000, dtype=np.int64)
    spec = "IVF256,Flat"
    index = faiss.index_factory(32, spec, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add_with_ids(x, ids)
    held = tune(index, spec, x, ids, sample=300)
    asked = tune(index, spec, x, ids, sample=300, queries=examples, headroom=1.2)
    assert (held["queries"], asked["queries"], asked["headroom"]) == (
        "database vectors",
        "tune_queries",
        1.0,  # real queries need no headroom
    )
    _, exact = faiss.knn(new, x, 10, metric=faiss.METRIC_INNER_PRODUCT)

    def recall_at(nprobe):
        index.nprobe = nprobe
        _, found = index.search(new, 10)
        return np.mean([len(set(e) & set(f)) / 10 for e, f in zip(exact, found)])

    assert asked["value"] > 5 * held["value"]
    assert recall_at(held["value"]) < 0.7 and recall_at(asked["value"]) >= 0.93


def test_tune_queries_file_is_encoded_and_used(tiny_config, small_corpus, tmp_path):
    examples = tmp_path / "queries.txt"
    examples.write_text("a cat on a mat\ngzip a file\n\nthe sea\n")
    cfg = tiny_config.with_overrides(**{"index.flat_limit": 0, "index.tune_queries": str(examples)})
    summary = run_index([str(small_corpus)], cfg)
    folder = Path(cfg.store.path) / "index" / summary["index"]["version"]
    tuning = json.loads((folder / "provenance.json").read_text())["tuning"]
    assert (tuning["queries"], tuning["sample"], tuning["headroom"]) == ("tune_queries", 3, 1.0)
    missing = cfg.with_overrides(**{"index.tune_queries": str(tmp_path / "none.txt")})
    with pytest.raises(ConfigError, match="none.txt"):
        run_index(
            [str(small_corpus)], missing.with_overrides(**{"store.path": str(tmp_path / "s2")})
        )


def test_a_lower_target_recall_takes_effect_at_search_from_the_recorded_curve():
    tuning = {"param": "nprobe", "value": 36, "target": 0.95, "headroom": 1.2}
    tuning["curve"] = {"8": 0.81, "16": 0.9, "24": 0.93, "30": 0.95, "32": 0.96}
    assert retarget(tuning, 0.95) == 36  # the tuned value
    assert retarget(tuning, 0.9) == 20  # 16 reached 0.90, × 1.2 headroom
    assert retarget(tuning, 0.99) == 36  # beyond the curve: the tuned value (reindex to raise)
    index, vectors, ids = built()
    tuned = held_recall(index, vectors, ids)
    index.config = index.config.model_copy(update={"target_recall": 0.5})
    lower = retarget(index.tuning, 0.5)
    assert lower < index.tuning["value"] and held_recall(index, vectors, ids) < tuned
