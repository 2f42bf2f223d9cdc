"""A few rows of a snapshot table fetched by key straight from its Parquet segments.

A search fetches its hits' documents by doc id. Through the snapshot's DuckDB views that
query walks every row group's statistics and, since the ids of one page are spread over the
whole range, decodes the key column of most of them: ~40 ms a fetch at 10M documents, and the
cost grows with the store (benchmarks/row_groups.py). This reads each segment's row-group key
ranges once (the Parquet footer, ~50 ms for 10M rows), then for a fetch decodes only the row
groups whose range holds a wanted key, with pyarrow over the mapped file: the cost grows with
the hits, not the store. Where the segment has a row pack (`indexer.store.row_pack`), the
groups' rows are batches read from it, nothing decoded: 7-9 -> ~1 ms a fetch of 10 hits.

Visibility is the views' rule (`snapshot.visible_sql`): a row of segment s is hidden by a
tombstone with its `_h` in a later segment. The tombstones are read once (16 bytes each).

Falls back (returns None, the caller queries the views) where this would not be faster or
not be exact: a segment without key statistics, more tombstones than `MAX_TOMBSTONES`, or a
fetch whose keys fall in more than `MAX_GROUPS` row groups (segments not ordered by key).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from indexer.store.row_pack import open_pack
from indexer.store.snapshot import HASH, SEG

MAX_TOMBSTONES = 1 << 22  # 64 MB of (hash, segment) pairs in each reading process
MAX_GROUPS = 1024  # row groups one fetch may decode (a one-off search spans ~400 chunks)
EXACT_KEYS = 1 << 20  # a segment this small has its keys read (8 MB at most): `_Part`


class _Part:
    """One rows segment: its open file and each row group's key range; a segment of at most
    EXACT_KEYS rows also its keys, sorted, and the row group of each.

    Key ranges prune a segment whose groups hold consecutive keys (a table written whole).
    A later segment holds the rows that changed, scattered over the whole key range, so that
    every one of its groups' ranges holds almost any key: a fetch of 10 hits decoded all of a
    100,000-row segment's 49 groups (22 ms a search at 10M with 1 % changed); its keys say
    exactly which groups hold a hit.

    With a row pack (`indexer.store.row_pack`: the same rows uncompressed, in batches of at
    most `row_pack.BATCH_ROWS` rows of one group) the rows are read from it without decoding,
    a batch at a time, and its batches' recorded key ranges stand in for the footer's
    statistics: the Parquet is opened only for columns the pack lacks."""

    def __init__(self, path: Path, key: str, rows: int):
        self.path, self.key = path, key
        self._file: pq.ParquetFile | None = None
        self.pack = open_pack(path, rows)
        if self.pack is not None:  # the key ranges without the footer's statistics
            self.lows, self.highs = self.pack.lows, self.pack.highs
            sizes: np.ndarray | None = None
        else:
            meta = self.file.metadata
            column = meta.schema.names.index(key)
            lows, highs = [], []
            for group in range(meta.num_row_groups):
                stats = meta.row_group(group).column(column).statistics
                if stats is None or not stats.has_min_max:
                    raise LookupError(f"{path.name}: row group {group} has no {key} range")
                lows.append(stats.min)
                highs.append(stats.max)
            self.lows = np.asarray(lows, np.int64)
            self.highs = np.asarray(highs, np.int64)
            sizes = np.array([meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
        self.keys: np.ndarray | None = None  # sorted keys (EXACT_KEYS rows at most)
        self.key_groups: np.ndarray | None = None  # the row group of each
        if self.pack is not None and self.pack.rows <= EXACT_KEYS:
            keys, sizes = self.pack.keys(key)
        elif sizes is not None and sum(sizes) <= EXACT_KEYS:
            keys = self.file.read([key], use_threads=False)[key].to_numpy(zero_copy_only=False)
        else:
            return
        groups = np.repeat(np.arange(len(sizes), dtype=np.int32), sizes)
        order = np.argsort(keys, kind="stable")
        self.keys, self.key_groups = keys.astype(np.int64)[order], groups[order]

    @property
    def file(self) -> pq.ParquetFile:
        """The segment's Parquet, opened on first use (a pack answers without it)."""
        if self._file is None:
            # no pre-buffering: it copies each column chunk of the mapped file before decoding
            # (10 groups of a 10M-document segment: 7.5 -> 5.6 ms)
            self._file = pq.ParquetFile(self.path, memory_map=True, pre_buffer=False)
        return self._file

    def read(self, groups: np.ndarray, columns: list[str], wanted: np.ndarray) -> pa.Table:
        """The rows of `groups` (the pack's batches where there is a pack, else row groups)
        whose key is in `wanted`, `columns` of them: from the pack when it holds them all
        (read, not decoded), else decoded from the Parquet's row groups."""
        if self.pack is not None and self.pack.columns.issuperset(columns):
            picked: list[pa.RecordBatch] = []
            for number in groups.tolist():
                batch = self.pack.batch(number)
                keys = batch.column(self.key).to_numpy(zero_copy_only=False)
                hit = np.flatnonzero(np.isin(keys, wanted))
                # row slices, not `take`: that imports pyarrow.compute (~33 ms of a cold query)
                picked.extend(batch.slice(i, 1).select(columns) for i in hit.tolist())
            if picked:
                return pa.Table.from_batches(picked)
            return self.pack.schema.empty_table().select(columns)
        if self.pack is not None:  # the row groups of the pack's batches
            groups = np.unique(self.pack.groups[groups])
        found = self.file.read_row_groups(groups.tolist(), columns=columns, use_threads=False)
        keys_read = found[self.key].to_numpy(zero_copy_only=False)
        return found.filter(pa.array(np.isin(keys_read, wanted)))

    def groups(self, keys: np.ndarray) -> np.ndarray:
        """Row groups (with a pack: its batches) that may hold one of `keys` (sorted, unique)."""
        if self.keys is not None and self.key_groups is not None:
            lo = np.searchsorted(self.keys, keys, side="left")
            hi = np.searchsorted(self.keys, keys, side="right")
            held = [self.key_groups[a:b] for a, b in zip(lo.tolist(), hi.tolist()) if b > a]
            return np.unique(np.concatenate(held)) if held else np.zeros(0, np.int64)
        holds = (self.lows[None, :] <= keys[:, None]) & (self.highs[None, :] >= keys[:, None])
        return np.flatnonzero(holds.any(axis=0))


class RowLookup:
    """Rows of one snapshot table by an integer key column (e.g. documents by doc_id).

    Args:
        folder: the snapshot's segment folder.
        table: the table's manifest entry ({"columns", "segments"}).
        key: the key column (BIGINT).
    Raises:
        LookupError: the segments cannot be read this way (the caller uses the views).
    """

    def __init__(self, folder: Path, table: dict[str, Any], key: str):
        self.key = key
        segments = table["segments"]
        if sum(s.get("n_dead", 0) for s in segments) > MAX_TOMBSTONES:
            raise LookupError(f"more than {MAX_TOMBSTONES} tombstones")
        self._parts = [_Part(folder / s["rows"], key, s["n_rows"]) for s in segments if s["rows"]]
        self._dead_h, self._dead_seg = _tombstones(folder, segments)
        self._lock = threading.Lock()  # one ParquetFile read at a time

    def fetch(self, keys: Sequence[int], columns: Sequence[str]) -> list[tuple] | None:
        """The visible rows whose key is in `keys` (unknown keys skipped), `columns` of each,
        in no particular order; None when the fetch would decode more than MAX_GROUPS groups.
        """
        wanted = np.unique(np.asarray(keys, np.int64))
        plan = [(part, part.groups(wanted)) for part in self._parts]
        if sum(len(groups) for _, groups in plan) > MAX_GROUPS:
            return None
        read = list(dict.fromkeys([self.key, *columns, HASH, SEG]))
        tables = []
        with self._lock:
            for part, groups in plan:
                if not len(groups):
                    continue
                found = part.read(groups, read, wanted)
                if found.num_rows:
                    tables.append(found)
        rows: list[tuple] = []
        for found in tables:
            hashes, seqs = (found[c].to_numpy(zero_copy_only=False) for c in (HASH, SEG))
            visible = self._visible(hashes, seqs).tolist()
            picked = zip(*(c.to_pylist() for c in found.select(list(columns)).columns))
            rows.extend(row for row, shown in zip(picked, visible) if shown)
        return rows

    def _visible(self, hashes: np.ndarray, seqs: np.ndarray) -> np.ndarray:
        """Which rows (their `_h` and `_seg`) no tombstone of a later segment hides."""
        if not len(self._dead_h):
            return np.ones(len(hashes), bool)
        at = np.searchsorted(self._dead_h, hashes)
        inside = at < len(self._dead_h)
        match = np.zeros(len(hashes), bool)
        match[inside] = self._dead_h[at[inside]] == hashes[inside]
        hidden = match & (self._dead_seg[np.minimum(at, len(self._dead_h) - 1)] > seqs)
        return ~hidden


def _tombstones(folder: Path, segments: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """Every tombstone's `_h` (sorted, unique) and the latest segment holding it."""
    hashes, seqs = [], []
    for segment in segments:
        if segment["dead"]:
            # ParquetFile, not read_table: read_table with columns imports pyarrow.dataset
            # and pyarrow.compute (~0.1 s of every cold query)
            dead = pq.ParquetFile(folder / segment["dead"]).read(
                columns=[HASH, SEG], use_threads=False
            )
            hashes.append(dead[HASH].to_numpy(zero_copy_only=False).astype(np.uint64))
            seqs.append(dead[SEG].to_numpy(zero_copy_only=False).astype(np.int64))
    if not hashes:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    h, s = np.concatenate(hashes), np.concatenate(seqs)
    order = np.lexsort((-s, h))  # by hash, latest segment first
    h, s = h[order], s[order]
    first = np.ones(len(h), bool)
    first[1:] = h[1:] != h[:-1]
    return h[first], s[first]
