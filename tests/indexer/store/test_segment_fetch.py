"""Hits fetched straight from a snapshot's segments (`indexer.store.segment_fetch`) are the rows
the snapshot's views give: changed rows once and in their new form, deleted ones gone, unknown
ids skipped, across several segments with tombstones; and where the direct read does not apply
the views answer."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from store_kit import PROVENANCE, add, publish, record

from indexer.store import Store, row_pack, segment_fetch
from indexer.store.reads import SELECT_DOCUMENT_HITS
from indexer.store.snapshot import segments_dir
from indexer.store.vectors import SELECT_CHUNK_SPANS_OF

N = 40


@pytest.fixture
def store(tmp_path):
    """Three publishes: 40 documents; 2 changed, 3 deleted, 5 added; 1 more changed."""
    with Store(tmp_path / "s") as s:
        s.vectors.set_provenance(PROVENANCE)
        add(s, "docs", [record(f"e{i}", f"text {i}", n=i) for i in range(N)])
        publish(s)
        with s.transaction():
            s.con.execute(
                "UPDATE documents SET text = 'changed ' || text WHERE external_id IN ('e3', 'e30')"
            )
            s.bump_data_version()
        s.documents.delete("docs", ["e5", "e6", "e39"])
        add(s, "docs", [record(f"new{i}", f"new text {i}", n=i) for i in range(5)], seed=1)
        publish(s)
        with s.transaction():
            s.con.execute("UPDATE documents SET title = 'retitled' WHERE external_id = 'e3'")
            s.bump_data_version()
        publish(s)
        yield s


def by_views(reader: Store, ids: list[int]) -> dict[int, tuple]:
    literal = "(" + ",".join(str(i) for i in ids) + ")"
    rows = reader.con.execute(SELECT_DOCUMENT_HITS.format(ids=literal)).fetchall()
    return {r[0]: r for r in rows}


def as_rows(hits: dict) -> dict[int, tuple]:
    return {d: (h.doc_id, h.collection, h.external_id, h.title, h.text) for d, h in hits.items()}


@pytest.mark.parametrize("source", ["pack", "parquet"])
@pytest.mark.parametrize("exact", [True, False], ids=["keys", "ranges"])
def test_direct_fetch_matches_the_views_across_segments_and_tombstones(
    store, exact, source, monkeypatch
):
    if not exact:
        monkeypatch.setattr(segment_fetch, "EXACT_KEYS", 0)  # every segment by key ranges
    packs = sorted(segments_dir(store.path).glob(f"documents-*{row_pack.SUFFIX}"))
    if source == "parquet":
        for path in packs:  # derived files: without them the Parquet is decoded
            path.unlink()
    live = dict(store.con.execute("SELECT doc_id, text FROM documents").fetchall())
    with Store(store.path, read_only=True) as reader:
        segments = reader.reads.core._snapshot.manifest["tables"]["documents"]["segments"]
        assert len(segments) >= 2 and any(s["dead"] for s in segments)  # what is exercised
        lookup = reader.reads.core.row_lookup("documents", "doc_id")
        assert lookup is not None
        assert len(packs) == len(segments)  # every documents segment was packed
        assert [p.pack is not None for p in lookup._parts] == [source == "pack"] * len(segments)
        ids = list(range(0, N + 12))  # unknown ids at both ends
        direct = reader.reads.fetch_documents(ids)
        views = by_views(reader, ids)
        assert as_rows(direct) == {d: r[:5] for d, r in views.items()}
        assert {d: h.text for d, h in direct.items()} == live
        assert [h.title for h in direct.values() if h.external_id == "e3"] == ["retitled"]
        assert all(h.metadata == {"n": int(h.external_id.lstrip("enw"))} for h in direct.values())


def test_direct_spans_match_the_views(store):
    with Store(store.path, read_only=True) as reader:
        ids = list(range(0, N + 12))
        spans = reader.vectors.chunk_spans(ids)
        literal = "(" + ",".join(str(i) for i in ids) + ")"
        rows = reader.con.execute(SELECT_CHUNK_SPANS_OF.format(ids=literal)).fetchnumpy()
        assert reader.reads.core.row_lookup("chunks", "chunk_id") is not None
        for got, column in zip(spans, ("chunk_id", "doc_id", "start_char", "end_char")):
            assert got.tolist() == rows[column].tolist()


def test_the_views_answer_where_the_direct_read_does_not_apply(store, monkeypatch):
    with Store(store.path, read_only=True) as reader:
        expected = as_rows(reader.reads.fetch_documents(list(range(N + 6))))
    monkeypatch.setattr(segment_fetch, "MAX_GROUPS", 0)  # every fetch too wide
    with Store(store.path, read_only=True) as reader:
        assert reader.reads.core.row_lookup("documents", "doc_id").fetch([1], ["doc_id"]) is None
        assert as_rows(reader.reads.fetch_documents(list(range(N + 6)))) == expected
    monkeypatch.setattr(segment_fetch, "MAX_TOMBSTONES", 0)  # too many tombstones to hold
    with Store(store.path, read_only=True) as reader:
        assert reader.reads.core.row_lookup("documents", "doc_id") is None
        assert as_rows(reader.reads.fetch_documents(list(range(N + 6)))) == expected
    assert store.reads.core.row_lookup("documents", "doc_id") is None  # the live file


def test_a_segment_of_scattered_keys_decodes_only_the_groups_holding_them(tmp_path):
    """Changed rows keep their keys: a later segment's groups each span the key range, so
    their ranges say nothing; its keys, read once, name the groups."""
    path = tmp_path / "documents-9.parquet"
    # group g holds g*100 + 0, 400, 800, 1200: every group's range holds 350
    keys = np.array([g * 100 + j * 400 for g in range(4) for j in range(4)])
    pq.write_table(pa.table({"doc_id": keys}), path, row_group_size=4)
    part = segment_fetch._Part(path, "doc_id", len(keys))
    assert part.groups(np.array([500, 1500])).tolist() == [1, 3]
    assert part.groups(np.array([350])).tolist() == []  # within every range, held by none
    part.keys = None
    assert part.groups(np.array([350])).tolist() == [0, 1, 2, 3]  # ranges alone: every group
