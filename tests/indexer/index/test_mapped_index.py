"""Searches map a published index version instead of reading a private copy: the same results
as a copy (filters and deletes included), the codes and rescoring vectors left in the file's
shared pages, a change to a mapped index made in its delta and deleted ids, never on the file;
and `auto` under a small memory budget serving a mapped index at the recall target."""

import hashlib
import sys
from pathlib import Path

import faiss
import numpy as np
import pytest
from vector_kit import clustered, synthetic_provenance

from indexer.config import IndexConfig
from indexer.errors import VectorIndexError
from indexer.index.auto import choose_spec, estimate_bytes, mapped_spec, resident_bytes
from indexer.index.vector import VectorIndex
from indexer.index.version_files import version_files
from indexer.records.versions import current_version

SPECS = ["Flat", "IVF64,PQ8x4", "IVF64,PQ16x4fs,RFlat", "IVF64,PQ8x4,RFlat", "HNSW16,Flat"]
N, DIM = 6000, 32


def published(spec, tmp_path, deleted=0):
    """(store dir, vectors, ids) with `spec` over clustered vectors saved as a version,
    `deleted` of its ids removed before publishing."""
    vectors = clustered(N, DIM, spread=0.7)
    ids = np.arange(1000, 1000 + N, dtype=np.int64)
    index = VectorIndex.build(spec, synthetic_provenance(DIM), IndexConfig(spec=spec), vectors, ids)
    assert index.remove(ids[:deleted])
    index.save(tmp_path)
    return tmp_path, vectors, ids


def base_file(store: Path) -> Path:
    """The base file the current version maps."""
    return version_files(store, current_version(store))["base"]


def file_pages(path: Path) -> dict[str, int]:
    """kB by smaps field over this process's mappings of `path` (empty: not mapped)."""
    out: dict[str, int] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        parts = line.split()
        if not parts[0].endswith(":"):  # a mapping's header: range perms offset dev inode path
            inside = len(parts) > 5 and parts[5] == str(path)
        elif inside and parts[-1] == "kB":
            out[parts[0][:-1]] = out.get(parts[0][:-1], 0) + int(parts[1])
    return out


@pytest.mark.parametrize("spec", SPECS)
def test_a_mapped_load_finds_what_a_private_copy_finds(spec, tmp_path):
    store, vectors, ids = published(spec, tmp_path, deleted=0 if spec == "IVF64,PQ8x4" else 200)
    config = IndexConfig(spec=spec)
    mapped = VectorIndex.load(store, config)
    copy = VectorIndex.load(store, config, mapped=False)
    assert mapped.mapped and not copy.mapped
    assert mapped.ntotal == copy.ntotal and np.array_equal(mapped.deleted, copy.deleted)
    queries = vectors[::97] + 0.01
    rng = np.random.default_rng(3)
    for allowed in (None, np.sort(rng.choice(ids, 300, replace=False)), ids[::3]):
        scores, found = mapped.search(queries, 10, allowed)
        want_scores, want = copy.search(queries, 10, allowed)
        np.testing.assert_array_equal(found, want)
        np.testing.assert_allclose(scores, want_scores, rtol=1e-6)
        assert not np.isin(found, mapped.deleted).any()


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps")
def test_mapped_codes_and_rescoring_vectors_stay_in_the_files_shared_pages(tmp_path):
    store, vectors, _ = published("IVF64,PQ8x4,RFlat", tmp_path)
    files = [base_file(store)]
    mapped = VectorIndex.load(store, IndexConfig(spec="IVF64,PQ8x4,RFlat"))
    mapped.search(vectors[:50], 10)
    pages = file_pages(files[0])
    # the lists and the full vectors the rescoring read are file pages (the page cache, one
    # copy for every process); none was copied on write into this process
    assert pages["Rss"] > 0 and pages["Private_Dirty"] == 0, pages
    del mapped
    VectorIndex.load(store, IndexConfig(), mapped=False).search(vectors[:50], 10)
    assert file_pages(files[0]).get("Rss", 0) == 0  # a copy is read, not mapped


@pytest.mark.parametrize("spec", ["IVF64,PQ8x4", "IVF64,PQ8x4,RFlat"])
def test_changing_a_mapped_index_changes_its_delta_not_the_file(spec, tmp_path):
    store, vectors, ids = published(spec, tmp_path)
    file = base_file(store)
    before = hashlib.sha256(file.read_bytes()).hexdigest()
    index = VectorIndex.load(store, IndexConfig(spec=spec))
    assert index.remove(ids[:100])  # recorded as deleted: the base is never changed
    new = clustered(5, DIM, seed=9)
    index.add(new, np.arange(50_000, 50_005))
    assert index.mapped and index.ntotal == N - 100 + 5  # the base is never changed
    _, found = index.search(vectors[:100], 10)
    assert not np.isin(found, ids[:100]).any()
    _, found = index.search(new, 10)
    assert all(i in row for i, row in zip(range(50_000, 50_005), found))
    assert hashlib.sha256(file.read_bytes()).hexdigest() == before
    again = VectorIndex.load(store, IndexConfig(spec=spec))
    assert again.ntotal == N


@pytest.mark.parametrize("chosen", [True, False], ids=["auto-fast-scan", "plain-8-bit"])
def test_auto_under_a_small_budget_serves_a_mapped_index_at_the_recall_target(chosen, tmp_path):
    n, dim = 20_000, 64
    data = clustered(n + 300, dim, clusters=256, spread=0.7)
    vectors, queries = data[:n], data[n:]  # the same clusters; the queries held out
    ids = np.arange(n, dtype=np.int64) * 7
    fast = "IVF512,PQ32x4fs,Refine(SQfp16)"
    private = resident_bytes(fast, n, dim)
    # a budget below every index held whole in memory, above what a mapped load keeps
    budget = 1.5 * private
    assert estimate_bytes("IVF512,PQ32x4fs,Refine(SQ8)", n, dim) > budget
    config = IndexConfig(flat_limit=0, tune_sample=300, memory_budget_mb=budget / 2**20)
    assert choose_spec(n, dim, config) == fast
    spec = fast if chosen else mapped_spec(n, dim)  # the plain lists, for a pinned spec
    assert chosen or spec == "IVF512,PQ16x8np,Refine(SQfp16)"
    index = VectorIndex.build(spec, synthetic_provenance(dim), config, vectors, ids)
    assert index.tuning["reached"] and index.tuning["recall@10"] >= config.target_recall
    index.save(tmp_path)
    loaded = VectorIndex.load(tmp_path, IndexConfig())
    lists = faiss.downcast_InvertedLists(faiss.extract_index_ivf(loaded.index).invlists)
    kind = faiss.OnDiskInvertedLists if chosen else faiss.ArrayInvertedLists
    assert isinstance(lists, kind)  # fast-scan blocks mapped from `<base>.lists`
    _, exact = faiss.knn(queries, vectors, 10, metric=faiss.METRIC_INNER_PRODUCT)
    _, found = loaded.search(queries, 10)
    recall = np.mean([len(set(ids[e]) & set(f)) / 10 for e, f in zip(exact, found)])
    assert recall >= config.target_recall, recall


@pytest.mark.parametrize("mapped", [True, False])
def test_a_cut_of_the_files_last_bytes_is_reported_as_truncated(mapped, tmp_path):
    """FAISS's mapped read misses a cut of the file's last few bytes (it reads on into the
    mapping's last page): the size recorded at publishing catches the cut before FAISS
    reads."""
    store, _, _ = published("Flat", tmp_path)
    file = base_file(store)
    file.write_bytes(file.read_bytes()[:-4])  # half the last id of the IDMap2
    with pytest.raises(VectorIndexError, match="damaged or truncated") as err:
        VectorIndex.load(store, IndexConfig(spec="Flat"), mapped=mapped)
    assert str(file) in str(err.value) and "bertindex" in str(err.value)
