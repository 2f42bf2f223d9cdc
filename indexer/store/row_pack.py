"""A rows segment's hit columns again, uncompressed, in an Arrow IPC file that readers map: a
search reads its few hits from it without decoding anything.

A search renders its ~10 hits' documents, each in a different row group of the snapshot's
Parquet: pyarrow decodes every requested column chunk of each group (decompression and a
column reader each, ~70 µs a chunk plus ~0.35 ms for a group's 2,048 texts), 7-9 ms a search
at 1M and at 10M documents, a third of a served query (`benchmarks/row_pack.py`). The pack is
the same rows in the same order, one record batch per Parquet row group, the columns of
`PACKED` only (a documents segment: ~180 bytes a row, 1.8 GB at 10M beside the 0.76 GB of its
zstd Parquet); a hit costs one read of its batch, already decoded.

The pack is read with `pread` (`pa.OSFile`), not mapped. Through a mapping each hit's batch left
its pages, and by the kernel's fault-around up to 15 neighbours of each, mapped into the
process: at 10M, ~1,400 served queries left 1.0 GB of the pack counted in the servers' Pss
(`benchmarks/scale.py`'s `pss_by_file_mb`), heading for the whole 1.7 GB file in each long-running
process's page tables. A read copies a batch (~370 KB) out of the shared page cache instead:
a fetch of 10 random hits at 10M takes 2.6-3.2 ms against 1.6-1.9 ms through the mapping,
warm (AMD EPYC, `benchmarks/row_pack.py`, results/row_pack_pread_10m_amd.json): ~1 ms of a
served query for 1-1.7 GB less mapped into each server. Unmapping after each fetch
(`madvise(MADV_DONTNEED)`) was as slow as reading and stranger.

Derived data: `<table>-<seq>.pack.arrow` beside `<table>-<seq>.parquet`, written by the publish
(`write_missing`, which also writes the packs an older store or a killed publish lacks, once)
after its Parquet, removed with it (`segments.collect_segments`). A reader without a pack, or
with one that does not match its Parquet's row groups, reads the Parquet as before.

The pack's schema metadata also holds each batch's key range (`RANGES`), so a reader finds the
batches of its keys without the Parquet footer's per-group statistics (~0.13 s a cold start
at 10M, read through pyarrow's per-group objects).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from indexer.core.fsio import fsync_file
from indexer.store.snapshot import HASH, SEG

log = logging.getLogger(__name__)

SUFFIX = ".pack.arrow"
RANGES = b"bertindex.key_ranges"  # int64 (3, batches): each batch's lowest, highest key, rows
# table -> (key, the columns packed): what `Reads.fetch_documents` asks of a hit
PACKED: dict[str, tuple[str, tuple[str, ...]]] = {
    "documents": ("doc_id", ("doc_id", "collection", "external_id", "title", "text", "metadata"))
}


def pack_name(rows_name: str) -> str:
    """The pack file of the rows segment `rows_name` (`<table>-<seq>.parquet`)."""
    return rows_name.removesuffix(".parquet") + SUFFIX


def write_pack(parquet: Path, key: str, columns: tuple[str, ...]) -> Path:
    """Write the pack of `parquet` (its `columns`, `_h` and `_seg`, one batch per row group):
    a temporary name, fsynced, renamed. Reads one row group at a time (constant memory): the
    key column first, for the key ranges the schema carries, then the packed columns."""
    source = pq.ParquetFile(parquet, memory_map=True, pre_buffer=False)
    wanted = list(dict.fromkeys([key, *columns, HASH, SEG]))
    groups = source.metadata.num_row_groups
    ranges = np.zeros((3, groups), np.int64)
    for group in range(groups):
        keys = source.read_row_group(group, columns=[key], use_threads=False)[key]
        if not len(keys):
            raise ValueError(f"{parquet.name}: row group {group} is empty")
        keys = keys.to_numpy(zero_copy_only=False)
        ranges[:, group] = keys.min(), keys.max(), len(keys)
    schema = source.schema_arrow
    schema = pa.schema([schema.field(name) for name in wanted])
    target = parquet.with_name(pack_name(parquet.name))
    tmp = target.with_name(f".tmp-{target.name}")
    batches = 0
    with ipc.new_file(tmp, schema.with_metadata({RANGES: ranges.tobytes()})) as sink:
        for group in range(groups):
            table = source.read_row_group(group, columns=wanted, use_threads=False)
            for batch in table.combine_chunks().to_batches():
                sink.write_batch(batch)
                batches += 1
    if batches != groups:  # a group split in two batches: keep the Parquet path
        tmp.unlink(missing_ok=True)
        raise ValueError(f"{parquet.name}: {groups} row groups, {batches} batches")
    fsync_file(tmp)
    os.replace(tmp, target)
    return target


class RowPack:
    """An open pack: `batch(g)` is row group g's rows (one `pread`); `lows`, `highs` and
    `sizes` each batch's key range and rows.

    Raises:
        ValueError: the file is not a pack (no key ranges, batches and ranges disagree).
    """

    def __init__(self, path: Path):
        self.reader = ipc.open_file(pa.OSFile(str(path)))  # pread: thread-safe, nothing mapped
        self.schema = self.reader.schema
        meta = self.schema.metadata or {}
        if RANGES not in meta:
            raise ValueError(f"{path.name}: no key ranges")
        ranges = np.frombuffer(meta[RANGES], np.int64)
        if len(ranges) != 3 * self.reader.num_record_batches:
            raise ValueError(
                f"{path.name}: {len(ranges) // 3} key ranges for "
                f"{self.reader.num_record_batches} batches"
            )
        self.lows, self.highs, self.sizes = ranges.reshape(3, -1)
        self.rows = int(self.sizes.sum())
        self.columns = set(self.schema.names)

    def batch(self, group: int) -> pa.RecordBatch:
        return self.reader.get_batch(group)

    def keys(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """Every row's `key`, in file order, and each batch's rows."""
        if not len(self.sizes):
            return np.zeros(0, np.int64), self.sizes
        column = self.reader.read_all().column(key)
        return column.to_numpy(), self.sizes


def open_pack(parquet: Path, rows: int) -> RowPack | None:
    """The pack beside `parquet` when there is one holding its `rows` rows; None otherwise
    (logged when one is there but does not read as one: the Parquet is read instead)."""
    path = parquet.with_name(pack_name(parquet.name))
    if not path.is_file():
        return None
    try:
        pack = RowPack(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        log.warning("row pack %s unreadable (%s); reading %s", path.name, exc, parquet.name)
        return None
    if pack.rows != rows:
        log.warning(
            "row pack %s holds %d rows, %s %d; reading the Parquet",
            path.name,
            pack.rows,
            parquet.name,
            rows,
        )
        return None
    return pack


def write_missing(where: Path, manifest: dict[str, Any]) -> list[str]:
    """Write the pack of every rows segment of a `PACKED` table in `manifest` that has none
    (a new segment, or one an older store or a killed publish left without). A pack that
    cannot be written is logged and skipped: readers use the Parquet. Returns the packs
    written."""
    written = []
    for table, (key, columns) in PACKED.items():
        entry = manifest["tables"].get(table)
        if entry is None:
            continue
        for segment in entry["segments"]:
            rows = segment["rows"]
            if not rows or (where / pack_name(rows)).is_file():
                continue
            try:
                written.append(write_pack(where / rows, key, columns).name)
            except (OSError, ValueError, pa.ArrowException) as exc:
                log.warning("no row pack for %s (%s); readers read its Parquet", rows, exc)
    return written
