"""Index versions as a shared base plus a per-version delta: a publish after a small change
writes only the delta and the deleted ids (the base file keeps its inode), searches equal a
fresh rebuild's over the same vectors when the base is exact, removed ids never come back on
any base, a change past the delta's share rebuilds into a new base and the old one is
collected once no kept version names it, a killed publish leaves the live version readable,
and doctor names a missing base."""

import json
import multiprocessing
import signal
from pathlib import Path

import faiss
import numpy as np
import pytest
from crash_kit import write_corpus
from vector_kit import clustered, synthetic_provenance

from indexer.config import IndexConfig
from indexer.core.faults import arm
from indexer.errors import VectorIndexError
from indexer.index import vector
from indexer.index.delta import DELTA_REBUILD
from indexer.index.rescore import ids_by_position
from indexer.index.vector import VectorIndex
from indexer.index.version_files import DELTA_FILE, PROVENANCE_FILE, version_files
from indexer.indexing.run import Steps, run_index
from indexer.ops.consistency import check_store
from indexer.ops.doctor import diagnose, run_doctor
from indexer.records.versions import current_version, version_dir
from indexer.store import Store

N, DIM = 4000, 32
CONFIG = IndexConfig(spec="Flat")


def base_file(store: Path, version: str | None = None) -> Path:
    return version_files(store, version or current_version(store))["base"]


def changed_in_two_publishes(tmp_path, spec="Flat"):
    """(store, vectors, ids, live ids): a base of the first 3900 vectors, then a version that
    deletes 30 of them and adds 50, then one that removes 10 of those 50 again, deletes 10
    more from the base and adds the last 50."""
    vectors = clustered(N, DIM, spread=0.7)
    ids = np.arange(N, dtype=np.int64) * 3 + 7
    config = IndexConfig(spec=spec)
    prov = synthetic_provenance(DIM)
    VectorIndex.build(spec, prov, config, vectors[:3900], ids[:3900]).save(tmp_path)
    index = VectorIndex.load(tmp_path, config)
    assert index.remove(ids[:30])
    index.add(vectors[3900:3950], ids[3900:3950])
    index.save(tmp_path)
    index = VectorIndex.load(tmp_path, config)
    assert index.remove(np.concatenate([ids[3900:3910], ids[30:40]]))
    index.add(vectors[3950:], ids[3950:])
    index.save(tmp_path)
    live = np.concatenate([ids[40:3900], ids[3910:]])
    return tmp_path, vectors, ids, live


TIE = 1e-5  # scores this close may swap places: the two searches sum in different orders


def assert_same_ranks(found: np.ndarray, want: np.ndarray, scores: np.ndarray) -> None:
    """`found` equals `want` except where the wanted score ties (within TIE) with a neighbour:
    base + delta and one flat index run kernels of different batch shapes, whose float sums
    may differ in the last bits on some CPUs and so order near-equal scores either way."""
    tied = np.zeros(scores.shape, bool)
    close = np.abs(np.diff(scores, axis=1)) <= TIE
    tied[:, 1:] |= close
    tied[:, :-1] |= close
    assert ((found == want) | tied).all(), np.argwhere((found != want) & ~tied)[:5]


def test_search_equals_a_fresh_rebuild_over_the_same_vectors(tmp_path):
    store, vectors, ids, live = changed_in_two_publishes(tmp_path)
    loaded = VectorIndex.load(store, CONFIG)
    assert loaded.ntotal == len(live) and loaded.delta.ntotal == 90 and len(loaded.deleted) == 40
    np.testing.assert_array_equal(np.sort(loaded.ids()), np.sort(live))
    rows = np.searchsorted(ids, live)
    fresh = VectorIndex.build("Flat", synthetic_provenance(DIM), CONFIG, vectors[rows], live)
    queries = vectors[::40] + 0.02
    rng = np.random.default_rng(5)
    for allowed in (None, np.sort(rng.choice(ids, 400, replace=False)), ids[3880:3960]):
        for k in (10, 200):
            scores, found = loaded.search(queries, k, allowed)
            want_scores, want = fresh.search(queries, k, allowed)
            np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-6)
            assert_same_ranks(found, want, want_scores)


@pytest.mark.parametrize(
    "spec", ["IVF16,Flat", "IVF16,PQ8x4fs", "HNSW16,Flat", "IVF16,PQ8x4fs,RFlat"]
)
def test_removed_ids_never_come_back_and_added_ones_are_found(spec, tmp_path):
    store, vectors, ids, live = changed_in_two_publishes(tmp_path, spec)
    loaded = VectorIndex.load(store, IndexConfig(spec=spec))
    gone = np.setdiff1d(ids, live)
    for allowed in (None, ids[:100], ids[3890:]):  # filters naming removed ids
        _, found = loaded.search(vectors[np.searchsorted(ids, gone)], 10, allowed)
        assert not np.isin(found, gone).any()
    added = ids[3910:]
    _, found = loaded.search(vectors[3910:], 10)
    if spec == "IVF16,PQ8x4fs":
        # codes only: the delta holds the base's codes too and its scores are as approximate
        # (0.89 of the added in their own top 10 here, 0.99 before the second publish's
        # removals; one rebuilt index 1.0: each search quantises its lookup tables apart)
        assert (found == added[:, None]).any(axis=1).mean() >= 0.85
    else:
        np.testing.assert_array_equal(found[:, 0], added)
    _, found = loaded.search(vectors[:5], 3, allowed=gone)  # only removed ids: nothing
    assert (found == -1).all()


def test_the_delta_and_deleted_shares_bound_an_update(monkeypatch):
    vectors = clustered(1000, DIM)
    index = VectorIndex.build(
        "Flat", synthetic_provenance(DIM), CONFIG, vectors, np.arange(1000, dtype=np.int64)
    )
    fits = int(DELTA_REBUILD * 1000)
    assert index.takes(fits) and not index.takes(fits + 1)
    index.add(vectors[:10], np.arange(5000, 5010))
    assert not index.takes(fits - 9)
    monkeypatch.setattr(vector, "DELTA_MAX_BYTES", 20 * 4 * DIM)  # 20 vectors' bytes
    assert index.takes(10) and not index.takes(11)
    assert index.remove(np.arange(100)) and not index.remove(np.arange(100, 102))
    assert len(index.deleted) == 100  # a refused removal changes nothing


def test_a_small_change_publishes_only_a_delta_and_shares_the_base(tiny_config, tmp_path):
    corpus = write_corpus(tmp_path / "docs.jsonl", 200, seed=1)
    run_index([str(corpus)], tiny_config)
    store = Path(tiny_config.store.path)
    base = base_file(store)
    inode, before = base.stat().st_ino, VectorIndex.load(store, tiny_config.index).ids()
    write_corpus(tmp_path / "docs.jsonl", 200, seed=1, change={"d3", "d4"})  # 1 %
    second = run_index([str(corpus)], tiny_config)
    assert not second["index"]["rebuilt"]
    folder = version_dir(store, second["index"]["version"])
    assert base_file(store) == base and base.stat().st_ino == inode
    assert [p.name for p in folder.glob("*.faiss")] == [DELTA_FILE]
    assert (folder / DELTA_FILE).stat().st_size * 20 < base.stat().st_size
    loaded = VectorIndex.load(store, tiny_config.index)
    gone = np.setdiff1d(before, loaded.ids())
    info = json.loads((folder / PROVENANCE_FILE).read_text())
    assert len(gone) and info["deleted"] == len(gone) and info["base"]["file"] == base.name
    assert check_store(tiny_config).problems == []
    with Store(store, read_only=True, snapshot=False) as snap:  # embeddings: live only
        for chunk_ids, stored in snap.vectors.iter_batches():
            _, found = loaded.search(stored, 10)
            assert not np.isin(found, gone).any()
            np.testing.assert_array_equal(found[:, 0], chunk_ids)  # each finds itself


def test_a_large_change_rebuilds_and_the_old_base_is_collected(tiny_config, tmp_path):
    corpus = write_corpus(tmp_path / "docs.jsonl", 200, seed=1)
    store = Path(tiny_config.store.path)
    run_index([str(corpus)], tiny_config)
    first_base = base_file(store)
    write_corpus(tmp_path / "docs.jsonl", 200, seed=1, change={"d3"})
    assert not run_index([str(corpus)], tiny_config)["index"]["rebuilt"]
    reader = VectorIndex.load(store, tiny_config.index)  # maps the first base
    many = {f"d{i}" for i in range(10, 40)}  # 15 %: past the delta's share
    write_corpus(tmp_path / "docs.jsonl", 200, seed=1, change=many)
    third = run_index([str(corpus)], tiny_config)
    assert third["index"]["rebuilt"]
    assert base_file(store) != first_base and first_base.exists()  # the kept v2 names it
    write_corpus(tmp_path / "docs.jsonl", 200, seed=1, change=many | {"d5"})
    assert not run_index([str(corpus)], tiny_config)["index"]["rebuilt"]
    assert not first_base.exists()  # no kept version names it
    live = base_file(store).name  # the live base and its span map (`index.span_file`) only
    assert sorted(p.name for p in (store / "index" / "bases").iterdir()) == [
        live,
        live.replace(".faiss", ".spans.npy"),
    ]
    # a reader that mapped the collected base still searches it
    some = int(ids_by_position(reader.index)[0])  # (the ids stay in the mapped file)
    assert reader.search(reader._reconstruct(np.array([some])), 1)[1][0, 0] == some
    assert check_store(tiny_config).problems == []


class _Stopped(Exception):
    """A run stopped after committing its batches, before it published."""


def _stop(*args, **kwargs):
    raise _Stopped


@pytest.mark.parametrize("catch_up", ["rerun", "doctor"])
def test_a_run_stopped_before_publishing_is_caught_up_by_its_difference(
    catch_up, tiny_config, tmp_path
):
    """The next run, or `doctor --repair`, updates the index by what the store holds that it
    does not (and the reverse): the base file is kept, no rebuild."""
    corpus = write_corpus(tmp_path / "docs.jsonl", 200, seed=1)
    run_index([str(corpus)], tiny_config)
    store = Path(tiny_config.store.path)
    base = base_file(store)
    inode, before = base.stat().st_ino, VectorIndex.load(store, tiny_config.index).ids()
    write_corpus(tmp_path / "docs.jsonl", 200, seed=1, change={"d3", "d4"}, drop={"d9"})
    with pytest.raises(_Stopped):
        run_index([str(corpus)], tiny_config, on_missing="delete", steps=Steps(write=_stop))
    problems = {p.check for p in diagnose(store, tiny_config).problems}
    assert {"index_ids", "index_version"} <= problems
    if catch_up == "rerun":
        info = run_index([str(corpus)], tiny_config, on_missing="delete")["index"]
    else:
        info = run_doctor(tiny_config, repair=True)["repair"]["index"]
    assert info["version"] is not None and not info["rebuilt"]
    assert base_file(store) == base and base.stat().st_ino == inode
    after = VectorIndex.load(store, tiny_config.index).ids()
    assert len(np.setdiff1d(before, after)) == 3  # d3's, d4's and d9's chunks
    assert len(np.setdiff1d(after, before)) >= 2  # d3's and d4's new ones
    assert check_store(tiny_config).problems == []


def _publish_killed_before_rename(store: Path) -> None:
    arm("index.before_rename")
    vectors = clustered(500, DIM, seed=4)
    index = VectorIndex.build("Flat", synthetic_provenance(DIM), CONFIG, vectors, np.arange(500))
    index.save(store)


def test_a_killed_publish_leaves_the_live_version_readable(tmp_path):
    store, vectors, ids, live = changed_in_two_publishes(tmp_path)
    proc = multiprocessing.get_context("fork").Process(
        target=_publish_killed_before_rename, args=(store,)
    )
    proc.start()
    proc.join()
    assert proc.exitcode == -signal.SIGKILL
    assert (store / "index" / "bases" / "v4.faiss").exists()  # written, named by no version
    assert current_version(store) == "v3"
    loaded = VectorIndex.load(store, CONFIG)
    assert loaded.ntotal == len(live)
    index = VectorIndex.load(store, CONFIG)
    index.add(vectors[:1] * 0.5, np.array([10**6]))
    assert index.save(store) == "v4"  # the killed folder was never published
    assert base_file(store).name == "v1.faiss"
    assert not (store / "index" / "bases" / "v4.faiss").exists()  # collected


def test_doctor_names_a_missing_base_and_repair_rebuilds_it(tiny_config, tmp_path):
    corpus = write_corpus(tmp_path / "docs.jsonl", 100, seed=2)
    run_index([str(corpus)], tiny_config)
    write_corpus(tmp_path / "docs.jsonl", 100, seed=2, change={"d7"})
    run_index([str(corpus)], tiny_config)
    store = Path(tiny_config.store.path)
    version, base = current_version(store), base_file(store)
    assert base.name == "v1.faiss" and version == "v2"
    base.unlink()
    problems = diagnose(store, tiny_config).problems
    assert [(p.check, p.path) for p in problems] == [("index_file", str(base))]
    assert f"the base index that version {version} names" in problems[0].message
    report = run_doctor(tiny_config, repair=True)
    assert report["remaining"] == [] and report["repair"]["index"]["rebuilt"]
    assert (
        faiss.read_index(str(base_file(store))).ntotal
        == VectorIndex.load(store, tiny_config.index).ntotal
    )


def test_a_version_published_before_bases_loads_and_the_next_publish_writes_a_base(tmp_path):
    """An older version holds its whole index as `index.faiss` in its folder: it loads as the
    base, and the next publish writes that base under index/bases/ once."""
    store, vectors, ids, live = changed_in_two_publishes(tmp_path)
    VectorIndex.build("Flat", synthetic_provenance(DIM), CONFIG, vectors[:100], ids[:100]).save(
        store
    )  # v4: a base of its own, standing in for an older version's whole index
    folder = version_dir(store, "v4")
    base_file(store).rename(folder / "index.faiss")
    info = json.loads((folder / PROVENANCE_FILE).read_text())
    del info["base"], info["delta"]
    (folder / PROVENANCE_FILE).write_text(json.dumps(info))
    old = VectorIndex.load(store, CONFIG)
    assert old.base is None and old.ntotal == 100
    old.add(vectors[200:210], ids[200:210])
    assert old.save(store) == "v5"
    assert base_file(store).name == "v5.faiss" and VectorIndex.load(store, CONFIG).ntotal == 110


@pytest.mark.parametrize("shuffled", [False, True])
def test_a_base_is_written_as_a_plain_id_map_and_filtered_search_reads_it(shuffled, tmp_path):
    """An IDMap2 base (a rescoring stage) is written as a plain IDMap: no reverse hash map to
    rebuild in every process that reads it; a filtered exact search finds the vectors of its
    ids at their positions, ascending or not (ids in any order: shards, a repair)."""
    spec = "IVF16,PQ8x4fs,RFlat"
    vectors = clustered(2000, DIM, seed=3)
    ids = np.arange(2000, dtype=np.int64) * 7 + 1
    if shuffled:
        order = np.random.default_rng(1).permutation(2000)
        vectors, ids = vectors[order], ids[order]
    config = IndexConfig(spec=spec, nprobe=16)
    built = VectorIndex.build(spec, synthetic_provenance(DIM), config, vectors, ids)
    built.save(tmp_path)
    loaded = VectorIndex.load(tmp_path, config)
    assert isinstance(loaded.index, faiss.IndexIDMap)  # (its ids left in the file: a subclass)
    assert not isinstance(loaded.index, faiss.IndexIDMap2)
    allowed = np.sort(ids[::97])  # few: the exact path
    for index in (built, loaded):
        scores, found = index.search(vectors[:20], 5, allowed)
        among = vectors[np.isin(ids, allowed)]
        want_scores, want = faiss.knn(vectors[:20], among, 5, metric=faiss.METRIC_INNER_PRODUCT)
        np.testing.assert_array_equal(found, ids[np.isin(ids, allowed)][want])
        np.testing.assert_allclose(scores, want_scores, rtol=1e-5)


@pytest.mark.parametrize("spec", ["IVF16,PQ8x4fs,Refine(SQfp16)", "Flat", "HNSW16"])
def test_a_mapped_base_searches_with_its_ids_left_in_the_file(spec, tmp_path):
    """A mapped base's ids are read from the file's pages, not copied into the IDMap (80 MB and
    ~50 ms in every process at 10M): a search rescored here copies nothing and finds what a
    read copy finds; a search FAISS translates (filtered, or no rescoring stage here) fills
    the IDMap first, with the same answers; ids garbled in the file are refused as damage."""
    vectors = clustered(2000, DIM, seed=4)
    ids = np.arange(2000, dtype=np.int64) * 3 + 5
    config = IndexConfig(spec=spec, nprobe=16)
    VectorIndex.build(spec, synthetic_provenance(DIM), config, vectors, ids).save(tmp_path)
    copied = VectorIndex.load(tmp_path, config, mapped=False)
    mapped = VectorIndex.load(tmp_path, config)
    np.testing.assert_array_equal(ids_by_position(mapped.index), ids)
    assert mapped.index.id_map.size() == 0  # nothing copied by the read
    rescored_here = mapped._rescored_here is not None
    assert rescored_here == spec.startswith("IVF16,PQ")
    queries = vectors[:30] + 0.01
    want = copied.search(queries, 10)
    got = mapped.search(queries, 10)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    assert mapped.index.filled != rescored_here  # rescored here: still no copy
    allowed = np.sort(ids[::3])
    np.testing.assert_array_equal(
        mapped.search(queries, 10, allowed)[1], copied.search(queries, 10, allowed)[1]
    )
    assert mapped.index.filled
    np.testing.assert_array_equal(faiss.vector_to_array(mapped.index.id_map), ids)
    base = next((tmp_path / "index" / "bases").glob("*.faiss"))
    raw = bytearray(base.read_bytes())
    raw[-8 * 2000 - 8] ^= 1  # the ids' count (uint64, before the ids)
    base.write_bytes(bytes(raw))
    with pytest.raises(VectorIndexError, match="damaged"):
        VectorIndex.load(tmp_path, config)
