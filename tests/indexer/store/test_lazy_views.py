"""A snapshot's views are created when a query first names their table (`lazy_views`): a
reader opens without binding them, gets the live file's answers either way, catalog queries see
every table, threads racing to the same view all get it, and a truncated segment is still named
when the snapshot opens."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from store_kit import publish, store_with_docs

from indexer.errors import StoreError
from indexer.store import Store
from indexer.store.snapshot import segments_dir

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
    return set(store._snapshot.views.pending)  # the views not created yet


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
