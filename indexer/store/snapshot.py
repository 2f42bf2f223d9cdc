"""Published snapshots: what readers open beside each index version. A version's manifest
(`index/vN/snapshot.json`) names immutable Parquet segments under `index/segments/`; a reader
sees every store table as a view over them. Opens, reads and checks snapshots; writing them is
`indexer.store.segments`, choosing which version is current `indexer.records.versions`.

A store published by an earlier bertindex (a copied `index/vN/store.duckdb`, no manifest) is
still opened read-only as it is, until its next publish.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from indexer.errors import StoreError
from indexer.records.versions import (
    MANIFEST_FILE,
    SEGMENTS_DIR,
    SNAPSHOT_FILE,
    current_version,
    index_root,
    version_dir,
)
from indexer.store.lazy_views import LazyViews
from indexer.store.rows import SnapshotFacts
from indexer.store.schema import COUNT_CHUNKS, read_meta, scalar

if TYPE_CHECKING:
    import duckdb

FORMAT = "bertindex-segments-1"
HASH, SEG = "_h", "_seg"  # a segment's row identity and its order (see indexer.store.segments)
# a reader's DuckDB: no table of its own, only views over Parquet files it streams. A join or
# aggregate past the limit spills to a folder of this process's own in the system temp
# directory (an in-memory DuckDB would use `./.tmp` of wherever the process runs).
READER_MEMORY_LIMIT = "512MB"
# types that come back from Parquet as DuckDB wrote them; other columns are cast back
_ROUND_TRIP = {"BIGINT", "INTEGER", "VARCHAR", "DOUBLE", "JSON", "TIMESTAMP", "BOOLEAN"}


@dataclass
class Snapshot:
    """An open snapshot: the version it reads, its connection, and what to release with it.

    A manifest's snapshot opens its DuckDB connection on first use (`con`): a one-off search
    reads everything it needs from the manifest (`meta`, which tables have rows) and the
    segments themselves (`segment_fetch`), so it never imports DuckDB (~70 ms of a cold query
    at 10M, AMD EPYC).

    Attributes:
        version: the index version (`vN`).
        path: the version's manifest (or its legacy `store.duckdb`), for messages.
        hold: the file whose shared lock keeps the version's segments on disk (None for a
            legacy snapshot, whose file stays readable once open).
        manifest: the segments' manifest (None for a legacy snapshot).
        views: the views not created yet (None for a legacy snapshot, and until `con`).
    """

    version: str
    path: Path
    hold: IO[bytes] | None = None
    manifest: dict[str, Any] | None = None
    views: LazyViews | None = None
    connect: Callable[[], tuple[Any, LazyViews | None]] | None = None
    _con: Any = None
    _opening: threading.Lock = field(default_factory=threading.Lock)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection whose tables are the version's store tables (made once)."""
        if self._con is None:
            with self._opening:  # a server's threads may ask at once
                if self._con is None:
                    if self.connect is None:
                        raise StoreError(f"the snapshot {self.path} was closed")
                    self._con, self.views = self.connect()
        return self._con

    @property
    def opened(self) -> bool:
        """Whether the connection was made (`con`)."""
        return self._con is not None

    def close(self) -> None:
        """Close the connection (when made; a query on it then fails as DuckDB's on a closed
        connection do), then give up the lock."""
        if self._con is not None:
            self._con.close()
        self.connect = None
        self.release()

    def release(self) -> None:
        """Give up the lock; the writer's next collection may then remove the segments."""
        if self.hold is not None:
            self.hold.close()
            self.hold = None


def segments_dir(store_dir: str | Path) -> Path:
    return index_root(store_dir) / SEGMENTS_DIR


def lock_path(store_dir: str | Path, manifest_id: str) -> Path:
    """The per-version lock/manifest file readers hold a shared lock on."""
    return segments_dir(store_dir) / f"{manifest_id}.json"


def read_manifest(path: Path) -> dict[str, Any]:
    """A manifest's JSON, checked for its format.

    Raises:
        StoreError: the file cannot be read or is not a segment manifest.
    """
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise StoreError(f"snapshot manifest {path} cannot be read ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise StoreError(f"{path} is not a bertindex snapshot manifest ({FORMAT})")
    return manifest


def open_current_snapshot(store_dir: Path, attempts: int = 5) -> Snapshot | None:
    """Open the current version's snapshot: views over its segments, or a legacy copy.

    Args:
        store_dir: the store directory.
        attempts: how often to re-read `CURRENT` when a writer switches versions meanwhile.
    Returns:
        The open Snapshot, or None when the store has no snapshot (nothing published, or an
        index published before snapshots existed).
    Raises:
        StoreError: the current snapshot exists but cannot be opened, or the version kept
            changing.
    """
    for _ in range(attempts):
        version = current_version(store_dir)
        if version is None:
            return None
        folder = version_dir(store_dir, version)
        opened: Snapshot | None = None
        if (folder / MANIFEST_FILE).is_file():
            opened = _open_segments(store_dir, version)
        elif (folder / SNAPSHOT_FILE).is_file():
            opened = _open_legacy(store_dir, version)
        elif folder.is_dir() and current_version(store_dir) == version:
            return None  # an index published before snapshots existed
        if opened is not None:
            return opened
    raise StoreError(f"{store_dir}: the index version kept changing while opening; retry")


def _damaged(store_dir: Path, path: Path, exc: object) -> StoreError:
    reason = (str(exc).strip().splitlines() or ["unreadable"])[0]  # DuckDB adds the SQL below
    return StoreError(  # the live version's snapshot is never removed: damaged
        f"cannot open the published snapshot {path} ({reason}); rebuild it from the store: "
        f"`bertindex doctor --repair --store {store_dir}`"
    )


def _open_legacy(store_dir: Path, version: str) -> Snapshot | None:
    """A version published before segments: its copied `store.duckdb`, read-only."""
    snap = version_dir(store_dir, version) / SNAPSHOT_FILE
    if not snap.is_file():
        return None
    import duckdb

    try:
        con = duckdb.connect(str(snap), read_only=True)
        return Snapshot(version, snap, _con=con)
    except duckdb.Error as exc:
        if current_version(store_dir) == version and snap.is_file():
            raise _damaged(store_dir, snap, exc) from None
        return None  # removed after we read the pointer (an old version being cleaned)


def _open_segments(store_dir: Path, version: str) -> Snapshot | None:
    """Lock the version's lock/manifest file shared, then build the views it describes.

    None when the version was removed meanwhile (the caller reads CURRENT again). The lock
    is checked after it is taken: a file unlinked between open and lock (`st_nlink` 0) means
    the writer collected the version, so its segments may be gone.
    """
    manifest_file = version_dir(store_dir, version) / MANIFEST_FILE
    try:
        manifest_id = read_manifest(manifest_file)["id"]
        hold = open(lock_path(store_dir, manifest_id), "rb")  # noqa: SIM115 (held open)
    except (StoreError, OSError) as exc:
        if current_version(store_dir) == version and manifest_file.is_file():
            raise _damaged(store_dir, manifest_file, exc) from None
        return None
    try:
        fcntl.flock(hold.fileno(), fcntl.LOCK_SH)
        if os.fstat(hold.fileno()).st_nlink == 0:
            hold.close()
            return None
        manifest = json.loads(hold.read())
        check_segments(segments_dir(store_dir), manifest)
    except (OSError, ValueError) as exc:
        hold.close()
        raise _damaged(store_dir, manifest_file, exc) from None

    def connect() -> tuple[Any, LazyViews]:
        import duckdb

        try:
            return views_connection(segments_dir(store_dir), manifest, damaged)
        except (OSError, duckdb.Error) as exc:
            raise damaged(exc) from None

    def damaged(exc: Exception) -> Exception:
        return _damaged(store_dir, manifest_file, exc)

    return Snapshot(version, manifest_file, hold, manifest, connect=connect)


def check_segments(folder: Path, manifest: dict[str, Any]) -> None:
    """The cheap part of checking a snapshot, done when it opens: each segment of `manifest`
    is in `folder` and ends like a Parquet file.

    Raises:
        OSError: a segment file is missing, or does not end like a Parquet file.
    """
    for table in manifest["tables"].values():
        for segment in table["segments"]:
            for name in (segment["rows"], segment["dead"]):
                if name:
                    _check_parquet_tail(folder / name)


def views_connection(
    folder: Path, manifest: dict[str, Any], damaged: Callable[[Exception], Exception]
) -> tuple[duckdb.DuckDBPyConnection, LazyViews]:
    """An in-memory DuckDB in which each table of `manifest` is a view of the same name and
    column types over its segments in `folder`, tombstoned rows left out; the views of
    tables with segments are created when a query first names them (`lazy_views`), the
    others (no rows, no file to read) at once. The segments were checked when the
    snapshot opened (`check_segments`).
    """
    import duckdb

    spill = os.path.join(tempfile.gettempdir(), f"bertindex-reader-{os.getpid()}")
    con = duckdb.connect(
        ":memory:", config={"memory_limit": READER_MEMORY_LIMIT, "temp_directory": spill}
    )
    pending = {}
    try:
        con.execute("SET parquet_metadata_cache = true")  # segments never change in place
        for name, table in manifest["tables"].items():
            if any(s["rows"] for s in table["segments"]):
                pending[name] = view_sql(folder, table)
            else:
                con.execute(f'CREATE VIEW "{name}" AS {view_sql(folder, table)}')
    except BaseException:
        con.close()
        raise
    return con, LazyViews(list(manifest["tables"]), pending, damaged)


def _check_parquet_tail(path: Path) -> None:
    """Raise OSError unless `path` ends with Parquet's footer magic (a truncated or
    overwritten segment; the rest of a check would read its footer, what `lazy_views`
    defers)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        tail = os.pread(fh.fileno(), 4, size - 4) if size >= 12 else b""
    if tail != b"PAR1":
        raise OSError(f"{path.name} is not a whole Parquet file ({size} bytes)")


def parquet_list(folder: Path, names: list[str]) -> str:
    """A DuckDB list literal of the files `names` in `folder`, quotes escaped."""
    return "[" + ", ".join("'" + str(folder / n).replace("'", "''") + "'" for n in names) + "]"


def visible_sql(folder: Path, segments: list[dict[str, Any]], columns: str) -> str:
    """The rows of `segments` (`columns` of each) but the ones a tombstone of a later segment
    hides (`_h` equal, `_seg` greater): what a view reads and what a publish diffs against."""
    rows = parquet_list(folder, [s["rows"] for s in segments if s["rows"]])
    dead = [s["dead"] for s in segments if s["dead"]]
    sql = f"SELECT {columns} FROM read_parquet({rows}) r"
    if dead:
        sql += (
            f" ANTI JOIN read_parquet({parquet_list(folder, dead)}) d "
            f"ON d.{HASH} = r.{HASH} AND d.{SEG} > r.{SEG}"
        )
    return sql


def view_sql(folder: Path, table: dict[str, Any]) -> str:
    """The SELECT of one table's view, with the table's column types."""
    columns = table["columns"]
    if not any(s["rows"] for s in table["segments"]):
        nulls = ", ".join(f'CAST(NULL AS {kind}) AS "{name}"' for name, kind in columns)
        return f"SELECT {nulls} LIMIT 0"
    select = ", ".join(
        f'r."{name}"' if kind in _ROUND_TRIP else f'CAST(r."{name}" AS {kind}) AS "{name}"'
        for name, kind in columns
    )
    return visible_sql(folder, table["segments"], select)


def manifest_facts(manifest: dict[str, Any]) -> SnapshotFacts | None:
    """The data version and chunk count a manifest recorded at publishing (None: absent)."""
    facts = manifest.get("facts") or {}
    try:
        return SnapshotFacts(int(facts["data_version"]), int(facts["chunks"]))
    except (KeyError, TypeError, ValueError):
        return None


def manifest_meta(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The `meta` table a manifest recorded at publishing, key -> value (None: a manifest
    published before it did)."""
    recorded = (manifest.get("facts") or {}).get("meta")
    return recorded if isinstance(recorded, dict) else None


def read_snapshot_facts(folder: Path) -> SnapshotFacts:
    """The data version and chunk count of a version's snapshot: its manifest's record, or
    read from a legacy `store.duckdb` copy without migrating it.

    Args:
        folder: an index version folder (`index/vN`).
    Returns:
        SnapshotFacts.
    Raises:
        StoreError: there is no snapshot, or it cannot be read; the message names the file,
            says which, and gives the reason.
    """
    manifest = folder / MANIFEST_FILE
    if manifest.is_file():
        facts = manifest_facts(read_manifest(manifest))
        if facts is None:
            raise StoreError(f"snapshot manifest {manifest} lacks its facts")
        return facts
    snap = folder / SNAPSHOT_FILE
    import duckdb

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


def segment_problems(store_dir: Path, folder: Path) -> list[str]:
    """What is wrong with the segments a version's manifest lists: each missing or damaged
    file named (its Parquet footer unreadable, or another row count than the manifest's).

    Args:
        store_dir: the store directory.
        folder: the version folder holding `snapshot.json`.
    Returns:
        One line per problem; empty when every segment reads as recorded.
    Raises:
        StoreError: the manifest itself cannot be read.
    """
    manifest = read_manifest(folder / MANIFEST_FILE)
    where = segments_dir(store_dir)
    lock = lock_path(store_dir, manifest["id"])
    problems = [] if lock.is_file() else [f"{lock} missing"]
    for table in manifest["tables"].values():
        for seg in table["segments"]:
            for name, count in ((seg["rows"], seg["n_rows"]), (seg["dead"], seg["n_dead"])):
                problem = _segment_problem(where / name, count) if name else None
                if problem:
                    problems.append(problem)
    return problems


def _segment_problem(path: Path, count: int) -> str | None:
    """Why one segment file is unusable (missing, damaged, or not `count` rows), or None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        found = pq.read_metadata(path).num_rows
    except FileNotFoundError:
        return f"{path} missing"
    except (OSError, ValueError, pa.ArrowException) as exc:  # a cut or garbled footer
        return f"{path} damaged ({exc})"
    return None if found == count else f"{path} holds {found} rows, {count} recorded"
