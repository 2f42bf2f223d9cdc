"""A base that rescores from the store's vector files (`indexer.index.store_rows`).

When every vector a base holds is a row of the store's `.npy` vector files, the base is written
without its rescoring stage and records the files; searches rescore from their float32 rows.
It answers as a base that keeps float32 codes of its own (`RFlat` over the same vectors kept as
rows), mapped or not, filtered or not; its file is smaller by the codes; a file it names is kept
by the store's collection while a kept version's base names it, and collected after; a named
file that is missing is refused on load and by `doctor`, naming it.
The vector-file threshold is lowered so that small corpora take the files' path.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
from pathlib import Path

import numpy as np
import pytest
from crash_kit import assert_same_results, write_corpus
from vector_kit import clustered, synthetic_provenance

import indexer.index.vector as vector_module
import indexer.indexing.steps as steps
from indexer.config import IndexConfig
from indexer.errors import VectorIndexError
from indexer.index.vector import VectorIndex
from indexer.indexing.run import run_index
from indexer.ops.consistency import check_store
from indexer.ops.doctor import diagnose
from indexer.records.versions import current_version
from indexer.store import Store, vector_files
from indexer.store import vectors as vectors_module

BATCH = 100
FILES_SPEC = "IVF4,PQ8x4fs,Refine(SQfp16)"  # rescored from float32 files: as RFlat over rows
ROWS_SPEC = "IVF4,PQ8x4fs,RFlat"


def _config(tiny_config, path: Path, spec: str):
    return tiny_config.with_overrides(**{"store.path": str(path), "index.spec": spec})


def _index(cfg, corpus, monkeypatch, as_files: bool, on_missing="keep"):
    with monkeypatch.context() as m:
        m.setattr(steps, "VECTOR_FILE_MIN_ROWS", 50 if as_files else 1 << 30)
        return run_index([str(corpus)], cfg, batch_size=BATCH, on_missing=on_missing)


def _info(cfg, version: str | None = None) -> dict:
    version = version or current_version(cfg.store.path)
    return json.loads((Path(cfg.store.path) / "index" / version / "provenance.json").read_text())


def _vector_files(cfg) -> list[str]:
    folder = Path(cfg.store.path) / "vectors"
    return sorted(p.name for p in folder.glob("*.npy"))


def _same_vectors(got: list, want: list) -> bool:
    """The same (ids, vectors) batches, however cut."""
    return all(
        np.array_equal(
            np.concatenate([b[part] for b in got]), np.concatenate([b[part] for b in want])
        )
        for part in (0, 1)
    )


@pytest.fixture
def stores(tiny_config, tmp_path, monkeypatch):
    """(a store of vector files, the same corpus as rows with float32 codes in its base)."""
    corpus = write_corpus(tmp_path / "docs.jsonl", 400, seed=3)
    files = _config(tiny_config, tmp_path / "files", FILES_SPEC)
    rows = _config(tiny_config, tmp_path / "rows", ROWS_SPEC)
    _index(files, corpus, monkeypatch, as_files=True)
    _index(rows, corpus, monkeypatch, as_files=False)
    return files, rows, corpus


def test_a_base_over_vector_files_rescores_from_them_and_keeps_no_codes(stores):
    files, rows, _ = stores
    info, ref = _info(files), _info(rows)
    named = [r["name"] for r in info["base"]["rows"]]
    assert named == _vector_files(files) and len(named) >= 4
    assert ref["base"]["rows"] is None
    with Store(files.store.path, read_only=True, snapshot=False) as store:
        chunks = store.counts.chunks()
        dim = store.vectors.provenance().dim
    # the rows' base keeps 4 bytes a dimension a vector more
    assert ref["base"]["bytes"] - info["base"]["bytes"] >= chunks * dim * 4
    assert_same_results(files, rows)
    for mapped in (True, False):
        got = VectorIndex.load(Path(files.store.path), files.index, mapped=mapped)
        want = VectorIndex.load(Path(rows.store.path), rows.index, mapped=mapped)
        assert got.rows is not None and want.rows is None
        queries = np.random.default_rng(0).standard_normal((5, dim)).astype(np.float32)
        ids = np.sort(want.ids())
        for allowed in (None, ids[::2], ids[:7]):  # unfiltered, a selector, the exact path
            s1, i1 = got.search(queries, 10, allowed=allowed)
            s2, i2 = want.search(queries, 10, allowed=allowed)
            assert np.array_equal(i1, i2)
            np.testing.assert_allclose(s1, s2, rtol=1e-5, atol=1e-5)


def test_the_files_a_kept_base_names_stay_until_no_version_names_them(stores, monkeypatch):
    files, _, _ = stores
    tmp = Path(files.store.path).parent
    first = _info(files)["base"]["rows"][0]["name"]
    old_version = current_version(files.store.path)
    # every document of the first batch gone: a rebuild (over 10 % deleted) on the other files
    gone = {f"d{i}" for i in range(0, 100)} | {"bad"}
    corpus2 = write_corpus(tmp / "docs2.jsonl", 400, seed=3, drop=gone)
    _index(files, corpus2, monkeypatch, as_files=True, on_missing="delete")
    assert first not in [r["name"] for r in _info(files)["base"]["rows"]]
    with Store(files.store.path, read_only=True, snapshot=False) as store:
        assert first in [vf.name for vf in store.vectors.files()]  # kept, with its record
    assert first in _vector_files(files)
    old = VectorIndex.load(Path(files.store.path), files.index, version=old_version)
    assert old is not None and old.rows is not None
    assert (old.search(np.ones((1, old.provenance.dim), np.float32), 5)[1] >= 0).all()
    # one more version: the old one is removed, and the file with it
    corpus3 = write_corpus(tmp / "docs3.jsonl", 400, seed=3, drop=gone, extra=3)
    _index(files, corpus3, monkeypatch, as_files=True, on_missing="delete")
    assert first not in _vector_files(files)
    with Store(files.store.path, read_only=True, snapshot=False) as store:
        assert first not in [vf.name for vf in store.vectors.files()]


def test_a_missing_file_the_base_reads_is_named_on_load_and_by_doctor(stores):
    files, rows, _ = stores
    lost = Path(files.store.path) / "vectors" / _info(files)["base"]["rows"][1]["name"]
    lost.unlink()
    with pytest.raises(VectorIndexError, match=rf"{lost.name}.*missing"):
        VectorIndex.load(Path(files.store.path), files.index)
    problems = diagnose(Path(files.store.path), files).problems
    assert any(lost.name in (str(p.path) + p.message) for p in problems)


def test_a_runs_few_rows_move_into_a_file_before_a_base_is_built(stores):
    files, rows, _ = stores
    with Store(files.store.path, read_only=True, snapshot=False) as store:
        assert store.con.execute("SELECT count(*) FROM vectors").fetchone()[0] == 0
        recorded = store.vectors.files()
        got = list(store.vectors.iter_batches())
    # the last batch (one document: under the threshold) was a row; now the fifth file
    assert len(recorded) == 5 and recorded[-1].rows < 50
    with Store(rows.store.path, read_only=True, snapshot=False) as store:
        assert store.vectors.move_rows_to_files() == 0  # read-only: nothing moves
        want = list(store.vectors.iter_batches())
    assert _same_vectors(got, want)


def _move_killed(path: str) -> None:
    os.environ["BERTINDEX_CRASH_AT"] = "vectors.rows_moved"
    with Store(path) as store:
        store.vectors.move_rows_to_files(max_share=1.0)


def test_rows_with_gaps_move_into_files_between_the_recorded_ones(
    tiny_config, tmp_path, monkeypatch
):
    cfg = _config(tiny_config, tmp_path / "s", "Flat")  # no rescoring stage: nothing moved
    for n, drop in ((100, ()), (110, ()), (210, ()), (215, ()), (215, ("d101", "d103", "d212"))):
        corpus = write_corpus(tmp_path / f"c{n}.jsonl", n, seed=5, drop=set(drop))
        _index(cfg, corpus, monkeypatch, as_files=True, on_missing="delete")
    path = cfg.store.path
    with Store(path, read_only=True, snapshot=False) as store:
        before = list(store.vectors.iter_batches())
        old = store.vectors.files()
        rows = store.con.execute("SELECT count(*) FROM vectors").fetchone()[0]
    assert len(old) == 2 and rows > 0  # rows after each file, with gaps of deleted chunks
    proc = multiprocessing.get_context("fork").Process(target=_move_killed, args=(path,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    with Store(path, snapshot=False) as store:  # killed before the commit: rows in place
        assert store.con.execute("SELECT count(*) FROM vectors").fetchone()[0] == rows
        stray = len(_vector_files(cfg)) - len(old)
        assert stray > 0 and store.vectors.collect_files(set())["unrecorded"] == stray
        assert len(_vector_files(cfg)) == len(old)
        monkeypatch.setattr(vectors_module, "MOVE_GAP", 1)  # a file per run of ids
        assert store.vectors.move_rows_to_files(max_share=1.0) == rows
        after = list(store.vectors.iter_batches())
        files = store.vectors.files()
    assert len(files) >= 2 + 4  # each side of a file, each side of each gap
    stops = [vf.stop for vf in files]
    assert all(stop <= nxt.first for stop, nxt in zip(stops, files[1:]))  # never overlapping
    for got, want in zip((after, before), (before, after)):
        assert np.array_equal(
            np.concatenate([i for i, _ in got]), np.concatenate([i for i, _ in want])
        )
        assert np.array_equal(
            np.concatenate([v for _, v in got]), np.concatenate([v for _, v in want])
        )
    assert check_store(cfg).problems == []
    assert diagnose(Path(path), cfg).problems == []


def test_a_base_built_over_vector_files_never_computes_its_rescoring_codes(tmp_path, monkeypatch):
    """Built with the store's files, a base fills its first pass only and tunes by rescoring
    from the files: the same tuning, results and first pass as the base that computed an
    `RFlat` stage (float32 codes, the files' values) and dropped it on writing."""
    n, dim, cut = 6000, 32, 1500
    vectors = clustered(n, dim, seed=0, spread=0.7)
    ids = np.arange(n, dtype=np.int64)
    files = [vector_files.write(tmp_path, i, vectors[i : i + cut])[0] for i in range(0, n, cut)]
    config = IndexConfig(spec="auto", flat_limit=0, tune_sample=300)
    spec, prov = "IVF153,PQ16x4fs,RFlat", synthetic_provenance(dim)

    def batches():
        return [(ids[i : i + 1000], vectors[i : i + 1000]) for i in range(0, n, 1000)]

    held = VectorIndex.build_from_batches(spec, prov, config, batches, n)
    with monkeypatch.context() as m:
        m.setattr(vector_module, "fill", lambda *a, **k: pytest.fail("the stage was filled"))
        over = VectorIndex.build_from_batches(
            spec, prov, config, batches, n, files=(tmp_path, files)
        )
    assert held.rows is None and over.rows is not None and over.rows.files == files
    assert held.tuning is not None and over.tuning is not None
    # FAISS's stage and numpy rescore the same float32 rows summing in their own orders (CPU
    # kernels): a recall may move by a near-tie at the 10th place (1/3,000 of 300 queries);
    # the curve here is far from the target (0.91 at nprobe 2, 0.98 at 3), so the tuned values
    # do not move
    recalls = {"recall@10", "curve", "seconds"}
    assert {k: v for k, v in over.tuning.items() if k not in recalls} == {
        k: v for k, v in held.tuning.items() if k not in recalls
    }
    assert over.tuning["curve"].keys() == held.tuning["curve"].keys()
    for value, recall in held.tuning["curve"].items():
        assert abs(over.tuning["curve"][value] - recall) <= 0.002
    queries = clustered(n + 20, dim, seed=0, spread=0.7)[n:]
    for where in (None, ids[::3], ids[:7]):  # unfiltered, a selector, the exact path
        s1, i1 = over.search(queries, 10, allowed=where)
        s2, i2 = held.search(queries, 10, allowed=where)
        _same_ranking(s1, i1, s2, i2)
    unfiltered = held.search(queries, 10)
    over.save(tmp_path)
    loaded = VectorIndex.load(tmp_path, config)
    assert loaded is not None and loaded.rows is not None
    assert [r["name"] for r in _info_at(tmp_path)["base"]["rows"]] == [f.name for f in files]
    _same_ranking(*loaded.search(queries, 10), *unfiltered)


def _same_ranking(s1, i1, s2, i2, tol: float = 1e-5) -> None:
    """The same scores at every rank (within `tol`: kernels sum in their own orders), and the
    same ids but where two scores within `tol` trade places."""
    np.testing.assert_allclose(s1, s2, rtol=tol, atol=tol)
    assert np.mean(i1 == i2) >= 0.99


def _info_at(store: Path) -> dict:
    version = current_version(store)
    return json.loads((store / "index" / str(version) / "provenance.json").read_text())
