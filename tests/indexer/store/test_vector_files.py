"""Vector files (`indexer.store.vector_files`): a batch of at least `VECTOR_FILE_MIN_ROWS`
chunks keeps its vectors in one `.npy` file of the store's folder, recorded by the transaction
that commits its chunks.

A store written so equals one written as rows (documents, chunks, vectors, search results),
after changes and deletes too; a file none of whose chunks is left is dropped; a writer killed
after writing a file and before committing leaves nothing recorded, and the next run collects
the file; a recorded file that is missing is named by `doctor` and by the read that needs it; a
cluster worker's file is moved in, not rewritten, and one of the wrong shape commits nothing.
The threshold is lowered here so that small corpora take the files' path.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

import duckdb
import numpy as np
import pytest
from crash_kit import assert_same_results, write_corpus

import indexer.indexing.steps as steps
from indexer.errors import ConfigError, StoreError
from indexer.indexing.partitions import EncodedPartition, Work, join, vectors_folder
from indexer.indexing.run import run_index
from indexer.ingest.readers import Record
from indexer.ops.consistency import check_store
from indexer.ops.doctor import diagnose
from indexer.records.provenance import Provenance
from indexer.store import ChunkRows, Store, WorkerFile, WorkerFiles, write_worker_vectors
from indexer.store.vectors import FILE_BLOCK, FILE_CHUNK_IDS

BATCH = 100


@pytest.fixture
def as_files(monkeypatch):
    """Batches of 50 chunks or more keep their vectors in files."""
    monkeypatch.setattr(steps, "VECTOR_FILE_MIN_ROWS", 50)


def _configs(tiny_config, tmp_path):
    return tiny_config, tiny_config.with_overrides(**{"store.path": str(tmp_path / "rows")})


def _table_rows(cfg) -> int:
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        return store.con.execute("SELECT count(*) FROM vectors").fetchone()[0]


def _files_on_disk(cfg) -> list[str]:
    folder = Path(cfg.store.path) / "vectors"
    return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


def _index_rows_store(cfg, corpus, monkeypatch, on_missing="keep"):
    """Index `corpus` into `cfg`'s store with every vector a row (the default threshold)."""
    with monkeypatch.context() as m:
        m.setattr(steps, "VECTOR_FILE_MIN_ROWS", 1 << 30)
        run_index([str(corpus)], cfg, batch_size=BATCH, on_missing=on_missing)


def test_a_store_of_vector_files_equals_one_of_rows(tiny_config, tmp_path, monkeypatch, as_files):
    cfg, rows_cfg = _configs(tiny_config, tmp_path)
    corpus = write_corpus(tmp_path / "docs.jsonl", 599, seed=2)  # and a bad row: 6 batches
    _index_rows_store(rows_cfg, corpus, monkeypatch)
    summary = run_index([str(corpus)], cfg, batch_size=BATCH)
    assert summary["encoded"] == 599
    assert _table_rows(cfg) == 0 and _table_rows(rows_cfg) == summary["chunks"]
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        files = store.vectors.files()
        assert len(files) == 6 and sum(f.rows for f in files) == summary["chunks"]
        assert store.vectors.count() == store.counts.chunks() == summary["chunks"]
        ids = np.concatenate([i for i, _ in store.vectors.iter_batches(batch_rows=37)])
        assert (np.diff(ids) > 0).all() and len(ids) == summary["chunks"]
        some = ids[::29]
        assert np.array_equal(
            store.vectors.fetch(some),
            np.concatenate([v for _, v in store.vectors.iter_batches()])[::29],
        )
        assert store.checks.documents_missing_vectors() == []
        assert store.counts.collections()[0]["vectors"] == summary["chunks"]
    assert _files_on_disk(cfg) == sorted(f.name for f in files)
    with Store(cfg.store.path, read_only=True) as published:  # the snapshot: no embeddings
        assert published.version is not None
        assert published.counts.collections()[0]["vectors"] == summary["chunks"]
    got, ref = check_store(cfg), check_store(rows_cfg)
    assert got.problems == [] and got.differences(ref) == []
    assert_same_results(cfg, rows_cfg)
    assert diagnose(Path(cfg.store.path), cfg).problems == []


def test_changes_and_deletes_leave_file_rows_unread_and_empty_files_go(
    tiny_config, tmp_path, monkeypatch, as_files
):
    cfg, rows_cfg = _configs(tiny_config, tmp_path)
    corpus = write_corpus(tmp_path / "docs.jsonl", 400, seed=4)
    _index_rows_store(rows_cfg, corpus, monkeypatch)
    run_index([str(corpus)], cfg, batch_size=BATCH)
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        first = store.vectors.files()[0]
    # the first batch's documents all gone, some others changed, a few new (rows: < 50)
    gone = {f"d{i}" for i in range(0, 100)} | {"bad"}
    changed = {f"d{i}" for i in range(200, 230)}
    corpus2 = write_corpus(
        tmp_path / "docs2.jsonl", 400, seed=4, drop=gone, change=changed, extra=7
    )
    _index_rows_store(rows_cfg, corpus2, monkeypatch, on_missing="delete")
    run_index([str(corpus2)], cfg, batch_size=BATCH, on_missing="delete")
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        names = [f.name for f in store.vectors.files()]
        assert first.name not in names  # none of its chunks is left: dropped
        assert store.vectors.count() == store.counts.chunks()
    assert first.name not in _files_on_disk(cfg)
    got, ref = check_store(cfg), check_store(rows_cfg)
    assert got.problems == [] and got.differences(ref) == []
    assert_same_results(cfg, rows_cfg)


def _child(cfg, corpus, crash_at):
    import torch

    torch.set_num_threads(1)  # no OpenMP pool in a forked child
    steps.VECTOR_FILE_MIN_ROWS = 50  # the fork keeps the parent's modules, not its patches' undo
    os.environ["BERTINDEX_CRASH_AT"] = crash_at
    run_index([str(corpus)], cfg, batch_size=BATCH)


@pytest.mark.parametrize("point", ["batch.vector_file_written:2", "batch.before_commit:2"])
def test_a_writer_killed_around_a_file_records_nothing_and_the_next_run_collects_it(
    tiny_config, tmp_path, monkeypatch, as_files, point
):
    cfg, rows_cfg = _configs(tiny_config, tmp_path)
    corpus = write_corpus(tmp_path / "docs.jsonl", 300, seed=6)
    _index_rows_store(rows_cfg, corpus, monkeypatch)
    proc = multiprocessing.get_context("fork").Process(target=_child, args=(cfg, corpus, point))
    proc.start()
    proc.join(120)
    assert proc.exitcode == -signal.SIGKILL
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        recorded = [f.name for f in store.vectors.files()]
    assert len(recorded) == 1 and len(_files_on_disk(cfg)) == 2  # the second batch's: unrecorded
    summary = run_index([str(corpus)], cfg, batch_size=BATCH)
    assert summary["skipped_unchanged"] == 99  # the first batch (and the bad row) committed
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        recorded = sorted(f.name for f in store.vectors.files())
    assert _files_on_disk(cfg) == recorded and len(recorded) == 3
    got, ref = check_store(cfg), check_store(rows_cfg)
    assert got.problems == [] and got.differences(ref) == []


def test_a_missing_file_is_named_by_doctor_and_by_the_read_that_needs_it(
    tiny_config, tmp_path, as_files
):
    corpus = write_corpus(tmp_path / "docs.jsonl", 200, seed=8)
    run_index([str(corpus)], tiny_config, batch_size=BATCH)
    with Store(tiny_config.store.path, read_only=True, snapshot=False) as store:
        lost = store.vectors.files()[1]
    path = Path(tiny_config.store.path) / "vectors" / lost.name
    path.unlink()
    problems = diagnose(Path(tiny_config.store.path), tiny_config).problems
    assert any(str(p.path) == str(path) and "vector file(s) missing" in p.message for p in problems)
    with Store(tiny_config.store.path, read_only=True, snapshot=False) as store:
        with pytest.raises(StoreError, match=rf"{lost.name}.*cannot be read.*bertindex doctor"):
            list(store.vectors.iter_batches())
        assert store.vectors.count() == store.counts.chunks()  # counted without reading it


def _worker_batch(store, vectors, texts):
    doc_ids = store.documents.next_ids("doc_ids", len(texts))
    new = [
        (d, Record(f"w{i}", t, None, {}, "worker", i + 1), f"h{i}")
        for i, (d, t) in enumerate(zip(doc_ids, texts))
    ]
    n = len(texts)
    ends = [len(t) for t in texts]
    return new, ChunkRows(doc_ids, [0] * n, [0] * n, ends, [3] * n, vectors)


def test_a_workers_file_is_moved_in_and_one_of_the_wrong_shape_commits_nothing(tmp_path):
    store_dir = tmp_path / "store"
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((40, 8)).astype(np.float32)
    texts = [f"text {i}" for i in range(40)]
    with Store(store_dir) as store:
        store.vectors.set_provenance(Provenance("m", "h", "mean", True, 16, 8, "fp32"))
        wrong = write_worker_vectors(store_dir, "p/0", vectors[:, :4])
        new, chunks = _worker_batch(store, WorkerFiles((WorkerFile(wrong.path, 40, 8),), 8), texts)
        with pytest.raises(StoreError, match=r"holds \(40, 4\).*40 chunks of 8"):
            store.documents.write_batch("c", new, [], [], chunks, [], "run", as_file=True)
        assert store.counts.documents() == 0 and store.vectors.files() == []
        made = write_worker_vectors(store_dir, "p/1", vectors)
        assert made.path.startswith(str(store_dir / "vectors" / "incoming"))
        new, chunks = _worker_batch(store, WorkerFiles((made,), 8), texts)
        added, _ = store.documents.write_batch("c", new, [], [], chunks, [], "run", as_file=True)
        assert not os.path.exists(made.path)  # moved, not copied
        assert np.array_equal(store.vectors.fetch(np.asarray(added)), vectors)
        assert store.vectors.count() == 40


def test_workers_write_files_only_where_they_see_the_store_folder(tmp_path):
    store_dir = tmp_path / "store"

    def here(fn, path, token):  # a worker on this machine: the same folder
        return {"w0": fn(path, token), "w1": fn(path, token)}

    def elsewhere(fn, path, token):  # one worker whose disk has no such folder
        return {"w0": fn(path, token), "w1": fn(str(tmp_path / "other" / "probe"), token)}

    assert vectors_folder(store_dir, "auto", here) == str(store_dir.resolve())
    assert vectors_folder(store_dir, "send", here) is None
    assert vectors_folder(store_dir, "auto", elsewhere) is None
    with pytest.raises(ConfigError, match=r"worker w1 does not see the store's folder.*send"):
        vectors_folder(store_dir, "files", elsewhere)
    assert list((store_dir / "vectors" / "incoming").iterdir()) == []  # probes removed


def test_join_hands_the_workers_files_on_in_order(tmp_path):
    rng = np.random.default_rng(1)
    parts = []
    for i, n in enumerate((3, 5)):
        made = write_worker_vectors(
            tmp_path, f"p{i}", rng.standard_normal((n, 4)).astype(np.float32)
        )
        zero32, zero64 = np.zeros(n, np.int32), np.zeros(n, np.int64)
        owners = np.arange(n, dtype=np.int32)
        parts.append(
            EncodedPartition(
                f"p{i}", owners, zero32, zero64, zero64, zero32, made, {}, Work("w", n, 1, 0.0)
            )
        )
        assert parts[-1].nbytes() == n * (4 + 4 + 8 + 8 + 4)  # no vector bytes travel
    rows = join(parts, [0, 3], 4)
    assert rows.vectors == WorkerFiles((parts[0].vectors, parts[1].vectors), 4)
    assert rows.doc_ids == [0, 1, 2, 3, 4, 5, 6, 7] and len(rows.vectors) == 8


def test_a_batch_reported_failed_keeps_its_file_for_the_store_to_decide(
    tiny_config, tmp_path, monkeypatch, as_files
):
    """A commit DuckDB reports as failed may have landed (out of memory at 10M: the records
    were replayed from the log): the store says so (its data version moved), the batch counts
    as committed and keeps its file; a commit that failed is reported, and its file goes at
    the end of the run. The next run indexes only the failed batch's documents."""
    import contextlib

    import indexer.store.documents as documents
    from indexer.store.core import StoreCore

    real = StoreCore.transaction
    state = {"batches": 0, "landed": False}

    def failing(name: str) -> None:
        if name == "batch.before_commit":
            state["batches"] += 1
            state["landed"] = state["batches"] == 2  # committed, then reported failed
            if state["batches"] == 4:  # failed before the commit: rolled back
                raise duckdb.TransactionException("Failed to commit: could not allocate block")

    @contextlib.contextmanager
    def transaction(self):
        with real(self):
            yield
        if state["landed"]:
            state["landed"] = False
            raise duckdb.TransactionException("Failed to commit: could not allocate block")

    monkeypatch.setattr(documents, "crash_point", failing)
    monkeypatch.setattr(StoreCore, "transaction", transaction)
    corpus = write_corpus(tmp_path / "docs.jsonl", 400, seed=9)
    summary = run_index([str(corpus)], tiny_config, batch_size=BATCH)
    assert len(summary["failed_batches"]) == 1  # the batch that landed is not reported
    with Store(tiny_config.store.path, read_only=True, snapshot=False) as store:
        recorded = sorted(f.name for f in store.vectors.files())
        assert store.vectors.missing_files() == []
        assert store.checks.documents_missing_vectors() == []
        stored = store.counts.documents()
    assert summary["encoded"] == stored  # the landed batch counted as committed
    assert _files_on_disk(tiny_config) == recorded and len(recorded) == 3
    assert diagnose(Path(tiny_config.store.path), tiny_config).problems == []
    state["batches"] = 99  # no failure now
    again = run_index([str(corpus)], tiny_config, batch_size=BATCH)
    assert again["failed_batches"] == [] and again["encoded"] == BATCH
    assert again["skipped_unchanged"] == stored


def test_the_chunks_in_files_are_found_by_blocks_whatever_the_files_sizes_and_gaps():
    """`FILE_CHUNK_IDS` (an equality join on blocks of chunk ids, then each file's range) finds
    exactly the chunks inside a recorded file: files shorter than a block, several in one
    block, one over many blocks, starts off the blocks' edges, chunks between files and past
    the last, ids of deleted chunks missing."""
    files = [(0, 5), (5, 300), (700, 2 * FILE_BLOCK + 3), (3 * FILE_BLOCK + 1, 1), (9000, 4096)]
    chunks = np.setdiff1d(np.arange(15000), np.arange(800, 900))  # some chunks deleted
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE chunks AS SELECT range AS chunk_id FROM range(15000) "
        "WHERE range < 800 OR range >= 900"
    )
    con.execute("CREATE TABLE vector_files (first_chunk_id BIGINT, n_rows BIGINT)")
    con.executemany("INSERT INTO vector_files VALUES (?, ?)", [list(f) for f in files])
    found = sorted(r[0] for r in con.execute(FILE_CHUNK_IDS).fetchall())
    inside = [c for c in chunks.tolist() if any(a <= c < a + n for a, n in files)]
    assert found == inside and len(found) > 6000
