"""The store's core: opens `store.duckdb` (or the snapshot published with the current index
version) and owns the connection, its transactions, bound views, the data version, the writer
lock and publishing the snapshot. The tables' SQL lives in the groups that hold a core.

The vectors here are the truth; a FAISS index is a cache rebuilt from them. Does not encode
and does not touch FAISS. All SQL takes values as bound parameters.

One process writes (DuckDB allows one read-write process per file). Readers open the snapshot
published with the current index version (views over its Parquet segments,
`indexer.store.snapshot`), so a search never waits for, nor sees half of, a running write.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from indexer.errors import StoreError
from indexer.store.lazy_views import ViewsOnDemand
from indexer.store.lock import WAIT_S, WriterLock
from indexer.store.schema import (
    HAS_TABLE,
    SCHEMA_VERSION,
    SET_META,
    SNAPSHOT_UNCHANGED,
    apply_migration,
    read_meta,
    scalar,
    stored_schema_version,
)
from indexer.store.segment_fetch import RowLookup
from indexer.store.segments import publish_segments
from indexer.store.snapshot import (
    Snapshot,
    manifest_facts,
    manifest_meta,
    open_current_snapshot,
    segments_dir,
)

if TYPE_CHECKING:
    import duckdb
    from typing_extensions import Self

    from indexer.store.rows import SnapshotFacts

DB_NAME = "store.duckdb"
# DuckDB's buffer pool for a writer (default: 80 % of RAM). It caches every block a run reads,
# so without a bound a writer's memory grows with the store; above it DuckDB evicts and spills
# to `<store>/store.duckdb.tmp` (README "Memory").
WRITER_MEMORY_LIMIT = "128MB"
# Write-ahead log a writer lets grow before DuckDB checkpoints (default 16 MB). A checkpoint
# rewrites the tables' indexes whole, so at the default an index run of 2,048-document batches
# checkpointed every few batches and its commits grew with the store (200k documents: 34 s of
# commits; at 1 GB: 1.5 s, and 2 s for the checkpoint the publish makes anyway). A killed run
# replays at most this much log when the store is next opened.
WRITER_CHECKPOINT_THRESHOLD = "1GB"
# Compression a writer never uses. DuckDB picks ALPRD for embedding floats, and for them it
# costs space and time: 200k MiniLM vectors of SciFact texts (and as many random unit ones)
# took 441 MB and a 1.96 s checkpoint with it, 298 MB (the raw floats and the keys) and
# 0.9 s without (Intel Xeon, DuckDB 1.4). Floats are then stored uncompressed (ALP, which
# suits rounded decimals, stays for the few other float columns); text, keys and integers
# compress as before.
WRITER_DISABLED_COMPRESSION = "alprd"
SET_THREADS = "SET threads TO {threads}"
# the DuckDB errors a retry may clear (`is_transient_store_error`)
_TRANSIENT = ("IOException", "TransactionException", "ConnectionException")
BEGIN, COMMIT, ROLLBACK = "BEGIN", "COMMIT", "ROLLBACK"


def is_transient_store_error(exc: BaseException) -> bool:
    """A DuckDB error a retry may clear: a file another process held, a connection or a
    conflicting transaction refused (`flows.retry`); any other DuckDB error recurs on the
    same input. DuckDB is imported by the first store that opens a connection (a one-off
    search never does), so before that no error can be DuckDB's."""
    duckdb = sys.modules.get("duckdb")
    return duckdb is not None and isinstance(
        exc, tuple(getattr(duckdb, name) for name in _TRANSIENT)
    )


class StoreCore:
    """A store directory's connection: `store.duckdb` plus `index/` versions beside it.

    Args:
        path: the store directory (created when writable).
        read_only: open for queries only; the store must exist.
        snapshot: with read_only, open the snapshot published with the current index version
            (never locked by a writer, always consistent with that index): an in-memory
            DuckDB whose tables are views over the version's Parquet segments, without
            `vectors.embedding` (embeddings are read from the live file, by the writer); a
            store without snapshots (written before they existed) falls back to `store.duckdb`.
        lock: a writable store takes the writer lock (`reindex` opens its next generation
            without one: it holds the live store's).

    Attributes:
        version: the index version whose snapshot is open (None: the live file is open).
    """

    def __init__(
        self, path: str | Path, read_only: bool = False, snapshot: bool = True, lock: bool = True
    ):
        self.path = Path(path)
        self.db_path = self.path / DB_NAME
        self.read_only = read_only
        self.version: str | None = None
        self._con: duckdb.DuckDBPyConnection | None = None  # the live file's (not a snapshot's)
        self._snapshot: Snapshot | None = None
        self._lock: WriterLock | None = None
        self._bound_views = itertools.count()  # names of registered Arrow views
        self._threads: threading.local | None = None  # per-thread cursors, once shared
        self._cursors: list[duckdb.DuckDBPyConnection] = []
        self._lookups: dict[str, RowLookup | None] = {}
        self._lookups_lock = threading.Lock()
        if read_only and snapshot:
            self._snapshot = open_current_snapshot(self.path)
            if self._snapshot is not None:
                self.version = self._snapshot.version
                self._migrate_or_close()
                return
        if read_only and not self.db_path.is_file():
            raise StoreError(
                f"no store at {self.path} ({DB_NAME} missing); index something first with "
                f"`bertindex index PATH --store {self.path}`"
            )
        if not read_only:
            self.path.mkdir(parents=True, exist_ok=True)
            if lock:
                self._lock = WriterLock(self.path)
        import duckdb

        try:
            self.con = self._connect(read_only)
        except (duckdb.IOException, duckdb.ConnectionException) as exc:
            if self._lock is not None:
                self._lock.release()
            if read_only and snapshot:
                raise StoreError(
                    f"cannot open {self.db_path}: nothing is published yet and the first index "
                    "run is still writing; search when it has finished"
                ) from None
            raise StoreError(
                f"cannot open {self.db_path}: {exc}. Another bertindex process may be writing "
                "to this store; wait for it to finish."
            ) from None
        self._migrate_or_close()

    def _connect(self, read_only: bool) -> duckdb.DuckDBPyConnection:
        """Open the live file. A writer (holding the writer lock) retries for up to
        `lock.WAIT_S`: what else has the file open then is a reader for a moment (a server
        re-reading its tokens or the review page's labels), never another writer."""
        import duckdb

        config: dict[str, str | bool | int | float | list[str]] = (
            {}
            if read_only
            else {
                "memory_limit": WRITER_MEMORY_LIMIT,
                "checkpoint_threshold": WRITER_CHECKPOINT_THRESHOLD,
                "disabled_compression_methods": WRITER_DISABLED_COMPRESSION,
            }
        )
        deadline = time.monotonic() + (WAIT_S if self._lock is not None else 0.0)
        while True:
            try:
                return duckdb.connect(str(self.db_path), read_only=read_only, config=config)
            except (duckdb.IOException, duckdb.ConnectionException):
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    @property
    def con_path(self) -> Path:
        """The file open here: the live store, or the manifest (or legacy copy) of the snapshot
        of `version`."""
        if self._snapshot is None:
            return self.db_path
        return self._snapshot.path

    def snapshot_facts(self) -> SnapshotFacts | None:
        """The data version and chunk count the open snapshot's manifest recorded when it was
        published (counting a 10M-chunk snapshot's rows cost a cold search 0.5 s); None for
        the live file, a legacy copy, or a manifest without them."""
        manifest = self._manifest
        return manifest_facts(manifest) if manifest is not None else None

    # -- schema -----------------------------------------------------------------------------
    def _migrate_or_close(self) -> None:
        """Upgrade the schema; a store this code cannot use is closed (connection and lock)
        before the error propagates, so the process can open it again or leave it alone."""
        try:
            self._migrate()
        except BaseException:
            self.close()
            raise

    def _migrate(self) -> None:
        recorded = self._recorded_meta()
        if recorded is not None:
            version = int(recorded.get("schema_version") or 0)
        else:
            version = stored_schema_version(self.con)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.con_path} was written by a newer bertindex (schema {version}, this one "
                f"knows {SCHEMA_VERSION}); nothing was changed: upgrade bertindex "
                "(`pip install -U bertindex`) to use it"
            )
        if version == SCHEMA_VERSION:
            return
        if self.read_only and self.version is not None and version > 0:
            return  # a snapshot published before an upgrade: read as it is until the next one
        if self.read_only:
            raise StoreError(f"{self.db_path} needs a schema upgrade; run `bertindex index` once")
        for step in range(version + 1, SCHEMA_VERSION + 1):
            with self.transaction():
                apply_migration(self.con, step)
                if step > 1 and step not in SNAPSHOT_UNCHANGED:
                    self.bump_data_version()  # the published snapshot has the old schema

    # -- connection -------------------------------------------------------------------------
    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The DuckDB connection: the one opened, or after `share_across_threads` a cursor of
        it per calling thread (a DuckDB connection runs one query at a time)."""
        local = self._threads
        # a snapshot's connection is made when first asked for (`Snapshot.con`)
        con = self._snapshot.con if self._snapshot is not None else self._con
        if con is None:  # only before the live file is connected
            raise StoreError(f"{self.db_path} is not open")
        if local is not None:
            cursor = getattr(local, "cursor", None)
            if cursor is None:
                with self._cursor_lock:
                    cursor = local.cursor = con.cursor()
                    self._cursors.append(cursor)
            con = cursor
        views = self._snapshot.views if self._snapshot is not None else None
        if views is not None and views.pending:  # a snapshot's views made on first use
            return ViewsOnDemand(con, views)  # type: ignore[return-value]
        return con

    @con.setter
    def con(self, value: duckdb.DuckDBPyConnection) -> None:
        self._con = value

    def share_across_threads(self) -> None:
        """Let several threads query this read-only store at once: each thread gets its own
        cursor on the same database (same snapshot, same buffer pool) on first use.

        Raises:
            StoreError: the store is open for writing (one writer, one connection).
        """
        if not self.read_only:
            raise StoreError(f"{self.path}: only a read-only store is shared across threads")
        self._cursor_lock = threading.Lock()
        self._threads = threading.local()

    def row_lookup(self, table: str, key: str) -> RowLookup | None:
        """Rows of the open snapshot's `table` by its integer `key`, read straight from the
        segments (`indexer.store.segment_fetch`; built on first use, then kept). None when
        the live file or a legacy copy is open, or the segments cannot be read that way."""
        manifest = self._manifest
        if manifest is None or table not in manifest["tables"]:
            return None
        with self._lookups_lock:
            if table not in self._lookups:
                try:
                    found = RowLookup(segments_dir(self.path), manifest["tables"][table], key)
                except (LookupError, OSError, ValueError):
                    found = None  # the views answer instead
                self._lookups[table] = found
            return self._lookups[table]

    def close(self) -> None:
        """Close the connection (and any per-thread cursors) and release the writer lock."""
        for cursor in self._cursors:
            cursor.close()
        self._cursors.clear()
        self._threads = None
        self._lookups.clear()  # their mapped segments
        if self._snapshot is not None:
            self._snapshot.close()  # the connection (when made), then the segments' lock
        elif self._con is not None:
            self._con.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def set_threads(self, threads: int) -> None:
        """Cap the threads DuckDB uses for this connection's queries.

        Args:
            threads: at least 1.
        """
        self.con.execute(SET_THREADS.format(threads=int(threads)))  # an int: nothing else

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One DuckDB transaction around the block: committed when it ends, rolled back (and
        the error re-raised) when it raises."""
        self.con.execute(BEGIN)
        try:
            yield
        except Exception:
            self.con.execute(ROLLBACK)
            raise
        self.con.execute(COMMIT)

    @contextlib.contextmanager
    def bound(
        self, values: Sequence | np.ndarray, kind: pa.DataType | None = None, con=None
    ) -> Iterator[str]:
        """Yield `(SELECT v FROM view)`: `values` (int64 unless `kind` says otherwise) as a
        registered one-column Arrow view, for `x IN {ref}` inside the block, on `con` (a
        cursor of the store's; None: the store's connection). A Python list
        bound as a `?::BIGINT[]` parameter costs DuckDB 1.4 two failed `import pandas` per
        element (`benchmarks/bound_ids.py`)."""
        con = con if con is not None else self.con
        name = f"bound_values_{next(self._bound_views)}"
        con.register(name, pa.table({"v": pa.array(values, kind or pa.int64())}))
        try:
            yield f"(SELECT v FROM {name})"
        finally:
            con.unregister(name)

    def insert_view(self, statement: str, table: pa.Table) -> None:
        """Run `statement` (an INSERT ... SELECT * FROM {view}, or an UPDATE ... FROM {view}) over
        an Arrow table registered for the statement only.

        Args:
            statement: SQL with a `{view}` placeholder for the registered table's name.
            table: the rows (or one record batch) to insert, in the target's column order.
        """
        name = f"insert_view_{next(self._bound_views)}"
        self.con.register(name, table)
        try:
            self.con.execute(statement.format(view=name))
        finally:
            self.con.unregister(name)

    def scalar(self, statement: str, params: list | None = None) -> Any:
        """The one value of a statement that returns exactly one row (`schema.scalar`)."""
        return scalar(self.con, statement, params)

    # -- data version and snapshots ---------------------------------------------------------
    def data_version(self) -> int:
        """A counter raised by every transaction that changes what a search can see."""
        value = self.meta("data_version")
        return int(value) if value is not None else 0

    def meta(self, key: str) -> str | None:
        """One `meta` value of what is open (None: absent). A snapshot's manifest records
        the whole `meta` table when it is published, so a reader takes it from there without
        a DuckDB connection; the live file, a legacy copy or an older manifest is asked."""
        recorded = self._recorded_meta()
        if recorded is not None:
            value = recorded.get(key)
            return None if value is None else str(value)
        return read_meta(self.con, key)

    def _recorded_meta(self) -> dict[str, Any] | None:
        manifest = self._manifest
        return manifest_meta(manifest) if manifest is not None else None

    @property
    def _manifest(self) -> dict[str, Any] | None:
        """The open snapshot's manifest (None: the live file or a legacy copy)."""
        return self._snapshot.manifest if self._snapshot is not None else None

    def has_table(self, table: str) -> bool:
        """Whether the store has `table` (a store from before the step that added it has
        not): a snapshot's manifest names its tables; the live file's catalog is asked."""
        manifest = self._manifest
        if manifest is not None:
            return table in manifest["tables"]
        return bool(self.scalar(HAS_TABLE, [table]))

    def has_rows(self, table: str) -> bool:
        """Whether `table` holds a row. A snapshot's manifest shows a table no segment of
        which has rows, and then nothing is read; otherwise DuckDB is asked."""
        manifest = self._manifest
        if manifest is not None:
            segments = manifest["tables"].get(table, {}).get("segments", [])
            if not any(segment["rows"] for segment in segments):
                return False
        return bool(self.scalar(f'SELECT EXISTS (SELECT 1 FROM "{table}")'))

    def bump_data_version(self) -> None:
        """Raise the data version; inside the caller's transaction, so the counter moves
        exactly when the data does."""
        self.con.execute(SET_META, ["data_version", str(self.data_version() + 1)])

    def write_snapshot(self, folder: Path) -> None:
        """Publish the snapshot searches read with the index version being written to
        `folder`: Parquet segments of what changed since the current version, and the
        manifest naming them (`indexer.store.segments`).

        Only the writer calls this; nothing writes meanwhile.

        Args:
            folder: the index version folder the snapshot is published with.
        """
        publish_segments(self.con, folder)
