"""A fast-scan base's lists written to a file beside it and mapped (`indexer.index.block_lists`):
the same results as the lists in memory, one mapping's pages instead of a copy per process,
readable after the store moves, damage reported with the fix, collected with the base, and
nothing printed on stdout (where `--json` commands write)."""

import shutil
import sys

import faiss
import numpy as np
import pytest
from vector_kit import clustered, synthetic_provenance

from indexer.config import IndexConfig
from indexer.errors import VectorIndexError
from indexer.index.block_lists import has_block_lists, lists_path
from indexer.index.vector import VectorIndex
from indexer.index.version_files import version_files
from indexer.records.versions import current_version

SPEC = "IVF32,PQ16x4fs,RFlat"
N, DIM = 5000, 32


def build():
    vectors = clustered(N, DIM, spread=0.7)
    ids = np.arange(100, 100 + N, dtype=np.int64) * 3
    config = IndexConfig(spec=SPEC, nprobe=8)
    return VectorIndex.build(SPEC, synthetic_provenance(DIM), config, vectors, ids), vectors, ids


def lists_of(index: VectorIndex):
    return faiss.downcast_InvertedLists(faiss.extract_index_ivf(index.index).invlists)


def test_mapped_lists_give_the_results_of_the_lists_in_memory(tmp_path, capfd):
    index, vectors, ids = build()
    assert has_block_lists(index.index)
    queries = vectors[::61] + 0.01
    want_scores, want = index.search(queries, 10)
    capfd.readouterr()
    index.save(tmp_path / "s")
    assert capfd.readouterr().out == ""  # FAISS's own messages kept off stdout
    base = version_files(tmp_path / "s", current_version(tmp_path / "s"))["base"]
    assert lists_path(base).is_file()
    assert not has_block_lists(index.index)  # the writer's index now maps them too
    for mapped in (True, False):
        loaded = VectorIndex.load(tmp_path / "s", IndexConfig(spec=SPEC, nprobe=8), mapped=mapped)
        assert isinstance(lists_of(loaded), faiss.OnDiskInvertedLists)
        assert lists_of(loaded).read_only
        scores, found = loaded.search(queries, 10)
        np.testing.assert_array_equal(found, want)
        np.testing.assert_allclose(scores, want_scores, rtol=1e-6)
        assert capfd.readouterr().out == ""


def test_a_moved_store_maps_the_lists_beside_its_base(tmp_path):
    index, vectors, _ = build()
    index.save(tmp_path / "a")
    _, want = index.search(vectors[:20], 10)
    del index
    shutil.move(tmp_path / "a", tmp_path / "b")  # the base records the old absolute path
    loaded = VectorIndex.load(tmp_path / "b", IndexConfig(spec=SPEC, nprobe=8))
    assert lists_of(loaded).filename.startswith(str(tmp_path / "b"))
    np.testing.assert_array_equal(loaded.search(vectors[:20], 10)[1], want)


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_missing_or_cut_lists_file_is_reported_with_the_fix(damage, tmp_path):
    index, _, _ = build()
    index.save(tmp_path)
    path = lists_path(version_files(tmp_path, current_version(tmp_path))["base"])
    if damage == "missing":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[:-4096])
    with pytest.raises(VectorIndexError, match="damaged or truncated") as err:
        VectorIndex.load(tmp_path, IndexConfig(spec=SPEC))
    assert path.name in str(err.value) and "bertindex" in str(err.value)


def test_the_lists_file_goes_with_its_base(tmp_path):
    index, vectors, ids = build()
    index.save(tmp_path)
    first = lists_path(version_files(tmp_path, current_version(tmp_path))["base"])
    for _ in range(3):  # rebuilds write new bases; two versions are kept
        again = VectorIndex.build(
            SPEC, synthetic_provenance(DIM), IndexConfig(spec=SPEC), vectors, ids
        )
        again.save(tmp_path)
    assert not first.exists()
    kept = sorted(p.name for p in first.parent.glob("*.lists"))
    assert len(kept) == 2 and all(
        (first.parent / n.replace(".lists", ".faiss")).is_file() for n in kept
    )


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps")
def test_the_lists_are_file_pages_not_a_copy(tmp_path):
    index, vectors, _ = build()
    index.save(tmp_path)
    path = lists_path(version_files(tmp_path, current_version(tmp_path))["base"])
    del index
    loaded = VectorIndex.load(tmp_path, IndexConfig(spec=SPEC, nprobe=32))
    loaded.search(vectors[:200], 10)
    rss = private = 0
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            parts = line.split()
            if not parts[0].endswith(":"):
                inside = len(parts) > 5 and parts[5] == str(path)
            elif inside and parts[0] == "Rss:":
                rss += int(parts[1])
            elif inside and parts[0] == "Private_Dirty:":
                private += int(parts[1])
    assert rss > 0 and private == 0  # read through the page cache, never copied on write
