"""The chunk -> document map of a FAISS base, in a file beside it that every reader maps.

A search turns the chunk ids FAISS returns into documents and character spans. Each serving
process used to hold that map for itself (24 bytes a chunk: 240 MB a process at 10M, read from
the snapshot in seconds), and a one-off search read its chunks' rows from the snapshot. A
base's chunks never change, so the writer stores their map once with the base
(`index/bases/<base>.spans.npy`: int64 (4, n), chunk ids ascending, doc ids, start and end
chars) and readers map it: one copy in the page cache for every process, nothing read until a
lookup touches its pages (a binary search: ~24 of them).

Chunks added after the base have higher ids (chunk ids come from a sequence and only grow),
so a reader takes from the snapshot only the chunks above the file's last id, a range DuckDB
answers from the segments' statistics. Chunks deleted since stay in the file and are never
asked for (searches leave deleted ids out). The file only speeds reads up: written after its
base, it may be missing (a killed writer, a store written before it existed), and readers then
read the whole map from the snapshot as before. It is removed with its base.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from indexer.core.fsio import fsync_file
from indexer.index.block_lists import MADV_POPULATE_READ

log = logging.getLogger(__name__)

SUFFIX = ".spans.npy"
Spans = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # ids ascending, docs, starts, ends


def spans_path(base_file: Path) -> Path:
    """Where the span map of the base `index/bases/<name>.faiss` lives."""
    return base_file.with_name(base_file.name.removesuffix(".faiss") + SUFFIX)


def write_spans(path: Path, spans: Spans) -> None:
    """Write `spans` (chunk ids ascending) to `path`: a temporary name, fsynced, renamed."""
    table = np.stack([np.asarray(column, np.int64) for column in spans])
    tmp = path.with_name(f".tmp-{path.name}")
    np.save(tmp, table)  # np.save adds no suffix to a name ending in .npy
    fsync_file(tmp)
    os.replace(tmp, path)


def read_spans(path: Path) -> np.ndarray | None:
    """The mapped (4, n) table at `path`; None when there is none or it is not one (logged:
    the caller reads the map from the snapshot)."""
    if not path.is_file():
        return None
    try:
        table = np.load(path, mmap_mode="r")
    except (OSError, ValueError) as exc:
        log.warning("span map %s unreadable (%s); reading spans from the snapshot", path, exc)
        return None
    if table.ndim != 2 or table.shape[0] != 4 or table.dtype != np.int64:
        log.warning("span map %s is not a (4, n) int64 table; reading the snapshot's", path)
        return None
    mapped = getattr(table, "_mmap", None)  # a binary search's scattered pages, no readahead
    if mapped is not None and hasattr(mmap, "MADV_RANDOM"):
        mapped.madvise(mmap.MADV_RANDOM)
    return table


def populate_table(table: np.ndarray) -> bool:
    """Map all of a mapped span `table` into this process now (best effort; True if done).

    A server looks up ~40 chunk ids a query in its base's table: each lookup's binary search
    faults ~12 scattered pages of the ids and one page of each other row, each fault mapping
    up to 15 neighbours too (the kernel's fault-around), until the whole table is mapped: a
    new 10M server spent ~1.8 ms a query on it (py-spy: 6 % of a worker's time) through its
    first thousands of queries, then ~0.12 ms. Populated at once (320 MB at 10M, a page cache
    every server process shares), lookups cost the latter from the first query. Reading the
    three other rows with `pread` instead kept 240 MB out of each process but cost 0.57 ms
    for 40 ids (`os.pread` a value)."""
    mapped = getattr(table, "_mmap", None)
    if mapped is None:
        return False
    try:
        mapped.madvise(MADV_POPULATE_READ)
    except (OSError, ValueError):  # an older kernel: pages are mapped as lookups touch them
        return False
    return True


class SpanMap:
    """Chunk ids -> (doc ids, start chars, end chars) over parts each sorted by chunk id: a
    mapped base's table and the chunks added since (held), or one map read whole.

    Args:
        parts: (chunk ids ascending, doc ids, start chars, end chars) arrays.
    """

    def __init__(self, parts: Sequence[Spans | np.ndarray]):
        # plain arrays over the mapped file: numpy's memmap wraps every index result
        self.parts = [tuple(np.asarray(c) for c in p) for p in parts if len(p[0])]

    def lookup(self, chunk_ids: np.ndarray) -> Spans:
        """(doc ids, start chars, end chars, found) aligned with `chunk_ids`; where `found` is
        False the other three hold 0."""
        n = len(chunk_ids)
        docs, starts, ends = np.zeros(n, np.int64), np.zeros(n, np.int32), np.zeros(n, np.int32)
        found = np.zeros(n, bool)
        for keys, part_docs, part_starts, part_ends in self.parts:
            pos = np.searchsorted(keys, chunk_ids)
            hit = ~found & (pos < len(keys))
            hit[hit] = keys[pos[hit]] == chunk_ids[hit]
            at = pos[hit]
            docs[hit], starts[hit], ends[hit] = part_docs[at], part_starts[at], part_ends[at]
            found |= hit
        return docs, starts, ends, found
