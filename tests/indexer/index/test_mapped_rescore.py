"""A mapped `…,RFlat` base (and one with 8-bit or half-precision rescoring codes) is rescored here
(`indexer.index.rescore`): the first pass alone, the candidates' pages requested together, then the
same inner products; its results equal FAISS's own refine over the same index read privately with
filters (with deleted ids, which it drops after a wider first pass, they are at least as good), and
the prefetch asks for exactly the pages of the candidates' rows."""

import numpy as np
import pytest
from vector_kit import clustered, synthetic_provenance

from indexer.config import IndexConfig
from indexer.index import first_pass, rescore
from indexer.index.vector import VectorIndex

DIM = 48
SPECS = ["IVF32,PQ24x4fs,RFlat", "IVF32,PQ24x4fs,Refine(SQ8)", "IVF32,PQ24x4fs,Refine(SQfp16)"]


@pytest.fixture(params=SPECS)
def published(tmp_path, request):
    spec = request.param
    vectors = clustered(6000, DIM, seed=7)
    ids = np.arange(6000, dtype=np.int64) * 3 + 11
    config = IndexConfig(spec=spec, nprobe=4, refine_factor=8)
    VectorIndex.build(spec, synthetic_provenance(DIM), config, vectors, ids).save(tmp_path)
    index = VectorIndex.load(tmp_path, config)
    assert index.remove(ids[100:400])  # deleted ids: a selector on the first pass
    index.save(tmp_path)
    return tmp_path, config, vectors, ids


def test_mapped_rescoring_equals_faiss_refine(published):
    store, config, vectors, ids = published
    mapped = VectorIndex.load(store, config)
    private = VectorIndex.load(store, config, mapped=False)
    assert mapped._rescored_here is not None and private._rescored_here is None
    queries = vectors[::61] + 0.03
    rng = np.random.default_rng(3)
    for allowed in (None, np.sort(rng.choice(ids, 3000, replace=False))):
        got_scores, got = mapped.search(queries, 10, allowed)
        want_scores, want = private.search(queries, 10, allowed)
        assert not np.isin(got, ids[100:400]).any()
        if allowed is None:
            # the deleted ids dropped after a first pass wider by their share (5 %): every
            # candidate FAISS's selector keeps, and some more
            assert (got_scores >= want_scores - 1e-6).all()
            assert (got_scores > want_scores + 1e-6).any()
            continue
        np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-6)
        tie = np.isclose(got_scores, want_scores, atol=1e-5)
        assert ((got == want) | tie).all()


def test_8bit_rescoring_decodes_as_faiss_does(published):
    """The scores of 8-bit codes are FAISS's decoded vectors' inner products (`sa_decode`)."""
    import faiss

    store, config, vectors, ids = published
    index = VectorIndex.load(store, config)  # held: the parts are views of its mapped pages
    parts = index._rescored_here
    rows = np.arange(0, 6000, 37)
    query = vectors[5]
    refine = faiss.downcast_index(faiss.downcast_index(index.index).index)
    decoded = faiss.downcast_index(refine.refine_index).sa_decode(
        np.ascontiguousarray(parts.vectors[rows]).view(np.uint8)
    )
    np.testing.assert_allclose(parts.scores(rows, query), decoded @ query, rtol=1e-5, atol=1e-5)
    # and close to the full vectors' (8 bits of each dimension's trained range)
    np.testing.assert_allclose(parts.scores(rows, query), vectors[rows] @ query, atol=0.02)


def test_prefetch_asks_for_the_pages_of_the_candidates_rows(monkeypatch):
    vectors = np.zeros((1000, 384), np.float32)  # 1,536 bytes a row: some rows span 2 pages
    calls = []
    monkeypatch.setattr(
        rescore, "MADVISE", lambda start, length, advice: calls.append((start, length, advice))
    )
    rescore.prefetch(vectors, np.array([5, 2, 5]))
    base = vectors.ctypes.data
    want = []
    for row in (2, 5):  # unique, ascending
        begin = base + row * 1536
        want.append((begin - begin % 4096, begin + 1536 - (begin - begin % 4096), 3))
    assert calls == want


def test_a_probed_delta_shares_the_bases_coarse_assignment(published, monkeypatch):
    """Base and delta searched with one quantizer search give what searching each does."""
    store, config, vectors, ids = published
    index = VectorIndex.load(store, config)
    new = vectors[:50] * 0.9 + 0.05
    index.add(new, np.arange(90_000, 90_050))
    assert index._delta_parts() is not None  # a probed delta with its rescoring stage
    queries = np.concatenate([vectors[::97], new[:10]]) + 0.02
    together = index.search(queries, 10)
    assert (together[1][-10:] >= 90_000).any()  # the delta answers
    monkeypatch.setattr(VectorIndex, "_search_probed_together", lambda *a: None)
    apart = index.search(queries, 10)
    np.testing.assert_allclose(together[0], apart[0], rtol=1e-5, atol=1e-6)
    tie = np.isclose(together[0], apart[0], atol=1e-5)
    assert ((together[1] == apart[1]) | tie).all()
    assert not np.isin(together[1], ids[100:400]).any()


def test_rescoring_rows_are_read_from_the_file_not_the_mapping(published, monkeypatch):
    """The rows a query rescores are read from the base file with pread (`FileRows`): the
    same bytes as the mapped view, the same results as reading through the mapping."""
    store, config, vectors, ids = published
    index = VectorIndex.load(store, config)
    parts = index._rescored_here
    assert parts.file is not None  # found behind the mapping: the version's base file
    rows = np.array([5, 4000, 17, 5999, 0])
    np.testing.assert_array_equal(parts.file.read(rows, parts.vectors), parts.vectors[rows])
    queries = vectors[::97] + 0.02
    from_file = index.search(queries, 10)
    monkeypatch.setattr(rescore, "READ_FILES", False)
    through_mapping = VectorIndex.load(store, config)
    assert through_mapping._rescored_here.file is None
    got = through_mapping.search(queries, 10)
    np.testing.assert_array_equal(from_file[0], got[0])
    np.testing.assert_array_equal(from_file[1], got[1])


def test_anonymous_memory_has_no_file():
    assert rescore.mapped_file(np.zeros(10).ctypes.data) is None


def test_results_past_the_ranked_ones_add_one_candidate_each(published, monkeypatch):
    """Asked for 40 with 10 ranked (the searcher's 4·k chunks for k documents), the base
    rescores k_factor candidates for the 10 and one for each of the other 30, and its top 10
    stay those of the full-depth search."""
    store, config, vectors, ids = published
    index = VectorIndex.load(store, config)
    seen = []
    scores = rescore.MappedRefine.scores
    monkeypatch.setattr(
        rescore.MappedRefine,
        "scores",
        lambda self, rows, q: seen.append(len(rows)) or scores(self, rows, q),
    )
    queries = vectors[::301] + 0.02
    full = index.search(queries, 40)
    deep = sum(seen)
    seen.clear()
    short = index.search(queries, 40, ranked=10)
    # k_factor 8, widened by the deleted ids' share (5 %) to 9: 40·9 against 10·9 + 30
    assert deep > 2.5 * sum(seen)
    overlap = [len(set(a[:10]) & set(b[:10])) / 10 for a, b in zip(full[1], short[1])]
    assert np.mean(overlap) >= 0.95
    assert (short[1][:, :40] >= 0).all()  # still 40 results a query


def test_idle_cores_counts_the_runnable_threads_besides_this_one(monkeypatch):
    from indexer.core import machine

    monkeypatch.setattr(machine, "usable_cores", lambda: 4)
    assert machine.idle_cores("0.50 0.40 0.30 1/321 999") == 4  # only the caller runs
    assert machine.idle_cores("0.50 0.40 0.30 3/321 999") == 2
    assert machine.idle_cores("9.00 9.00 9.00 12/321 999") == 1  # busier than the cores
    assert machine.idle_cores("garbled") == 1


def test_a_query_searched_alone_scans_its_lists_on_the_idle_cores(published, monkeypatch):
    """A searcher scans one query's lists of a mapped fast-scan base on several threads
    (`scan_threads` 0: as many as `idle_cores` says, n: n), FAISS's implementation that splits
    them, and finds the one-thread scan's top 10; a batch runs on them with FAISS's own; every
    search leaves the caller's threads as they were; the files a writer saves keep FAISS's
    own implementation."""
    import faiss

    store, config, vectors, ids = published
    seen: list = []  # (OpenMP threads, implementation, queries) of each FAISS pass
    real = first_pass.run

    def run(first, batch, wide, params, assigned):
        implem = faiss.downcast_index(faiss.extract_index_ivf(first)).implem
        seen.append((faiss.omp_get_max_threads(), implem, len(batch)))
        return real(first, batch, wide, params, assigned)

    monkeypatch.setattr(first_pass, "run", run)
    monkeypatch.setattr(first_pass, "idle_cores", lambda: 3)
    idle = VectorIndex.load(store, config)
    one = VectorIndex.load(store, config.model_copy(update={"scan_threads": 1}))
    before = faiss.omp_get_max_threads()
    wide = max(3, before)
    queries = vectors[::301] + 0.03
    for query in queries:
        seen.clear()
        got_scores, got = idle.search(query[None], 10)
        want_scores, want = one.search(query[None], 10)
        assert seen == [(wide, first_pass.SPLIT_PROBES, 1), (1, 0, 1)]
        np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-6)
        assert ((got == want) | np.isclose(got_scores, want_scores, atol=1e-5)).all()
        assert faiss.omp_get_max_threads() == before
    seen.clear()
    idle.search(queries, 10)
    assert seen == [(wide, 0, len(queries))]  # a batch: FAISS splits it by queries
    idle.add(vectors[:20] * 0.9 + 0.05, np.arange(90_000, 90_020))
    idle.search(queries[:1], 10)  # the probed delta's pass too
    idle.save(store)  # a new version: its delta written
    written = VectorIndex.load(store, config, mapped=False)
    for index in (written.index, written.delta):  # the files keep FAISS's own choice
        assert faiss.downcast_index(faiss.extract_index_ivf(index)).implem == 0


def test_queries_that_arrive_during_a_pass_are_scanned_together_in_the_next(published, monkeypatch):
    """While one query's first pass runs, the one-query passes that arrive wait, and the next
    pass takes them all in one FAISS call; each caller gets its own results, as searched
    alone."""
    store, config, vectors, ids = published
    index = VectorIndex.load(store, config.model_copy(update={"scan_threads": 1}))
    queries = vectors[::500][:6] + 0.03
    alone = [index.search(q[None], 10) for q in queries]
    sizes: list[int] = []
    results = _searched_while_the_first_pass_is_held(
        monkeypatch, index, queries, lambda first, batch, assigned: sizes.append(len(batch))
    )
    assert sizes == [1, len(queries) - 1]
    for (got_scores, got), (want_scores, want) in zip(results, alone):
        np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-6)
        assert ((got == want) | np.isclose(got_scores, want_scores, atol=1e-5)).all()


def _searched_while_the_first_pass_is_held(monkeypatch, index, queries, seen) -> list:
    """Each of `queries` searched from a thread of its own, the first one's FAISS pass held
    until all the others wait for the next pass; `seen(first, batch, assigned)` told of every
    FAISS pass. Returns each query's results."""
    import threading
    import time

    release = threading.Event()
    real, passes = first_pass.run, []

    def run(first, batch, wide, params, assigned):
        seen(first, batch, assigned)
        passes.append(len(batch))
        if len(passes) == 1:
            release.wait(30)  # the first pass holds the searcher while the others arrive
        return real(first, batch, wide, params, assigned)

    def until(condition):
        deadline = time.monotonic() + 30
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert condition()

    monkeypatch.setattr(first_pass, "run", run)
    merged = index._rescored_here.passes
    results: list = [None] * len(queries)

    def ask(i):
        results[i] = index.search(queries[i][None], 10)

    callers = [threading.Thread(target=ask, args=(i,)) for i in range(len(queries))]
    callers[0].start()
    until(lambda: len(passes) == 1)
    for caller in callers[1:]:
        caller.start()
    until(lambda: sum(len(w) for w in merged._waiting.values()) == len(queries) - 1)
    release.set()
    for caller in callers:
        caller.join(30)
    monkeypatch.setattr(first_pass, "run", real)
    return results


def test_a_probed_delta_is_scanned_in_the_bases_held_pass_with_the_merged_queries(
    published, monkeypatch
):
    """A searcher's base and probed delta: queries that arrive during a pass wait, and the next
    pass chooses their lists once and scans the base and the delta for all of them; each
    caller gets what it gets alone, and what searching base and delta apart gives."""
    store, config, vectors, ids = published
    writer = VectorIndex.load(store, config, mapped=False)
    new = vectors[:60] * 0.9 + 0.05
    writer.add(new, np.arange(90_000, 90_060))
    writer.save(store)  # a version with a probed delta
    index = VectorIndex.load(
        store, config.model_copy(update={"scan_threads": 1}), delta_mapped=True
    )
    base_first = index._rescored_here.first
    assert index._delta_parts() is not None and index._delta_parts().passes is None
    queries = np.concatenate([vectors[::900][:3], new[:3]]) + 0.03
    alone = [index.search(q[None], 10) for q in queries]
    calls: list[tuple[str, int, bool]] = []  # (which index, queries, lists given)

    def seen(first, batch, assigned):
        calls.append(("base" if first is base_first else "delta", len(batch), assigned is not None))

    results = _searched_while_the_first_pass_is_held(monkeypatch, index, queries, seen)
    rest = len(queries) - 1
    assert calls == [
        ("base", 1, True),
        ("delta", 1, True),
        ("base", rest, True),
        ("delta", rest, True),
    ]
    monkeypatch.setattr(VectorIndex, "_search_probed_together", lambda *a: None)
    for q, (got_scores, got), (want_scores, want) in zip(queries, results, alone):
        np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-6)
        assert ((got == want) | np.isclose(got_scores, want_scores, atol=1e-5)).all()
        apart_scores, apart = index.search(q[None], 10)
        np.testing.assert_allclose(got_scores, apart_scores, rtol=1e-5, atol=1e-6)
        assert ((got == apart) | np.isclose(got_scores, apart_scores, atol=1e-5)).all()
    assert (np.concatenate([r[1] for r in results[3:]]) >= 90_000).any()  # the delta answers


def test_a_filtered_search_that_meets_a_lone_querys_implementation_keeps_its_filter(published):
    """A lone query's pass switches the fast-scan implementation (`split_probes`) under its
    searcher's pass lock; a filtered search of the same index outside that lock (a delta's)
    may run meanwhile: with the switched implementation it keeps only allowed ids and finds
    what the file's own implementation finds, up to ties."""
    import faiss

    store, config, vectors, ids = published
    index = VectorIndex.load(store, config, mapped=False)
    first = faiss.downcast_index(index.index.index).base_index  # IDMap(Refine(IVF fast scan))
    queries = vectors[::300] + 0.02
    allowed = np.sort(np.random.default_rng(5).choice(len(vectors), 1500, replace=False))
    selector = faiss.IDSelectorBatch(allowed.astype(np.int64))
    params = faiss.SearchParametersIVF(nprobe=8, sel=selector)
    own_scores, own = first.search(queries, 10, params=params)
    with first_pass.split_probes(first, lone=True):
        assert first_pass.fast_scan(first).implem == first_pass.SPLIT_PROBES
        got_scores, got = first.search(queries, 10, params=params)
    assert first_pass.fast_scan(first).implem == 0  # the file's own, back
    assert np.isin(got[got >= 0], allowed).all()
    np.testing.assert_allclose(got_scores, own_scores, rtol=1e-5, atol=1e-5)
    assert ((got == own) | np.isclose(got_scores, own_scores, atol=1e-5)).all()
