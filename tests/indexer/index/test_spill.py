"""An `…,RFlat` base built with its full vectors on disk (`indexer.index.spill`) is the one
built in memory: the same bytes on disk, the same search results, no file left behind; and so
is one whose rescoring stage holds half-precision or 8-bit codes (`Refine(SQfp16)`,
`Refine(SQ8)`)."""

import os

import faiss
import numpy as np
import pytest

from indexer.config import IndexConfig
from indexer.index.spill import SpilledRefine, fill, flat_header, spillable
from indexer.index.vector import VectorIndex
from indexer.index.version_files import bases_dir, plain_id_map
from indexer.records.provenance import Provenance

DIM = 24
SPEC = "IVF8,PQ6x4np,RFlat"
SPECS = [SPEC, "IVF8,PQ6x4np,Refine(SQfp16)", "IVF8,PQ6x4np,Refine(SQ8)"]


def _data(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(n, dtype=np.int64) * 3 + 11  # not positions: the IDMap must map them
    return ids, vectors


def _batches(ids, vectors, size=450):
    return lambda: ((ids[s : s + size], vectors[s : s + size]) for s in range(0, len(ids), size))


def _provenance():
    return Provenance("m", "h", "mean", True, 16, DIM, "fp32")


def _trained(ids, vectors, spec=f"IDMap2,{SPEC}"):
    index = faiss.index_factory(DIM, spec, faiss.METRIC_INNER_PRODUCT)
    index.train(vectors[:1000])
    return index


def test_flat_header_is_faiss_layout():
    vectors = np.arange(5 * DIM, dtype=np.float32).reshape(5, DIM)
    flat = faiss.IndexFlatIP(DIM)
    flat.add(vectors)
    written = faiss.serialize_index(flat).tobytes()
    assert written == flat_header(DIM, faiss.METRIC_INNER_PRODUCT, 5) + vectors.tobytes()


@pytest.mark.parametrize("spec", SPECS)
def test_spilled_index_is_byte_identical_and_searches_the_same(tmp_path, spec):
    ids, vectors = _data()
    memory = _trained(ids, vectors, f"IDMap2,{spec}")
    spilled = faiss.deserialize_index(faiss.serialize_index(memory))
    assert spillable(spec, spilled)
    memory = fill(memory, spec, _batches(ids, vectors), None)
    spilled = fill(spilled, spec, _batches(ids, vectors), tmp_path)
    assert isinstance(spilled, faiss.IndexIDMap)
    expected = faiss.serialize_index(plain_id_map(memory))
    assert np.array_equal(faiss.serialize_index(spilled), expected)
    queries = vectors[:20] + 0.01
    for index in (memory, spilled):
        faiss.extract_index_ivf(index).nprobe = 4
    d_mem, i_mem = memory.search(queries, 10)
    d_sp, i_sp = spilled.search(queries, 10)
    assert np.array_equal(i_mem, i_sp)
    assert np.array_equal(d_mem, d_sp)
    assert set(os.listdir(tmp_path)) == set()  # the spilled file has no name


def test_only_a_flat_or_scalar_quantised_rescoring_stage_spills():
    ids, vectors = _data(1200)
    assert spillable(SPEC, _trained(ids, vectors))
    assert not spillable("IVF8,PQ6x4np", _trained(ids, vectors, "IVF8,PQ6x4np"))
    pq = "IVF8,PQ6x4np,Refine(PQ12x4)"  # 16 centroids a part: 8-bit ones trained for 11 s
    assert not spillable(pq, _trained(ids, vectors, f"IDMap2,{pq}"))


@pytest.mark.parametrize("spec", [SPEC, SPECS[1]])
def test_built_base_saved_and_loaded_as_in_memory(tmp_path, spec):
    """Through the index's own build and save: the written base is the same file either way."""
    ids, vectors = _data()
    config = IndexConfig(spec=spec, nprobe=8)
    files = []
    for name, spill in (("memory", None), ("spilled", tmp_path / "spilled" / "index" / "bases")):
        store = tmp_path / name
        built = VectorIndex.build_from_batches(
            spec, _provenance(), config, _batches(ids, vectors), len(ids), spill=spill
        )
        built.save(store)
        files.append((bases_dir(store) / built.base).read_bytes())
        loaded = VectorIndex.load(store, config)
        scores, found = loaded.search(vectors[:5], 5)
        assert list(found[:, 0]) == list(ids[:5])
    assert files[0] == files[1]
    left = sorted(p.name for p in (tmp_path / "spilled" / "index" / "bases").iterdir())
    assert left == ["v1.faiss", "v1.trained.faiss"]


def test_a_batch_after_finish_is_refused(tmp_path):
    ids, vectors = _data(1200)
    spilled = SpilledRefine(_trained(ids, vectors), tmp_path)
    spilled.add(vectors, ids)
    index = spilled.finish()
    assert index.ntotal == len(ids)
    with pytest.raises(ValueError):
        spilled.add(vectors, ids)
