"""A rows segment's hit columns again, uncompressed, in an Arrow IPC file that readers read a
batch at a time: a search reads its few hits from it without decoding anything.

A search renders its ~10 hits' documents, each in a different row group of the snapshot's
Parquet: pyarrow decodes every requested column chunk of each group (decompression and a
column reader each, ~70 µs a chunk plus ~0.35 ms for a group's 2,048 texts), 7-9 ms a search
at 1M and at 10M documents, a third of a served query (`benchmarks/row_pack.py`). The pack is
the same rows in the same order, each row group in record batches of `BATCH_ROWS`, the columns
of `PACKED` only (a documents segment: ~180 bytes a row, 1.7 GB at 10M beside the 0.76 GB of
its zstd Parquet); a hit costs one read of its batch (~46 KB), already decoded.

The pack is read with `pread` (`pa.OSFile`), not mapped. Through a mapping each hit's batch left
its pages, and by the kernel's fault-around up to 15 neighbours of each, mapped into the
process: at 10M, ~1,400 served queries left 1.0 GB of the pack counted in the servers' Pss
(`benchmarks/scale.py`'s `pss_by_file_mb`), heading for the whole file in each long-running
process's page tables. Read, a fetch of 10 random hits at 10M takes 1.9-2.4 ms against
1.8-2.0 ms through a mapping of the same pack (and 7.8-8.2 ms decoding the Parquet), warm
(AMD EPYC, `benchmarks/row_pack.py`, results/row_pack_batches_10m_amd.json); with one batch a
row group (~370 KB a read) it took 2.6-3.2 ms (row_pack_pread_10m_amd.json). Unmapping after
each fetch (`madvise(MADV_DONTNEED)`) was no faster than reading.

Derived data: `<table>-<seq>.pack.arrow` beside `<table>-<seq>.parquet`, written by the publish
(`write_missing`, which also writes the packs an older store or a killed publish lacks, once)
after its Parquet, removed with it (`segments.collect_segments`). A reader without a pack, or
with one that does not match its Parquet's row groups, reads the Parquet as before.

The pack's schema metadata also holds each batch's key range (`RANGES`), so a reader finds the
batches of its keys without the Parquet footer's per-group statistics (~0.13 s a cold start
at 10M, read through pyarrow's per-group objects).

The ranges also say which row group each batch came from, so a read of columns the pack lacks
still finds its Parquet groups. Packs written one batch a group (before `BATCH_ROWS`; their
ranges have 3 rows) are read as such and rewritten by the next publish (`write_missing`).
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
# int64 (4, batches): each batch's lowest and highest key, rows, and the row group it is from
RANGES = b"bertindex.key_ranges"
BATCH_ROWS = 256
# table -> (key, the columns packed): what `Reads.fetch_documents` asks of a hit
PACKED: dict[str, tuple[str, tuple[str, ...]]] = {
    "documents": ("doc_id", ("doc_id", "collection", "external_id", "title", "text", "metadata"))
}


def pack_name(rows_name: str) -> str:
    """The pack file of the rows segment `rows_name` (`<table>-<seq>.parquet`)."""
    return rows_name.removesuffix(".parquet") + SUFFIX


def write_pack(parquet: Path, key: str, columns: tuple[str, ...]) -> Path:
    """Write the pack of `parquet` (its `columns`, `_h` and `_seg`, each row group in batches
    of `BATCH_ROWS`): a temporary name, fsynced, renamed. Reads one row group at a time
    (constant memory): the key column first, for the key ranges the schema carries, then the
    packed columns."""
    source = pq.ParquetFile(parquet, memory_map=True, pre_buffer=False)
    wanted = list(dict.fromkeys([key, *columns, HASH, SEG]))
    groups = source.metadata.num_row_groups
    ranges = []
    for group in range(groups):
        keys = source.read_row_group(group, columns=[key], use_threads=False)[key]
        if not len(keys):
            raise ValueError(f"{parquet.name}: row group {group} is empty")
        keys = keys.to_numpy(zero_copy_only=False)
        for start in range(0, len(keys), BATCH_ROWS):
            part = keys[start : start + BATCH_ROWS]
            ranges.append((part.min(), part.max(), len(part), group))
    table_ranges = np.array(ranges, np.int64).T.copy()
    schema = source.schema_arrow
    schema = pa.schema([schema.field(name) for name in wanted])
    target = parquet.with_name(pack_name(parquet.name))
    tmp = target.with_name(f".tmp-{target.name}")
    sizes = []
    with ipc.new_file(tmp, schema.with_metadata({RANGES: table_ranges.tobytes()})) as sink:
        for group in range(groups):
            table = source.read_row_group(group, columns=wanted, use_threads=False)
            table = table.combine_chunks()
            for start in range(0, table.num_rows, BATCH_ROWS):
                for batch in table.slice(start, BATCH_ROWS).to_batches():
                    sink.write_batch(batch)
                    sizes.append(batch.num_rows)
    if sizes != table_ranges[2].tolist():  # a slice split in two: keep the Parquet path
        tmp.unlink(missing_ok=True)
        raise ValueError(f"{parquet.name}: batches of {sizes[:5]}… rows, not as ranged")
    fsync_file(tmp)
    os.replace(tmp, target)
    return target


class RowPack:
    """An open pack: `batch(b)` is its batch b (one `pread`); `lows`, `highs`, `sizes` and
    `groups` each batch's key range, rows and Parquet row group; `current`: written in batches
    of `BATCH_ROWS` (else one batch a group).

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
        batches = self.reader.num_record_batches
        self.current = len(ranges) == 4 * batches
        if not self.current and len(ranges) != 3 * batches:
            raise ValueError(f"{path.name}: key ranges {len(ranges)} long for {batches} batches")
        ranges = ranges.reshape(-1, batches)
        self.lows, self.highs, self.sizes = ranges[:3]
        self.groups = ranges[3] if self.current else np.arange(batches, dtype=np.int64)
        self.rows = int(self.sizes.sum())
        self.columns = set(self.schema.names)

    def batch(self, number: int) -> pa.RecordBatch:
        return self.reader.get_batch(number)

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


def _current(path: Path) -> bool:
    """Whether `path` is a pack in batches of `BATCH_ROWS` (reads its footer only)."""
    if not path.is_file():
        return False
    try:
        return RowPack(path).current
    except (OSError, ValueError, pa.ArrowException):
        return False  # written again


def write_missing(where: Path, manifest: dict[str, Any]) -> list[str]:
    """Write the pack of every rows segment of a `PACKED` table in `manifest` that has none
    (a new segment, or one an older store or a killed publish left without) or one written a
    batch a group (not `RowPack.current`; readers holding it keep reading it). A pack that
    cannot be written is logged and skipped: readers use the Parquet. Returns the packs
    written."""
    written = []
    for table, (key, columns) in PACKED.items():
        entry = manifest["tables"].get(table)
        if entry is None:
            continue
        for segment in entry["segments"]:
            rows = segment["rows"]
            if not rows or _current(where / pack_name(rows)):
                continue
            try:
                written.append(write_pack(where / rows, key, columns).name)
            except (OSError, ValueError, pa.ArrowException) as exc:
                log.warning("no row pack for %s (%s); readers read its Parquet", rows, exc)
    return written
