"""Row packs (`indexer.store.row_pack`): written by each publish for its documents segments
(and for any segment left without one), collected with their segment, and read only when they
hold the rows of the Parquet beside them; otherwise the Parquet answers the same rows."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
from store_kit import PROVENANCE, add, publish, record

from indexer.store import Store, row_pack, segment_fetch
from indexer.store.snapshot import segments_dir


def _documents_segments(store: Store) -> list[dict]:
    with Store(store.path, read_only=True) as reader:
        return reader.reads.core._snapshot.manifest["tables"]["documents"]["segments"]


def _packs(store: Store) -> list[str]:
    return sorted(p.name for p in segments_dir(store.path).glob(f"*{row_pack.SUFFIX}"))


def _rows_files(store: Store) -> list[str]:
    """The documents rows segments still on disk (the current version's and those an older
    version not yet collected holds)."""
    found = segments_dir(store.path).glob("documents-*.parquet")
    return sorted(row_pack.pack_name(p.name) for p in found if not p.name.endswith(".dead.parquet"))


def test_packs_follow_their_segments_through_publishes_and_merges(tmp_path):
    with Store(tmp_path / "s") as s:
        s.vectors.set_provenance(PROVENANCE)
        for round_ in range(4):  # publishes that add segments, merges that replace them
            add(s, "docs", [record(f"r{round_}-{i}", f"text {round_} {i}") for i in range(7)])
            publish(s)
            rows = [seg["rows"] for seg in _documents_segments(s) if seg["rows"]]
            assert set(row_pack.pack_name(r) for r in rows) <= set(_packs(s))
            assert _packs(s) == _rows_files(s)  # collected with their segments
        assert len(_packs(s)) < 4  # merged segments' packs went with them
        missing = segments_dir(s.path) / _packs(s)[0]
        missing.unlink()  # as an older store or a killed publish leaves it
        add(s, "docs", [record("late", "late text")])
        publish(s)  # writes the new segment's pack and the missing one
        assert missing.exists() and _packs(s) == _rows_files(s)
        with Store(s.path, read_only=True) as reader:
            hits = reader.reads.fetch_documents(list(range(1, 40)))
        assert sorted(h.external_id for h in hits.values())[:3] == ["late", "r0-0", "r0-1"]
        assert len(hits) == 29


def _packed(path: Path, keys: np.ndarray, seq: int, group_rows: int) -> row_pack.RowPack | None:
    """A documents segment of `keys` (text `t<key>`, `other` twice the key) in row groups of
    `group_rows`, and its pack of doc_id and text, opened."""
    table = pa.table(
        {
            "doc_id": keys,
            "text": [f"t{k}" for k in keys],
            "other": keys * 2,
            "_h": keys.astype(np.uint64),
            "_seg": np.full(len(keys), seq),
        }
    )
    pq.write_table(table, path, row_group_size=group_rows)
    row_pack.write_pack(path, "doc_id", ("doc_id", "text"))
    return row_pack.open_pack(path, len(keys))


def test_a_pack_is_the_parquet_s_rows_batch_for_row_group(tmp_path):
    path = tmp_path / "documents-3.parquet"
    keys = np.array([g * 100 + j * 400 for g in range(4) for j in range(4)])  # scattered
    pack = _packed(path, keys, 3, 4)
    assert pack is not None and pack.columns == {"doc_id", "text", "_h", "_seg"}
    assert pack.lows.tolist() == [0, 100, 200, 300]
    assert pack.highs.tolist() == [1200, 1300, 1400, 1500]
    assert pack.batch(2).to_pydict()["text"] == [f"t{k}" for k in keys[8:12]]
    part = segment_fetch._Part(path, "doc_id", len(keys))
    assert part.pack is not None and part._file is None  # the Parquet is never opened
    assert part.groups(np.array([500, 1500])).tolist() == [1, 3]  # the pack's keys
    got = part.read(np.array([1, 3]), ["doc_id", "text"], np.array([500, 1500]))
    assert got.to_pydict() == {"doc_id": [500, 1500], "text": ["t500", "t1500"]}
    got = part.read(np.array([1]), ["doc_id", "other"], np.array([500]))  # not packed
    assert got.to_pydict() == {"doc_id": [500], "other": [1000]}


def test_a_pack_that_does_not_match_its_parquet_is_not_read(tmp_path, caplog):
    path = tmp_path / "documents-4.parquet"
    pq.write_table(
        pa.table(
            {"doc_id": np.arange(8), "_h": np.arange(8, dtype=np.uint64), "_seg": np.full(8, 4)}
        ),
        path,
        row_group_size=4,
    )
    row_pack.write_pack(path, "doc_id", ("doc_id",))
    caplog.set_level(logging.WARNING)
    assert row_pack.open_pack(path, 9) is None  # another row count than the manifest's
    assert "holds 8 rows" in caplog.text
    (tmp_path / row_pack.pack_name(path.name)).write_bytes(b"not arrow")
    assert row_pack.open_pack(path, 8) is None
    assert "unreadable" in caplog.text
    part = segment_fetch._Part(path, "doc_id", 8)
    assert part.pack is None
    assert part.read(np.array([1]), ["doc_id"], np.array([5])).to_pydict() == {"doc_id": [5]}


def test_a_pack_is_read_not_mapped_and_threads_share_it(tmp_path):
    """Hits are read with `pread`: through a mapping each hit's pages (and their fault-around
    neighbours) stayed in the reading process's page tables, ~1 GB of a server's Pss at 10M."""
    path = tmp_path / "documents-5.parquet"
    keys = np.arange(4096)
    pq.write_table(
        pa.table(
            {
                "doc_id": keys,
                "text": [f"text {k} " * 20 for k in keys],
                "_h": keys.astype(np.uint64),
                "_seg": np.full(len(keys), 5),
            }
        ),
        path,
        row_group_size=256,
    )
    row_pack.write_pack(path, "doc_id", ("doc_id", "text"))
    pack = row_pack.open_pack(path, len(keys))
    assert pack is not None

    def texts(group: int) -> list[str]:
        return pack.batch(group).column("text").to_pylist()

    with ThreadPoolExecutor(8) as pool:  # one reader, many threads: each gets its own rows
        got = list(pool.map(texts, [g % 16 for g in range(64)]))
    assert (
        got == [[f"text {k} " * 20 for k in range(g * 256, g * 256 + 256)] for g in range(16)] * 4
    )
    maps = Path("/proc/self/maps").read_text()
    assert row_pack.pack_name(path.name) not in maps


def _old_pack(path: Path, key: str, columns: tuple[str, ...]) -> None:
    """A pack as written before `BATCH_ROWS`: one batch a row group, ranges of 3 rows."""
    source = pq.ParquetFile(path)
    wanted = list(dict.fromkeys([key, *columns, "_h", "_seg"]))
    tables = [source.read_row_group(g, columns=wanted) for g in range(source.num_row_groups)]
    ranges = np.array(
        [[t[key].to_numpy().min(), t[key].to_numpy().max(), t.num_rows] for t in tables]
    ).T.copy()
    schema = tables[0].schema.with_metadata({row_pack.RANGES: ranges.tobytes()})
    with ipc.new_file(path.with_name(row_pack.pack_name(path.name)), schema) as sink:
        for table in tables:
            sink.write_batch(table.combine_chunks().to_batches()[0])


def test_a_group_is_packed_in_batches_and_older_packs_are_read_then_rewritten(
    tmp_path, monkeypatch
):
    """A row group of more than BATCH_ROWS rows becomes several batches, each with its key
    range and group: a hit reads its batch only, and columns the pack lacks are read from the
    batches' row groups. A pack written one batch a group is still read, and the next
    `write_missing` writes it anew."""
    monkeypatch.setattr(row_pack, "BATCH_ROWS", 3)
    path = tmp_path / "documents-6.parquet"
    keys = np.arange(0, 80, 5)  # 16 rows: groups of 8, batches of 3, 3, 2
    pack = _packed(path, keys, 6, 8)
    assert pack is not None and pack.current
    assert pack.sizes.tolist() == [3, 3, 2, 3, 3, 2] and pack.groups.tolist() == [0, 0, 0, 1, 1, 1]
    assert pack.lows.tolist() == [0, 15, 30, 40, 55, 70]
    assert pack.highs.tolist() == [10, 25, 35, 50, 65, 75]
    assert pack.batch(4).to_pydict()["text"] == ["t55", "t60", "t65"]
    part = segment_fetch._Part(path, "doc_id", len(keys))
    wanted = np.array([20, 60])
    assert part.groups(wanted).tolist() == [1, 4]  # batches, from the exact keys
    got = part.read(part.groups(wanted), ["doc_id", "text"], wanted)
    assert got.to_pydict() == {"doc_id": [20, 60], "text": ["t20", "t60"]}
    got = part.read(part.groups(wanted), ["doc_id", "other"], wanted)  # not packed: groups 0, 1
    assert got.to_pydict() == {"doc_id": [20, 60], "other": [40, 120]}

    _old_pack(path, "doc_id", ("doc_id", "text"))
    old = row_pack.open_pack(path, len(keys))
    assert old is not None and not old.current and old.groups.tolist() == [0, 1]
    part = segment_fetch._Part(path, "doc_id", len(keys))
    got = part.read(part.groups(wanted), ["doc_id", "text"], wanted)
    assert got.to_pydict() == {"doc_id": [20, 60], "text": ["t20", "t60"]}
    manifest = {"tables": {"documents": {"segments": [{"rows": path.name}]}}}
    monkeypatch.setattr(row_pack, "PACKED", {"documents": ("doc_id", ("doc_id", "text"))})
    assert row_pack.write_missing(tmp_path, manifest) == [row_pack.pack_name(path.name)]
    assert row_pack.open_pack(path, len(keys)).current
    assert row_pack.write_missing(tmp_path, manifest) == []  # current: left as it is
