"""Snapshots as Parquet segments, on a store driven directly (no model): a publish writes only
what changed, a reader keeps its version (and its segments) while open, merging keeps few
segments, a killed publish leaves the last version readable and its leftovers collected."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
from store_kit import add, publish, record, store_with_docs

from indexer.records.versions import MANIFEST_FILE, SNAPSHOT_FILE, index_root, write_pointer
from indexer.store import Store, row_pack, segment_problems
from indexer.store.segments import merge_tail
from indexer.store.snapshot import segments_dir

N = 50


@pytest.fixture
def store(tmp_path):
    with store_with_docs(tmp_path / "s", N) as s:
        yield s


def manifest(store: Store, version: str) -> dict:
    return json.loads((index_root(store.path) / version / MANIFEST_FILE).read_text())


def text_of(store: Store, external_id: str) -> list:
    sql = "SELECT text FROM documents WHERE external_id = ?"
    return [r[0] for r in store.con.execute(sql, [external_id]).fetchall()]


def change_one(store: Store, external_id: str, text: str) -> None:
    with store.transaction():
        store.con.execute(
            "UPDATE documents SET text = ? WHERE external_id = ?", [text, external_id]
        )
        store.bump_data_version()


def live_rows(store: Store, table: str) -> list:
    return sorted(store.con.execute(f"SELECT * FROM {table}").fetchall(), key=repr)


def test_a_publish_after_one_change_writes_about_one_row(store):
    v1 = publish(store)
    change_one(store, "e7", "changed")
    v2 = publish(store)
    before, after = manifest(store, v1)["tables"], manifest(store, v2)["tables"]
    newest = after["documents"]["segments"][-1]
    assert (newest["n_rows"], newest["n_dead"]) == (1, 1)  # the new row and its tombstone
    assert after["documents"]["segments"][:-1] == before["documents"]["segments"]
    for table in ("chunks", "vectors", "runs"):
        assert after[table] == before[table], table  # unchanged: the same files
    written = sum(
        s["n_rows"] + s["n_dead"]
        for t in after
        for s in after[t]["segments"]
        if s not in before[t]["segments"]
    )
    assert written <= 2 + 6  # documents, and `meta` (data_version) merged with its 3 rows
    assert "embedding" not in [c for c, _ in after["vectors"]["columns"]]
    with Store(store.path, read_only=True) as reader:
        assert reader.version == v2 and text_of(reader, "e7") == ["changed"]
        assert reader.counts.documents() == N and reader.data_version() == store.data_version()


def test_views_keep_the_column_types_and_serve_threads(store):
    publish(store)
    with Store(store.path, read_only=True) as reader:
        types = {r[0]: r[1] for r in reader.con.execute("DESCRIBE documents").fetchall()}
        assert (types["metadata"], types["ingested_at"]) == ("JSON", "TIMESTAMP")
        sql = "SELECT metadata->>'$.lang' FROM documents WHERE external_id = 'e3'"
        assert reader.con.execute(sql).fetchone() == ("en",)
        tables = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'reviews'"
        assert reader.scalar(tables) == 1
        reader.share_across_threads()
        with ThreadPoolExecutor(4) as pool:
            counts = list(pool.map(lambda _: reader.counts.documents(), range(8)))
        assert counts == [N] * 8


def test_a_held_version_reads_on_and_is_collected_after_close(store):
    v1 = publish(store)
    reader = Store(store.path, read_only=True)
    old_files = {s["rows"] for t in manifest(store, v1)["tables"].values() for s in t["segments"]}
    old_files.discard(None)
    change_one(store, "e1", "changed")
    store.documents.delete("docs", ["e2"])
    publish(store)
    change_one(store, "e3", "changed too")
    v3 = publish(store)
    assert not (index_root(store.path) / v1).exists()  # the folder is gone, the reader is not
    assert text_of(reader, "e1") == ["text 1"] and text_of(reader, "e2") == ["text 2"]
    assert reader.counts.documents() == N
    with Store(store.path, read_only=True) as new:
        assert new.version == v3
        assert text_of(new, "e1") == ["changed"] and text_of(new, "e2") == []
        assert new.counts.documents() == N - 1
    where = segments_dir(store.path)
    assert (where / f"{manifest(store, v3)['id']}.json").is_file()
    reader.close()
    publish(store)
    left = {p.name for p in where.iterdir()}
    listed = {
        n
        for v in os.listdir(index_root(store.path))
        if v.startswith("v")
        for name, t in manifest(store, v)["tables"].items()
        for s in t["segments"]
        for n in _files(name, s)
    }
    assert left - listed == {f"{manifest(store, v)['id']}.json" for v in ("v3", "v4")}
    assert "documents" in " ".join(old_files) and not (old_files - listed) & left


def test_merging_keeps_few_segments_over_many_publishes(store):
    publish(store)
    for i in range(40):
        change_one(store, f"e{i % N}", f"edit {i}")
        if i % 3 == 0:
            add(store, "docs", [record(f"new{i}", f"new text {i}")], seed=i)
        if i % 5 == 0:
            store.documents.delete("docs", [f"e{(i + 20) % N}"])
        version = publish(store)
    tables = manifest(store, version)["tables"]
    assert max(len(t["segments"]) for t in tables.values()) <= 6, {
        n: len(t["segments"]) for n, t in tables.items()
    }
    with Store(store.path, read_only=True) as reader:
        for table in ("documents", "chunks", "meta", "runs"):
            assert live_rows(reader, table) == live_rows(store, table), table
        vectors = "SELECT chunk_id FROM vectors ORDER BY 1"
        assert reader.con.execute(vectors).fetchall() == store.con.execute(vectors).fetchall()


def test_merge_rule():
    assert merge_tail([100]) == 0
    assert merge_tail([100, 2]) == 1  # a small newest segment waits
    assert merge_tail([100, 4, 2]) == 1  # 4 <= 2 * 2: the two small ones merge
    assert merge_tail([10, 8, 2]) == 2  # 8 > 2 * 2: no merge yet
    assert merge_tail([10, 3, 2]) == 0  # 3 <= 2 * 2, then 10 <= 2 * 5: all (tombstones dropped)


def test_identical_rows_count_as_copies(store):
    """`rejected` has no key: two identical rows are two rows, one gone is one tombstone."""
    row = ["run1", "f.jsonl", 1, "x", "bad", None]
    store.con.execute("INSERT INTO rejected VALUES (?, ?, ?, ?, ?, ?)", row)
    store.con.execute("INSERT INTO rejected VALUES (?, ?, ?, ?, ?, ?)", row)
    publish(store)
    store.con.execute("DELETE FROM rejected")
    store.con.execute("INSERT INTO rejected VALUES (?, ?, ?, ?, ?, ?)", row)
    publish(store)
    with Store(store.path, read_only=True) as reader:
        assert reader.scalar("SELECT count(*) FROM rejected") == 1


def test_a_damaged_segment_is_named_and_the_next_publish_rewrites_all(store):
    v1 = publish(store)
    folder = index_root(store.path) / v1
    seg = manifest(store, v1)["tables"]["documents"]["segments"][0]["rows"]
    (segments_dir(store.path) / seg).unlink()
    problems = segment_problems(store.path, folder)
    assert len(problems) == 1 and seg in problems[0] and "missing" in problems[0]
    with pytest.raises(Exception, match="doctor --repair"):
        Store(store.path, read_only=True)
    v2 = publish(store)
    assert segment_problems(store.path, index_root(store.path) / v2) == []
    assert manifest(store, v2)["tables"]["documents"]["segments"][0]["n_rows"] == N
    with Store(store.path, read_only=True) as reader:
        assert reader.counts.documents() == N


def test_a_store_published_as_a_copy_still_opens(store):
    """A version an earlier bertindex published (`index/vN/store.duckdb`, no manifest)."""
    store.con.execute("CHECKPOINT")
    folder = index_root(store.path) / "v1"
    folder.mkdir(parents=True)
    shutil.copyfile(store.db_path, folder / SNAPSHOT_FILE)
    write_pointer(store.path, "v1")
    with Store(store.path, read_only=True) as reader:
        assert reader.con_path == folder / SNAPSHOT_FILE and reader.counts.documents() == N
    v2 = publish(store)
    with Store(store.path, read_only=True) as reader:
        assert reader.version == v2 and reader.counts.documents() == N


def _publish_killed(path):
    os.environ["BERTINDEX_CRASH_AT"] = "snapshot.partial"
    with Store(path) as store:
        change_one(store, "e5", "never published")
        publish(store)


def _files(table: str, segment: dict) -> list[str]:
    """A segment's files: rows, tombstones, and a documents segment's row pack."""
    names = [n for n in (segment["rows"], segment["dead"]) if n]
    if table in row_pack.PACKED and segment["rows"]:
        names.append(row_pack.pack_name(segment["rows"]))
    return names


def test_sigkill_midway_leaves_the_version_readable_and_leftovers_collected(store):
    v1 = publish(store)
    path = store.path
    store.close()
    proc = multiprocessing.get_context("fork").Process(target=_publish_killed, args=(path,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    with Store(path, read_only=True) as reader:
        assert reader.version == v1 and text_of(reader, "e5") == ["text 5"]
    listed = {
        n
        for name, t in manifest(reader, v1)["tables"].items()
        for s in t["segments"]
        for n in _files(name, s)
    }
    leftovers = (
        {p.name for p in segments_dir(path).iterdir()}
        - listed
        - {f"{manifest(reader, v1)['id']}.json"}
    )
    assert leftovers  # the killed publish wrote some segments
    with Store(path) as again:
        v2 = publish(again)
        assert text_of(again, "e5") == ["never published"]
    left = {p.name for p in segments_dir(path).iterdir()}
    assert not leftovers & left
    with Store(path, read_only=True) as reader:
        assert reader.version == v2 and text_of(reader, "e5") == ["never published"]
