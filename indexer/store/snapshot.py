"""Published snapshots: the checkpointed, read-only copy of `store.duckdb` beside each index
version. Opens, writes and inspects them; choosing which version is current is
`indexer.records.versions`."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from indexer.core.faults import crash_point
from indexer.core.fsio import fsync_dir, fsync_fh
from indexer.errors import StoreError
from indexer.records.versions import SNAPSHOT_FILE, current_version, version_dir
from indexer.store.rows import SnapshotFacts
from indexer.store.schema import COUNT_CHUNKS, read_meta, scalar

CHECKPOINT = "CHECKPOINT"
_COPY_BLOCK = 8 << 20  # bytes per read while copying


def open_current_snapshot(
    store_dir: Path, attempts: int = 5
) -> tuple[duckdb.DuckDBPyConnection, str] | None:
    """Connect read-only to the current version's snapshot.

    Args:
        store_dir: the store directory.
        attempts: how often to re-read `CURRENT` when a writer switches versions meanwhile.
    Returns:
        (connection, version), or None when the store has no snapshot (nothing published, or
        an index published before snapshots existed).
    Raises:
        StoreError: the current snapshot exists but cannot be opened, or the version kept
            changing.
    """
    for _ in range(attempts):
        version = current_version(store_dir)
        if version is None:
            return None
        snap = version_dir(store_dir, version) / SNAPSHOT_FILE
        if not snap.is_file():
            if current_version(store_dir) == version:
                return None  # an index published before snapshots existed
            continue  # the writer switched versions meanwhile: read the pointer again
        try:
            con = duckdb.connect(str(snap), read_only=True)
        except duckdb.Error as exc:
            if current_version(store_dir) == version and snap.is_file():
                raise StoreError(  # the live version's snapshot is never removed: damaged
                    f"cannot open the published snapshot {snap} ({exc}); rebuild it from "
                    f"the store: `bertindex doctor --repair --store {store_dir}`"
                ) from None
            continue  # removed after we read the pointer (an old version being cleaned)
        return con, version
    raise StoreError(f"{store_dir}: the index version kept changing while opening; retry")


def copy_snapshot(con: duckdb.DuckDBPyConnection, db_path: Path, folder: Path) -> None:
    """Checkpoint the live store and copy it to `folder/store.duckdb`, fsynced.

    Only the writer calls this; nothing writes between the checkpoint and the copy.

    Args:
        con: the writer's connection to `db_path`.
        db_path: the live `store.duckdb`.
        folder: the index version folder the snapshot is published with.
    """
    con.execute(CHECKPOINT)  # everything in the main file, nothing left in the WAL
    target = Path(folder) / SNAPSHOT_FILE
    with open(db_path, "rb") as src, open(target, "wb") as dst:
        half = db_path.stat().st_size // 2
        while half > 0:  # the first half, then the crash point the tests use
            block = src.read(min(half, _COPY_BLOCK))
            if not block:
                break
            dst.write(block)
            half -= len(block)
        crash_point("snapshot.partial")
        shutil.copyfileobj(src, dst, length=_COPY_BLOCK)
        fsync_fh(dst)
    fsync_dir(Path(folder))


def read_snapshot_facts(snap: Path) -> SnapshotFacts:
    """The data version and chunk count of a snapshot file, read without migrating it.

    Args:
        snap: a snapshot file (`index/vN/store.duckdb`).
    Returns:
        SnapshotFacts.
    Raises:
        StoreError: the file cannot be opened or read; the message names the file, says
            which, and gives DuckDB's reason.
    """
    try:
        con = duckdb.connect(str(snap), read_only=True)
    except duckdb.Error as exc:
        raise StoreError(f"snapshot {snap} cannot be opened ({exc})") from None
    try:
        data_version = read_meta(con, "data_version")
        chunks = scalar(con, COUNT_CHUNKS)
    except duckdb.Error as exc:
        raise StoreError(f"snapshot {snap} cannot be read ({exc})") from None
    finally:
        con.close()
    return SnapshotFacts(int(data_version) if data_version is not None else 0, int(chunks))
