"""A snapshot's DuckDB connection is made when a query first needs it, and its views when a
query first names their table (`lazy_views`): a reader answers `meta`, table and row questions
from the manifest without a connection (and an older manifest through one), gets the live file's
answers either way, catalog queries see every table, threads racing to the same view all get
it, and a truncated segment is still named when the snapshot opens."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pytest
from store_kit import PROVENANCE, publish, store_with_docs

from indexer.errors import StoreError
from indexer.records.versions import MANIFEST_FILE, version_dir
from indexer.store import DB_NAME, Store
from indexer.store.snapshot import read_manifest, segments_dir

N = 40


@pytest.fixture
def published(tmp_path):
    with store_with_docs(tmp_path / "s", N) as s:
        publish(s)
        live = {
            table: s.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("documents", "chunks", "vectors", "meta", "runs")
        }
    return tmp_path / "s", live


def pending(store: Store) -> set[str]:
    store.con  # noqa: B018 - the connection, made on first use
    return set(store._snapshot.views.pending)  # the views not created yet


def live_meta(path) -> dict[str, str]:
    with duckdb.connect(str(path / DB_NAME), read_only=True) as con:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())


def opened(store: Store) -> bool:
    return store._snapshot.opened  # whether the snapshot's connection was made


def test_meta_tables_and_rows_come_from_the_manifest_without_a_connection(published):
    path, _ = published
    meta = live_meta(path)
    with Store(path, read_only=True) as store:
        assert store.version is not None and not opened(store)
        for key, value in meta.items():
            assert store.meta(key) == value
        assert store.meta("no such key") is None
        assert store.vectors.provenance() == PROVENANCE
        assert store.data_version() == int(meta["data_version"])
        assert store.has_table("reviews") and not store.has_table("no_such_table")
        assert not store.has_rows("labels")
        hit = ("docs", "e1")
        assert store.annotations.by_document([hit]) == {hit: {"labels": [], "entities": []}}
        assert not opened(store)
        assert store.has_rows("documents")  # a table with segments: DuckDB is asked
        assert opened(store)


def test_a_manifest_without_meta_is_read_through_the_connection(published):
    """A snapshot published before manifests recorded `meta` reads it from its segments."""
    path, _ = published
    meta = live_meta(path)
    with Store(path, read_only=True) as store:
        version = store.version
    manifest_file = version_dir(path, version) / MANIFEST_FILE
    manifest = read_manifest(manifest_file)
    del manifest["facts"]["meta"]
    text = json.dumps(manifest, indent=1)
    manifest_file.write_text(text)
    (segments_dir(path) / f"{manifest['id']}.json").write_text(text)  # what readers lock
    with Store(path, read_only=True) as store:
        assert store.meta("data_version") == meta["data_version"]
        assert store.vectors.provenance() == PROVENANCE
        assert opened(store)


def test_each_view_waits_for_the_first_query_naming_it(published):
    path, live = published
    with Store(path, read_only=True) as store:
        assert store.version is not None  # the snapshot, not the live file
        assert {"documents", "chunks", "vectors"} <= pending(store)
        assert store.con.execute("SELECT count(*) FROM chunks").fetchone()[0] == live["chunks"]
        assert "chunks" not in pending(store) and "documents" in pending(store)
        # a catalog query naming its table by a parameter creates that view only
        sql = "SELECT count(*) FROM information_schema.tables WHERE table_name = ?"
        assert store.con.execute(sql, ["documents"]).fetchone()[0] == 1
        assert "documents" not in pending(store) and "vectors" in pending(store)
        # one naming no table creates them all, so listings see every table
        listed = {
            r[0]
            for r in store.con.execute(
                "SELECT table_name FROM information_schema.tables"
            ).fetchall()
        }
        assert not pending(store)
        assert set(live) <= listed
        for table, count in live.items():  # the same rows as the live file
            assert store.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == count


def test_threads_racing_to_one_view_all_read_it(published):
    path, live = published
    with Store(path, read_only=True) as store:
        store.share_across_threads()
        assert "documents" in pending(store)

        def count(_) -> int:
            return store.con.execute("SELECT count(*) FROM documents").fetchone()[0]

        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(count, range(32))) == {live["documents"]}


def test_a_truncated_segment_is_named_at_open(published):
    path, _ = published
    [segment] = [p for p in segments_dir(path).glob("documents-*.parquet") if ".dead" not in p.name]
    segment.write_bytes(segment.read_bytes()[:-100])
    with pytest.raises(StoreError, match=rf"cannot open the published snapshot.*{segment.name}"):
        Store(path, read_only=True)
