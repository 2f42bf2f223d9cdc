"""IVF indexes built in shards and merged (`indexer.index.shards`) equal a one-process build:
same ids and scores at nprobe = nlist, for flat, PQ and SQ codes and a pre-transform; the
specs that cannot be merged say why. Shards are added on a thread pool standing in for the
cluster's `submit` (the same functions run on a Dask worker)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from indexer.config import IndexConfig
from indexer.errors import VectorIndexError
from indexer.index.shards import add_to_shard, build_in_shards, merge_shards, unmergeable
from indexer.index.vector import VectorIndex
from indexer.records.provenance import Provenance

DIM, N, BATCH = 16, 4000, 1000


@pytest.fixture(autouse=True)
def one_faiss_thread():
    """Shards are added on threads here: FAISS's OpenMP pool inside each would spin against
    the other (minutes on a busy 2-core machine instead of a second)."""
    import faiss

    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


PROVENANCE = Provenance("m", "h", "mean", True, 16, DIM, "fp32")


def _data():
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((N, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = rng.permutation(10 * N)[:N].astype(np.int64)  # global ids, not positions
    return ids, vectors


@pytest.mark.parametrize("spec", ["IVF16,Flat", "IVF16,PQ4np", "IVF8,SQ8", "PCA8,IVF8,Flat"])
def test_sharded_build_equals_one_process_build(spec):
    ids, vectors = _data()
    config = IndexConfig(spec=spec)

    def batches():
        for start in range(0, N, BATCH):
            yield ids[start : start + BATCH], vectors[start : start + BATCH]

    one = VectorIndex.build_from_batches(spec, PROVENANCE, config, batches, N)
    with ThreadPoolExecutor(2) as pool:
        sharded = build_in_shards(spec, PROVENANCE, config, batches, N, pool.submit, 2)
    assert sharded.ntotal == one.ntotal == N
    nlist = int(spec.split("IVF")[1].split(",")[0])
    for index in (one, sharded):
        index.config = IndexConfig(spec=spec, nprobe=nlist)  # every list: exact over the codes
    queries = vectors[:50]
    d1, i1 = one.search(queries, 10)
    d2, i2 = sharded.search(queries, 10)
    assert np.array_equal(i1, i2)
    assert np.allclose(d1, d2, atol=1e-6)
    if spec == "IVF16,Flat":  # exact codes, no projection: each vector finds itself first
        assert i1[:, 0].tolist() == ids[:50].tolist()


def test_merge_shards_keeps_every_id():
    ids, vectors = _data()
    from indexer.index.shards import train_shard_template

    template = train_shard_template("IVF8,Flat", DIM, vectors[:2000])
    shards = [
        add_to_shard(template, ids[s : s + 1000], vectors[s : s + 1000]) for s in range(0, N, 1000)
    ]
    merged = merge_shards(template, shards)
    assert merged.ntotal == N
    found = np.concatenate(
        [
            np.array(
                [
                    merged.invlists.get_single_id(li, j)
                    for j in range(merged.invlists.list_size(li))
                ],
                dtype=np.int64,
            )
            for li in range(8)
        ]
    )
    assert sorted(found.tolist()) == sorted(ids.tolist())


@pytest.mark.parametrize(
    "spec, why",
    [
        ("HNSW32", "not IVF"),
        ("Flat", "not IVF"),
        ("IVF16,PQ4x4fs", "fast-scan"),
        ("IVF16,PQ4,RFlat", "rescoring"),
    ],
)
def test_unmergeable_specs_say_why(spec, why):
    assert why in unmergeable(spec)
    with pytest.raises(VectorIndexError, match=why):
        build_in_shards(spec, PROVENANCE, IndexConfig(spec=spec), lambda: [], 1, None)
    assert unmergeable("IVF16,PQ4") is None
