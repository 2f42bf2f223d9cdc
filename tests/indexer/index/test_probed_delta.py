"""A probed delta: the vectors added on an IVF base fill an empty copy of the base as trained
(its template, saved beside the base), so a query probes a few of its lists as in the base
and an update may reach DELTA_REBUILD of the base whatever the bytes; searches over all lists
equal exact search over the live vectors, removals from a delta that cannot remove (an IDMap
over a rescoring stage) rebuild it from its own vectors, a base without a template keeps the
flat delta and its byte bound, and a template goes when its base is collected."""

import numpy as np
import pytest
from vector_kit import clustered, synthetic_provenance

from indexer.config import IndexConfig
from indexer.index import vector
from indexer.index.delta import DELTA_REBUILD, TRAINED_SUFFIX, has_lists
from indexer.index.vector import VectorIndex
from indexer.index.version_files import version_files
from indexer.records.versions import current_version

N, DIM = 4000, 32
PROV = synthetic_provenance(DIM)


def bases(store) -> list[str]:
    return sorted(p.name for p in (store / "index" / "bases").iterdir())


def publish_changes(store, spec: str, config: IndexConfig, vectors, ids) -> np.ndarray:
    """Base of the first 3800 vectors; then two publishes that delete from the base and the
    delta and add 100 each. Returns the live ids."""
    VectorIndex.build(spec, PROV, config, vectors[:3800], ids[:3800]).save(store)
    index = VectorIndex.load(store, config)
    assert index.remove(ids[:20])
    index.add(vectors[3800:3900], ids[3800:3900])
    index.save(store)
    index = VectorIndex.load(store, config)
    assert index.remove(np.concatenate([ids[3800:3830], ids[20:30]]))
    index.add(vectors[3900:], ids[3900:])
    index.save(store)
    return np.concatenate([ids[30:3800], ids[3830:]])


@pytest.mark.parametrize(
    "spec", ["IVF16,Flat", "IVF16,PQ8x4fs,RFlat", "IVF16,PQ8x4fs,Refine(SQfp16)"]
)
def test_a_probed_delta_searched_over_all_lists_equals_exact_search(spec, tmp_path):
    vectors = clustered(N, DIM, spread=0.7)
    ids = np.arange(N, dtype=np.int64) * 5 + 3
    config = IndexConfig(spec=spec, nprobe=16, refine_factor=64)  # every list, every candidate
    live = publish_changes(tmp_path, spec, config, vectors, ids)
    loaded = VectorIndex.load(tmp_path, config)
    assert has_lists(loaded.delta) and loaded.delta.ntotal == 170
    lists = ["v1.lists"] if "fs" in spec else []  # fast-scan lists mapped (`block_lists`)
    assert bases(tmp_path) == sorted(["v1.faiss", *lists, f"v1{TRAINED_SUFFIX}"])
    np.testing.assert_array_equal(np.sort(loaded.ids()), np.sort(live))
    rows = np.searchsorted(ids, live)
    exact = VectorIndex.build("Flat", PROV, IndexConfig(spec="Flat"), vectors[rows], live)
    queries = vectors[::37] + 0.01
    rng = np.random.default_rng(2)
    for allowed in (None, np.sort(rng.choice(ids, 300, replace=False)), ids[3780:3950]):
        got_scores, got = loaded.search(queries, 10, allowed)
        want_scores, want = exact.search(queries, 10, allowed)
        # half-precision rescoring codes: scores within fp16's rounding of the vectors
        tol = 2e-3 if "SQfp16" in spec else 1e-5
        np.testing.assert_allclose(got_scores, want_scores, rtol=1e-4, atol=tol)
        same = (got == want) | np.isclose(got_scores, want_scores, atol=2 * tol)
        assert same.all()


def test_a_probed_delta_may_reach_the_share_whatever_its_bytes(monkeypatch, tmp_path):
    vectors = clustered(2000, DIM)
    config = IndexConfig(spec="IVF16,Flat")
    VectorIndex.build("IVF16,Flat", PROV, config, vectors, np.arange(2000)).save(tmp_path)
    monkeypatch.setattr(vector, "DELTA_MAX_BYTES", 20 * 4 * DIM)  # 20 vectors' bytes
    probed = VectorIndex.load(tmp_path, config)
    fits = int(DELTA_REBUILD * 2000)
    assert probed.takes(fits) and not probed.takes(fits + 1)
    probed.add(vectors[:5] + 0.1, np.arange(9000, 9005))
    assert has_lists(probed.delta) and probed.search(vectors[:1] + 0.1, 1)[1][0, 0] == 9000
    flat_base = VectorIndex.build("Flat", PROV, config, vectors, np.arange(2000))
    assert flat_base.takes(20) and not flat_base.takes(21)  # no lists: flat, bounded by bytes


@pytest.mark.parametrize("spec", ["IVF16,PQ8x4fs,RFlat", "IVF16,PQ8x4fs,Refine(SQfp16)"])
def test_a_base_saved_before_templates_gets_one_derived(tmp_path, spec):
    """A store whose base has no template (written before they were kept) derives it from the
    base file on the first update, byte for byte the one a build keeps, and writes it."""
    vectors = clustered(2000, DIM)
    config = IndexConfig(spec=spec)
    built = VectorIndex.build(spec, PROV, config, vectors, np.arange(2000))
    built.save(tmp_path)
    template = version_files(tmp_path, current_version(tmp_path))["base"].with_name(
        f"v1{TRAINED_SUFFIX}"
    )
    kept = template.read_bytes()
    template.unlink()
    loaded = VectorIndex.load(tmp_path, config)
    assert loaded.takes(100)
    loaded.add(vectors[:100] + 0.05, np.arange(5000, 5100))
    assert has_lists(loaded.delta) and template.read_bytes() == kept
    assert loaded.search(vectors[:3] + 0.05, 1)[1][:, 0].tolist() == [5000, 5001, 5002]


def test_a_template_goes_with_its_base(tmp_path):
    vectors = clustered(2000, DIM)
    config = IndexConfig(spec="IVF16,Flat")
    VectorIndex.build("IVF16,Flat", PROV, config, vectors, np.arange(2000)).save(tmp_path)
    for _ in range(2):  # rebuilds: v2, v3 with their own bases; v1 leaves the kept two
        VectorIndex.build("IVF16,Flat", PROV, config, vectors, np.arange(2000)).save(tmp_path)
    assert bases(tmp_path) == [
        f"v{n}{suffix}" for n in (2, 3) for suffix in (".faiss", TRAINED_SUFFIX)
    ]
