"""The store package on its own: migrations from an empty file, a batch written and read back,
deletes, a rolled-back batch, hostile filter values, snapshots, a group of tables on a bare
core, and the guard that keeps SQL inside `indexer/store/`. No model: vectors are numpy arrays."""

from __future__ import annotations

import ast
from pathlib import Path

import duckdb
import numpy as np
import pytest
from store_kit import PROVENANCE, add, chunks_for, publish, record
from testkit import ROOT

import indexer.store.documents as documents_module
import indexer.store.vectors as vectors_module
from indexer.errors import StoreError
from indexer.ingest.readers import Rejected
from indexer.records.versions import MANIFEST_FILE
from indexer.store import (
    DB_NAME,
    SCHEMA_VERSION,
    DocText,
    Store,
    StoredDoc,
    content_hash,
    read_snapshot_facts,
)
from indexer.store.core import StoreCore
from indexer.store.counts import Counts
from indexer.store.filters import filter_clauses
from indexer.store.schema import MIGRATIONS, SNAPSHOT_UNCHANGED, apply_migration
from indexer.store.vectors import Vectors

# Modules outside indexer/store/ still speaking SQL (none: keep it that way).
PENDING_SQL: set[str] = set()


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s") as s:
        s.vectors.set_provenance(PROVENANCE)
        yield s


def test_migrations_from_an_empty_file(tmp_path):
    with Store(tmp_path / "s") as store:
        assert store.side.names() == [
            "annotated",
            "annotations",
            "dedup_members",
            "dedup_state",
            "entities",
            "inbox_ledger",
            "rejected",
            "review_heads",
            "reviews",
            "runs",
            "source_files",
            "tokens",
        ]
        assert store.counts.documents() == store.counts.chunks() == store.vectors.count() == 0
        assert store.vectors.provenance() is None
        # each step after 1 moved it, but those no snapshot reader needs (vector files)
        assert store.data_version() == SCHEMA_VERSION - 1 - len(SNAPSHOT_UNCHANGED)
    with duckdb.connect(str(tmp_path / "s" / DB_NAME), read_only=True) as con:
        version = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),)


def test_a_schema_1_store_is_upgraded_and_a_newer_one_refused(tmp_path):
    folder = tmp_path / "s"
    folder.mkdir()
    with duckdb.connect(str(folder / DB_NAME)) as con:
        apply_migration(con, 1)
    with Store(folder) as store:
        assert "annotations" in store.side.names()
    with duckdb.connect(str(folder / DB_NAME)) as con:
        con.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(max(MIGRATIONS) + 1)]
        )
    with pytest.raises(StoreError, match="newer bertindex"):
        Store(folder)
    with pytest.raises(StoreError, match="newer bertindex"):
        Store(folder)  # the lock was released: the error repeats, never "being written"


def test_write_batch_then_read_back(store):
    records = [record("a", "cat sat", lang="en"), record("b", "dog ran", lang="fr")]
    doc_ids, chunk_ids, chunks = add(store, "docs", records)
    assert store.documents.existing("docs", ["a", "b", "zzz"]) == {
        "a": StoredDoc(doc_ids[0], content_hash(records[0]), '{"lang": "en"}'),
        "b": StoredDoc(doc_ids[1], content_hash(records[1]), '{"lang": "fr"}'),
    }
    assert store.documents.existing("other", ["a"]) == {}
    assert store.documents.last_doc_id() == doc_ids[1]  # an index run looks only up to there
    assert sorted(store.documents.existing("docs", ["a", "b"], up_to=doc_ids[0])) == ["a"]
    assert store.documents.existing("docs", ["a", "b"], up_to=0) == {}  # an empty store's
    hits = store.reads.fetch_hits(chunk_ids)
    assert [
        (h.external_id, h.text, h.metadata, h.start_char, h.end_char)
        for h in (hits[c] for c in chunk_ids)
    ] == [("a", "cat sat", {"lang": "en"}, 0, 3), ("b", "dog ran", {"lang": "fr"}, 0, 3)]
    whole = store.reads.fetch_documents(doc_ids)[doc_ids[1]]
    assert (whole.chunk_id, whole.start_char, whole.end_char) == (-1, 0, len("dog ran"))
    assert store.reads.documents_text(doc_ids[::-1]) == [
        DocText(doc_ids[0], None, "cat sat"),
        DocText(doc_ids[1], None, "dog ran"),
    ]
    np.testing.assert_array_equal(store.vectors.fetch(np.asarray(chunk_ids)), chunks.vectors)
    ids, vecs = next(iter(store.vectors.iter_batches()))
    np.testing.assert_array_equal(ids, chunk_ids)
    np.testing.assert_array_equal(vecs, chunks.vectors)
    keys, docs, _, _ = store.vectors.chunk_span_map()
    assert dict(zip(keys.tolist(), docs.tolist())) == dict(zip(chunk_ids, doc_ids))
    assert store.counts.collections() == [
        {"collection": "docs", "documents": 2, "chunks": 2, "vectors": 2}
    ]
    assert store.checks.integrity_counts().__dict__ == {
        "duplicate_ids": 0,
        "orphan_chunks": 0,
        "stray_vectors": 0,
    }


def test_changed_document_replaces_its_chunks(store):
    (doc_id,), (old_chunk,), _ = add(store, "docs", [record("a", "first")])
    changed = record("a", "second")
    new = chunks_for([doc_id], seed=1)
    added, removed = store.documents.write_batch(
        "docs",
        [],
        [(doc_id, changed, content_hash(changed))],
        [],
        new,
        [Rejected("x.jsonl", 3, None, "bad")],
        "run2",
    )
    assert removed == [old_chunk] and added != [old_chunk]
    assert store.documents.existing("docs", ["a"])["a"].content_hash == content_hash(changed)
    assert store.reads.documents_text([doc_id]) == [DocText(doc_id, None, "second")]
    np.testing.assert_array_equal(store.vectors.chunk_ids(), added)
    np.testing.assert_array_equal(store.vectors.fetch(np.asarray(added)), new.vectors)


def test_vectors_are_fetched_a_bounded_number_of_rows_a_query(store, monkeypatch):
    """A publish fetches its added chunks' vectors FETCH_ROWS a query: DuckDB holds a sorted
    result whole, and 65,536 vectors outgrew the writer's memory at 10M documents."""
    doc_ids, chunk_ids, chunks = add(store, "docs", [record(i, f"text {i}") for i in "abcdefg"])
    monkeypatch.setattr(vectors_module, "FETCH_ROWS", 3)
    wanted = np.asarray(chunk_ids)[[0, 2, 3, 4, 5, 6]]
    np.testing.assert_array_equal(store.vectors.fetch(wanted), chunks.vectors[[0, 2, 3, 4, 5, 6]])
    with pytest.raises(StoreError, match="chunk ids have no stored vector"):
        store.vectors.fetch(np.append(wanted, 10**9))


def test_delete_by_id_and_keep(store):
    doc_ids, chunk_ids, _ = add(store, "docs", [record(i, f"text {i}") for i in "abc"])
    before = store.data_version()
    deleted, removed = store.documents.delete("docs", external_ids=["b", "nope"])
    assert (deleted, removed) == (["b"], [chunk_ids[1]])
    assert store.data_version() == before + 1
    deleted, removed = store.documents.delete("docs", keep=["a"])
    assert (deleted, removed) == (["c"], [chunk_ids[2]])
    assert store.documents.delete("docs", external_ids=["zzz"]) == ([], [])
    assert sorted(store.documents.existing("docs", list("abc"))) == ["a"]
    assert store.vectors.count() == store.counts.chunks() == 1
    assert store.documents.delete_doc_ids([doc_ids[0]]) == [chunk_ids[0]]
    assert store.counts.documents() == store.vectors.count() == 0
    with pytest.raises(ValueError, match="exactly one"):
        store.documents.delete("docs")


def test_failed_batch_leaves_nothing(store, monkeypatch):
    add(store, "docs", [record("a", "kept")])
    before = (
        store.data_version(),
        store.counts.documents(),
        store.counts.chunks(),
        store.vectors.count(),
    )

    def fail(name):
        if name == "batch.before_commit":
            raise RuntimeError("disk full")

    monkeypatch.setattr(documents_module, "crash_point", fail)
    with pytest.raises(RuntimeError, match="disk full"):
        add(store, "docs", [record("b", "lost"), record("c", "lost too")])
    assert (
        store.data_version(),
        store.counts.documents(),
        store.counts.chunks(),
        store.vectors.count(),
    ) == before
    assert sorted(store.documents.existing("docs", ["a", "b", "c"])) == ["a"]
    assert store.runs.last() == []


HOSTILE = [
    "x' OR '1'='1",
    "'; DROP TABLE documents; --",
    '" OR 1=1 --',
    "*",
    "$..lang",
    "a.b",
    "lang') OR ('1'='1",
    "\x00",
    "%",
    "_",
]


def test_hostile_filter_values_are_bound(store):
    doc_ids, chunk_ids, _ = add(
        store, "docs", [record("a", "t", lang="en", **{"a.b": "dot"}), record("b", "u", lang="fr")]
    )
    np.testing.assert_array_equal(store.filters.doc_ids(where=[("lang", "en")]), [doc_ids[0]])
    np.testing.assert_array_equal(store.filters.chunk_ids(where=[("a.b", "dot")]), [chunk_ids[0]])

    def clauses_for(value):
        return filter_clauses(
            "d.", value, [(value, value)], [(value, value)], [(value, value), (value, None)]
        )

    benign = clauses_for("en")
    for value in HOSTILE:
        clauses = clauses_for(value)
        assert clauses.sql == benign.sql  # the SQL text never depends on a value
        assert clauses.sql.count("?") == len(clauses.params)
        assert clauses.params.count(value) == 7  # all but the where key, bound as a JSON pointer
        for filters in (
            {"collection": value},
            {"where": [("lang", value)]},
            {"where": [(value, "en")]},
            {"labels": [(value, value)]},
            {"entities": [(value, value)]},
            {"entities": [(value, None)]},
        ):
            assert len(store.filters.doc_ids(**filters)) == 0, filters
            assert len(store.filters.chunk_ids(**filters)) == 0, filters
    assert store.filters.doc_ids() is None and store.filters.chunk_ids() is None
    assert store.counts.documents() == 2
    assert store.checks.integrity_counts().duplicate_ids == 0


def test_snapshot_segments_and_facts(store):
    add(store, "docs", [record("a", "t")])
    folder = store.path / "index" / publish(store)
    facts = read_snapshot_facts(folder)
    assert (facts.data_version, facts.chunks) == (store.data_version(), 1)
    manifest = folder / MANIFEST_FILE
    manifest.write_text(manifest.read_text()[:50])
    with pytest.raises(StoreError, match=str(manifest)):
        read_snapshot_facts(folder)


def test_unreachable_rows_are_counted_and_deleted(store):
    doc_ids, chunk_ids, _ = add(store, "docs", [record("a", "t"), record("b", "u")])
    store.con.execute("DELETE FROM documents WHERE doc_id = ?", [doc_ids[0]])
    store.con.execute("DELETE FROM chunks WHERE chunk_id = ?", [chunk_ids[1]])
    counts = store.checks.integrity_counts()
    assert (counts.orphan_chunks, counts.stray_vectors) == (1, 1)
    assert store.checks.delete_unreachable() == {"chunks": 1, "vectors": 2}
    assert store.vectors.count() == store.counts.chunks() == 0


def _sql_uses(path: Path) -> list[str]:
    """Where a module touches a DuckDB connection or DuckDB itself (line: what)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and node.attr in ("con", "execute", "executemany"):
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Import) and any(
            a.name.split(".")[0] == "duckdb" for a in node.names
        ):
            found.append(f"{node.lineno}: import duckdb")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "duckdb":
            found.append(f"{node.lineno}: from duckdb import")
    return found


def test_only_the_store_package_speaks_sql():
    offenders = {}
    for top in ("indexer", "search", "flows"):
        for path in sorted((ROOT / top).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name.startswith("indexer/store/") or name in PENDING_SQL:
                continue
            uses = _sql_uses(path)
            if uses:
                offenders[name] = uses
    assert not offenders, (
        f"SQL outside indexer/store/: {offenders}. Add a Store method in the store module "
        "of that concept and call it instead"
    )
    for name in PENDING_SQL:  # drop an entry once its module no longer needs it
        assert _sql_uses(ROOT / name), f"{name} no longer speaks SQL: remove it from PENDING_SQL"


def test_recorded_run_logs_completion_failure_and_interruption(tmp_path):
    with Store(tmp_path / "runs") as store:
        with store.runs.recorded_run("dedup") as run:
            assert store.runs.last_of("dedup")["status"] == "running"
            run.summary = {"read": 3}
        done = store.runs.last_of("dedup")
        assert (done["run_id"], done["status"], done["summary"]) == (
            run.id,
            "completed",
            {"read": 3},
        )
        assert done["finished_at"] >= done["started_at"]

        with (
            pytest.raises(RuntimeError, match="disk\nfull"),
            store.runs.recorded_run("report") as failing,
        ):
            failing.summary = {"buckets": 2}
            raise RuntimeError("disk\nfull")
        failed = store.runs.last_of("report")
        assert failed["status"] == "failed"
        assert failed["summary"] == {"buckets": 2, "error": "disk full"}  # one line

        with store.runs.recorded_run("doctor") as soft:
            soft.fail("repair stopped")  # a run that ends failed without raising
        assert store.runs.last_of("doctor")["status"] == "failed"

        # a run left `running` (its process killed) is marked interrupted by the next run
        killed = store.runs.recorded_run("index")
        killed.__enter__()
    with Store(tmp_path / "runs") as store:
        with store.runs.recorded_run("delete"):
            pass
        statuses = {r["kind"]: r["status"] for r in store.runs.last(10)}
    assert statuses == {
        "index": "interrupted",
        "delete": "completed",
        "doctor": "failed",
        "report": "failed",
        "dedup": "completed",
    }


def test_a_group_of_tables_stands_on_a_bare_core(tmp_path):
    # a group needs its core and the groups it names, never the whole Store
    with StoreCore(tmp_path / "s") as core:
        vectors = Vectors(core)
        counts = Counts(core, vectors)
        assert counts.collections() == [] and vectors.count() == 0
        vectors.set_provenance(PROVENANCE)
        assert vectors.provenance() == PROVENANCE and counts.documents() == 0


def test_a_writer_checkpoints_only_after_a_large_log(store):
    # 16 MB (DuckDB's default) made an index run rewrite the indexes every few batches
    (value,) = store.con.execute("SELECT current_setting('checkpoint_threshold')").fetchone()
    assert value == "953.6 MiB"  # 1 GB


def test_a_writer_stores_embeddings_uncompressed_not_as_alprd(tmp_path):
    # DuckDB would pick ALPRD for embedding floats, which took more room than the floats
    # themselves and twice the checkpoint time (core.WRITER_DISABLED_COMPRESSION)
    with Store(tmp_path / "s") as store:
        store.vectors.set_provenance(PROVENANCE)
        add(store, "c", [record(f"d{i}", f"text {i}") for i in range(20_000)])
        store.con.execute("CHECKPOINT")
        methods = {
            row[0]
            for row in store.con.execute(
                "SELECT DISTINCT compression FROM pragma_storage_info('vectors')"
            ).fetchall()
        }
    assert "Uncompressed" in methods and "ALPRD" not in methods


def test_a_runs_map_of_stored_ids_finds_what_the_join_finds(store, monkeypatch):
    monkeypatch.setattr("indexer.store.stored_ids.MIN_DOCUMENTS", 3)
    texts = {f"id{i}": f"text {i}" for i in range(40)}
    add(store, "docs", [record(k, v) for k, v in texts.items()])
    add(store, "other", [record("id1", "elsewhere"), record("id99", "only here")])
    last = store.documents.last_doc_id()
    add(store, "docs", [record("late", "after the run began")])
    asked = ["id3", "id39", "nope", "id99", "late", "id0", "id3"]
    joined = store.documents.existing("docs", asked, up_to=None)
    assert sorted(joined) == ["id0", "id3", "id39", "late"]
    mapped = store.documents.existing("docs", asked, up_to=last)
    assert mapped == {k: v for k, v in joined.items() if k != "late"}
    assert store.documents._stored_ids[("docs", last)] is not None  # the map answered
    assert store.documents.existing("docs", ["nope", "late"], up_to=last) == {}
    assert store.documents.existing("other", ["id1"], up_to=last)["id1"].doc_id not in {
        d.doc_id for d in mapped.values()
    }
    # the same id in two collections, their rows interleaved: a batch whose stored rows fill
    # their doc id range is read by the range, and the other collection's row is not taken
    for collection, key in (("docs", "x"), ("other", "x"), ("docs", "y")):
        add(store, collection, [record(key, f"{key} in {collection}")])
    last = store.documents.last_doc_id()
    joined = store.documents.existing("docs", ["x", "y"], up_to=None)
    assert store.documents.existing("docs", ["x", "y"], up_to=last) == joined
    assert joined["x"].doc_id == last - 2 and joined["y"].doc_id == last


def test_a_writer_checkpoints_every_so_many_changed_documents(store, monkeypatch):
    monkeypatch.setattr(documents_module, "CHANGED_PER_CHECKPOINT", 2)
    doc_ids, _, _ = add(store, "docs", [record(k, "first") for k in "abc"])
    wal = store.db_path.with_name(store.db_path.name + ".wal")

    def change(keys: str, seed: int) -> None:
        rows = [
            (d, record(k, f"new {seed}"), content_hash(record(k, f"new {seed}")))
            for d, k in zip(doc_ids, "abc")
            if k in keys
        ]
        chunks = chunks_for([d for d, _, _ in rows], seed=seed)
        store.documents.write_batch("docs", [], rows, [], chunks, [], f"run{seed}")

    change("a", 1)  # one changed document: under the threshold, the log keeps it
    assert wal.is_file() and wal.stat().st_size > 0
    change("bc", 2)  # three since the last checkpoint: the log is written into the file
    assert not wal.is_file() or wal.stat().st_size == 0
    assert store.documents.existing("docs", ["c"])["c"].content_hash == content_hash(
        record("c", "new 2")
    )


def test_a_writer_checkpoints_every_so_many_appended_documents_and_chunks(store, monkeypatch):
    """Appends whose vectors go to files write little log, so the log's threshold alone let
    the primary keys' index nodes fill the writer's memory at 10M."""
    monkeypatch.setattr(documents_module, "ADDED_PER_CHECKPOINT", 10)
    wal = store.db_path.with_name(store.db_path.name + ".wal")
    add(store, "docs", [record(k, "first") for k in "abc"])  # 3 documents, 3 chunks
    assert wal.is_file() and wal.stat().st_size > 0
    add(store, "docs", [record(k, "second") for k in "de"])  # 10 since the last checkpoint
    assert not wal.is_file() or wal.stat().st_size == 0
    assert sorted(store.documents.existing("docs", list("abcde"))) == list("abcde")
