"""Store: one DuckDB file holding documents, chunks, their vectors, provenance and rejects.

The vectors here are the truth; a FAISS index is a cache rebuilt from them. Does not encode
and does not touch FAISS. All SQL takes values as bound parameters.

One process writes (DuckDB allows one read-write process per file). Readers open the read-only
snapshot published beside the current index version (`index/vN/store.duckdb`), so a search never
waits for, nor sees half of, a running write.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa

from indexer.encode.encoder import Provenance
from indexer.errors import ProvenanceMismatch, StoreError
from indexer.faults import crash_point
from indexer.ingest.readers import Record, Rejected
from indexer.index.versions import SNAPSHOT_FILE, current_version, fsync_dir, version_dir

if TYPE_CHECKING:
    from typing_extensions import Self

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
# DuckDB's buffer pool for a writer (default: 80 % of RAM). It caches every block a run reads,
# so without a bound a writer's memory grows with the store; above it DuckDB evicts and spills
# to `<store>/store.duckdb.tmp` (README "Memory").
WRITER_MEMORY_LIMIT = "128MB"
DB_NAME = "store.duckdb"
# Keys that must agree between stored vectors and a new encoder before adding vectors.
WRITE_KEYS = ("model_name", "weights_hash", "pooling", "normalize", "max_length", "dim")
# Keys that must agree between stored vectors and the query encoder.
QUERY_KEYS = ("weights_hash", "pooling", "normalize", "dim")

_MIGRATIONS: dict[int, list[str]] = {
    1: [
        "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
        "CREATE SEQUENCE doc_ids START 1",
        "CREATE SEQUENCE chunk_ids START 1",
        """CREATE TABLE documents (
            doc_id BIGINT PRIMARY KEY,
            collection VARCHAR NOT NULL,
            external_id VARCHAR NOT NULL,
            title VARCHAR,
            text VARCHAR NOT NULL,
            metadata JSON,
            content_hash VARCHAR NOT NULL,
            ingested_at TIMESTAMP NOT NULL,
            UNIQUE (collection, external_id))""",
        """CREATE TABLE chunks (
            chunk_id BIGINT PRIMARY KEY,
            doc_id BIGINT NOT NULL,
            ordinal INTEGER NOT NULL,
            start_char INTEGER NOT NULL,
            end_char INTEGER NOT NULL,
            n_tokens INTEGER NOT NULL)""",
        "CREATE INDEX chunks_doc ON chunks (doc_id)",
        """CREATE TABLE rejected (
            run_id VARCHAR, source VARCHAR, row_number BIGINT, external_id VARCHAR,
            reason VARCHAR, rejected_at TIMESTAMP)""",
        """CREATE TABLE runs (
            run_id VARCHAR PRIMARY KEY, kind VARCHAR, started_at TIMESTAMP,
            finished_at TIMESTAMP, status VARCHAR, summary JSON)""",
    ],
    # 2: bulk annotation (indexer/annotation_store.py). `annotated` marks (document, head) pairs
    # done at a head version and content hash, so a tagger that found no entity is done too.
    2: [
        """CREATE TABLE annotations (
            doc_id BIGINT NOT NULL, head VARCHAR NOT NULL, head_version VARCHAR NOT NULL,
            label VARCHAR NOT NULL, probability DOUBLE NOT NULL)""",
        """CREATE TABLE entities (
            doc_id BIGINT NOT NULL, head VARCHAR NOT NULL, head_version VARCHAR NOT NULL,
            start_char INTEGER NOT NULL, end_char INTEGER NOT NULL, type VARCHAR NOT NULL,
            text VARCHAR NOT NULL, score DOUBLE NOT NULL)""",
        """CREATE TABLE annotated (
            doc_id BIGINT NOT NULL, head VARCHAR NOT NULL, head_version VARCHAR NOT NULL,
            content_hash VARCHAR NOT NULL, annotated_at TIMESTAMP NOT NULL)""",
        """CREATE TABLE inbox_ledger (
            content_hash VARCHAR PRIMARY KEY, path VARCHAR NOT NULL, rows BIGINT,
            status VARCHAR NOT NULL, run_id VARCHAR, started_at TIMESTAMP,
            finished_at TIMESTAMP, summary JSON)""",
    ],
}


def content_hash(record: Record) -> str:
    """What decides re-encoding: the title and text (metadata changes do not re-encode)."""
    digest = hashlib.sha256()
    digest.update((record.title or "").encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    digest.update(record.text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


@dataclass
class ChunkRows:
    """Chunks of one batch, ready to insert: parallel arrays plus (n, dim) vectors."""

    doc_ids: list[int]
    ordinals: list[int]
    starts: list[int]
    ends: list[int]
    n_tokens: list[int]
    vectors: np.ndarray


@dataclass
class Hit:
    chunk_id: int
    doc_id: int
    collection: str
    external_id: str
    title: str | None
    text: str
    metadata: dict
    start_char: int
    end_char: int


class WriterLock:
    """The store's single-writer lock (`<store>/writer.lock`, flock): held by every writing
    Store, and by `reindex` and `doctor` across work done with no writing Store open.

    A second writer is refused at once (never queued): the error names the store and the
    process holding it (pid, command, start time, written into the lock file). Released by the
    kernel when the holder dies, SIGKILL included.
    """

    def __init__(self, store_dir: Path):
        import fcntl

        self.path = Path(store_dir) / "writer.lock"
        self._fh = open(self.path, "a+")  # noqa: SIM115  (held open: the lock lives with it)
        try:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._fh.close()
            raise StoreError(
                f"store {store_dir} is being written by another bertindex process "
                f"({self.holder()}); wait for it to finish and run again. Searches keep "
                "working meanwhile."
            ) from None
        started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:200] if sys.argv else "?"
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(json.dumps({"pid": os.getpid(), "command": command, "since": started}))
        self._fh.flush()

    def holder(self) -> str:
        """Who holds the lock, as its holder wrote it ("pid 123: bertindex index …, since …")."""
        try:
            info = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            info = {}
        if not info.get("pid"):
            return "process unknown"
        return f"pid {info['pid']}: {info.get('command', '?')}, since {info.get('since', '?')}"

    def release(self) -> None:
        if not self._fh.closed:
            self._fh.close()  # closing the file releases the flock


class Store:
    """A store directory: `store.duckdb` plus `index/` versions beside it.

    Args:
        path: the store directory (created when writable).
        read_only: open for queries only; the store must exist.
        snapshot: with read_only, open the snapshot published with the current index version
            (never locked by a writer, always consistent with that index); a store without
            snapshots (written before they existed) falls back to `store.duckdb`.

    Attributes:
        version: the index version whose snapshot is open (None: the live file is open).
    """

    def __init__(self, path: str | Path, read_only: bool = False, snapshot: bool = True,
                 lock: bool = True):
        self.path = Path(path)
        self.db_path = self.path / DB_NAME
        self.read_only = read_only
        self.version: str | None = None
        self._lock: WriterLock | None = None
        self._bound_views = itertools.count()  # names of `bound` views
        if read_only and snapshot:
            self.con = self._open_snapshot()
            if self.con is not None:
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
        try:
            self.con = duckdb.connect(
                str(self.db_path), read_only=read_only,
                config={} if read_only else {"memory_limit": WRITER_MEMORY_LIMIT})
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

    def _migrate_or_close(self) -> None:
        """Upgrade the schema; a store this code cannot use is closed (connection and lock)
        before the error propagates, so the process can open it again or leave it alone."""
        try:
            self._migrate()
        except BaseException:
            self.close()
            raise

    @property
    def con_path(self) -> Path:
        """The file open here: the live store, or the snapshot of `version`."""
        if self.version is None:
            return self.db_path
        return version_dir(self.path, self.version) / SNAPSHOT_FILE

    def _open_snapshot(self, attempts: int = 5) -> duckdb.DuckDBPyConnection | None:
        """Connect to the current version's snapshot; None when the store has none."""
        for _ in range(attempts):
            version = current_version(self.path)
            if version is None:
                return None
            snap = version_dir(self.path, version) / SNAPSHOT_FILE
            if not snap.is_file():
                if current_version(self.path) == version:
                    return None  # an index published before snapshots existed
                continue  # the writer switched versions meanwhile: read the pointer again
            try:
                con = duckdb.connect(str(snap), read_only=True)
            except duckdb.Error as exc:
                if current_version(self.path) == version and snap.is_file():
                    raise StoreError(  # the live version's snapshot is never removed: damaged
                        f"cannot open the published snapshot {snap} ({exc}); rebuild it from "
                        f"the store: `bertindex doctor --repair --store {self.path}`"
                    ) from None
                continue  # removed after we read the pointer (an old version being cleaned)
            self.version = version
            return con
        raise StoreError(f"{self.path}: the index version kept changing while opening; retry")

    # -- schema -----------------------------------------------------------------------
    def _version(self) -> int:
        has_meta = self.con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'meta'"
        ).fetchone()[0]
        if not has_meta:
            return 0
        row = self.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    def _migrate(self) -> None:
        version = self._version()
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
            self.con.execute("BEGIN")
            for sql in _MIGRATIONS[step]:
                self.con.execute(sql)
            self.con.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(step)]
            )
            if step > 1:
                self._bump_data_version()  # the published snapshot has the old schema
            self.con.execute("COMMIT")

    def close(self) -> None:
        self.con.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- versions and snapshots ---------------------------------------------------------
    def data_version(self) -> int:
        """A counter raised by every transaction that changes what a search can see."""
        row = self.con.execute("SELECT value FROM meta WHERE key = 'data_version'").fetchone()
        return int(row[0]) if row else 0

    def _bump_data_version(self) -> None:
        # inside the caller's transaction: the counter moves exactly when the data does
        self.con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('data_version', ?)", [str(self.data_version() + 1)]
        )

    def write_snapshot(self, folder: Path) -> None:
        """Copy the store, checkpointed, to `folder/store.duckdb` for read-only searches.

        Only the writer calls this; nothing writes between the checkpoint and the copy.
        """
        self.con.execute("CHECKPOINT")  # everything in the main file, nothing left in the WAL
        target = Path(folder) / SNAPSHOT_FILE
        with open(self.db_path, "rb") as src, open(target, "wb") as dst:
            half = self.db_path.stat().st_size // 2
            while half > 0:  # the first half, then the crash point the tests use
                block = src.read(min(half, 8 << 20))
                if not block:
                    break
                dst.write(block)
                half -= len(block)
            crash_point("snapshot.partial")
            shutil.copyfileobj(src, dst, length=8 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        fsync_dir(Path(folder))

    @contextlib.contextmanager
    def bound(self, values: Sequence | np.ndarray, kind: pa.DataType | None = None):
        """Yield `(SELECT v FROM view)`: `values` (int64 unless `kind` says otherwise) as a
        registered one-column Arrow view, for `x IN {ref}` inside the block. A Python list
        bound as a `?::BIGINT[]` parameter costs DuckDB 1.4 two failed `import pandas` per
        element (`benchmarks/bound_ids.py`)."""
        name = f"bound_values_{next(self._bound_views)}"
        self.con.register(name, pa.table({"v": pa.array(values, kind or pa.int64())}))
        try:
            yield f"(SELECT v FROM {name})"
        finally:
            self.con.unregister(name)

    @contextlib.contextmanager
    def transaction(self):
        """One DuckDB transaction around the block: committed when it ends, rolled back (and
        the error re-raised) when it raises."""
        self.con.execute("BEGIN")
        try:
            yield self.con
        except Exception:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- provenance -------------------------------------------------------------------
    def provenance(self) -> Provenance | None:
        row = self.con.execute("SELECT value FROM meta WHERE key = 'provenance'").fetchone()
        return Provenance(**json.loads(row[0])) if row else None

    def check_provenance(self, current: Provenance, keys: Sequence[str]) -> None:
        """Refuse to mix vectors of different encoders in one store."""
        stored = self.provenance()
        if stored is None:
            return
        diffs = stored.mismatches(current, keys)
        if diffs:
            raise ProvenanceMismatch(
                f"store {self.path} holds vectors made by another encoder set-up "
                f"(stored != configured: {'; '.join(diffs)}). Use the configuration the store "
                "was built with, re-encode it with the configured model (`bertindex reindex "
                f"--store {self.path}`), or index into a new --store."
            )

    def set_provenance(self, current: Provenance) -> None:
        self.check_provenance(current, WRITE_KEYS)
        if self.provenance() is None:
            self.con.execute(
                "INSERT INTO meta VALUES ('provenance', ?)", [json.dumps(current.to_dict())]
            )
            self.con.execute(
                f"CREATE TABLE IF NOT EXISTS vectors "
                f"(chunk_id BIGINT PRIMARY KEY, embedding FLOAT[{int(current.dim)}])"
            )

    def iter_documents(self, batch_rows: int = 2048, exclude: Iterable[int] = ()
                       ) -> Iterable[tuple[str, list[tuple[int, Record, str]]]]:
        """(collection, [(doc id, record, content hash)]) in doc id order, at most
        `batch_rows` per item, one collection per item; `exclude` skips doc ids."""
        skip = pa.table({"doc_id": pa.array(sorted(exclude), pa.int64())})
        self.con.register("skip_view", skip)
        reader = self.con.execute(
            "SELECT doc_id, collection, external_id, title, text, metadata, content_hash "
            "FROM documents WHERE doc_id NOT IN (SELECT doc_id FROM skip_view) "
            "ORDER BY collection, doc_id"
        ).fetch_record_batch(batch_rows)
        pending: list = []
        current = None
        for rb in reader:
            for row in rb.to_pylist():
                if current is not None and (row["collection"] != current
                                            or len(pending) >= batch_rows):
                    yield current, pending
                    pending = []
                current = row["collection"]
                record = Record(row["external_id"], row["text"], row["title"],
                                json.loads(row["metadata"]) if row["metadata"] else {},
                                source=f"store:{row['collection']}", row=row["doc_id"])
                pending.append((row["doc_id"], record, row["content_hash"]))
        self.con.unregister("skip_view")
        if pending:
            yield current, pending

    def delete_doc_ids(self, doc_ids: Sequence[int]) -> list[int]:
        """Delete documents by doc id with their chunks and vectors; returns chunk ids removed."""
        if not doc_ids:
            return []
        with self.transaction():
            removed = self._delete_docs([int(d) for d in doc_ids])
            self._bump_data_version()
        return removed

    def _delete_docs(self, doc_ids: list[int]) -> list[int]:
        """Delete documents with their chunks, vectors and side rows (inside a transaction);
        returns the chunk ids removed."""
        con = self.con
        with self.bound(doc_ids) as ids:
            removed = con.execute(f"SELECT chunk_id FROM chunks WHERE doc_id IN {ids}").fetchnumpy()
            removed = removed["chunk_id"].astype(np.int64).tolist()
            if removed and self.provenance() is not None:
                with self.bound(removed) as chunk_ids:
                    con.execute(f"DELETE FROM vectors WHERE chunk_id IN {chunk_ids}")
            con.execute(f"DELETE FROM chunks WHERE doc_id IN {ids}")
            # names come from information_schema, never from input; values are bound
            for name in self._side_tables(keyed_by_doc=True):
                con.execute(f'DELETE FROM "{name}" WHERE doc_id IN {ids}')
            con.execute(f"DELETE FROM documents WHERE doc_id IN {ids}")
        return removed

    def _side_tables(self, keyed_by_doc: bool) -> list[str]:
        """Tables beside documents/chunks/vectors/meta (annotations, runs, ...); with
        `keyed_by_doc`, only those with a doc_id column."""
        rows = self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_type = 'BASE TABLE' ORDER BY table_name").fetchall()
        names = [r[0] for r in rows if r[0] not in ("documents", "chunks", "vectors", "meta")]
        if not keyed_by_doc:
            return names
        keyed = {r[0] for r in self.con.execute(
            "SELECT table_name FROM information_schema.columns WHERE column_name = 'doc_id'"
        ).fetchall()}
        return [n for n in names if n in keyed]

    def copy_side_tables(self, source: Store) -> list[str]:
        """Replace the rows of every side table (annotations, entities, runs, rejected, ...)
        with the source store's, in one transaction; both stores have the same schema.

        Returns:
            The tables copied.
        """
        names = [n for n in source._side_tables(keyed_by_doc=False)
                 if n in set(self._side_tables(keyed_by_doc=False))]
        con = self.con
        with self.transaction():
            for name in names:
                con.execute(f'DELETE FROM "{name}"')
                reader = source.con.execute(f'SELECT * FROM "{name}"').fetch_record_batch(65536)
                for rb in reader:
                    con.register("side_rows_view", rb)
                    con.execute(f'INSERT INTO "{name}" SELECT * FROM side_rows_view')
                    con.unregister("side_rows_view")
        return names

    def restart_doc_ids_after(self, max_doc_id: int) -> None:
        """Make new doc ids start above `max_doc_id` (a store whose documents were copied)."""
        self.con.execute("DROP SEQUENCE doc_ids")
        self.con.execute(f"CREATE SEQUENCE doc_ids START {int(max_doc_id) + 1}")

    # -- writes -----------------------------------------------------------------------
    def existing(self, collection: str, external_ids: Sequence[str]) -> dict[str, tuple[int, str, str]]:
        """external_id -> (doc_id, content_hash, metadata json) for ids already stored."""
        if not external_ids:
            return {}
        with self.bound(list(external_ids), pa.string()) as ids:
            rows = self.con.execute(
                "SELECT external_id, doc_id, content_hash, metadata FROM documents "
                f"WHERE collection = ? AND external_id IN {ids}", [collection],
            ).fetchall()
        return {r[0]: (r[1], r[2], r[3]) for r in rows}

    def next_ids(self, sequence: str, count: int) -> list[int]:
        if count == 0:
            return []
        assert sequence in ("doc_ids", "chunk_ids")
        rows = self.con.execute(
            f"SELECT nextval('{sequence}') FROM range(?)", [count]
        ).fetchall()
        return [r[0] for r in rows]

    def write_batch(
        self,
        collection: str,
        new_docs: list[tuple[int, Record, str]],
        changed_docs: list[tuple[int, Record, str]],
        metadata_updates: list[tuple[int, Record]],
        chunks: ChunkRows,
        rejected: list[Rejected],
        run_id: str,
    ) -> tuple[list[int], list[int]]:
        """Commit one batch in one transaction.

        Args:
            new_docs, changed_docs: (doc_id, record, content hash).
            metadata_updates: unchanged text, new metadata.
            chunks: the chunks of new and changed documents with their vectors.
        Returns:
            (chunk ids added, chunk ids removed) for the vector index.
        """
        now = datetime.now(timezone.utc).replace(tzinfo=None)
        chunk_ids = self.next_ids("chunk_ids", len(chunks.doc_ids))
        con = self.con
        with self.transaction():
            removed: list[int] = []
            if changed_docs:
                changed_ids = [d for d, _, _ in changed_docs]
                with self.bound(changed_ids) as ids:
                    removed = con.execute(
                        f"SELECT chunk_id FROM chunks WHERE doc_id IN {ids}"
                    ).fetchnumpy()["chunk_id"].astype(np.int64).tolist()
                with self.bound(removed) as old_chunks:
                    con.execute(f"DELETE FROM vectors WHERE chunk_id IN {old_chunks}")
                    con.execute(f"DELETE FROM chunks WHERE chunk_id IN {old_chunks}")
                con.executemany(
                    "UPDATE documents SET title = ?, text = ?, metadata = ?, content_hash = ?, "
                    "ingested_at = ? WHERE doc_id = ?",
                    [[r.title, r.text, _json(r.metadata), h, now, d] for d, r, h in changed_docs],
                )
            if metadata_updates:
                con.executemany(
                    "UPDATE documents SET metadata = ? WHERE doc_id = ?",
                    [[_json(r.metadata), d] for d, r in metadata_updates],
                )
            if new_docs:
                table = pa.table({
                    "doc_id": pa.array([d for d, _, _ in new_docs], pa.int64()),
                    "collection": pa.array([collection] * len(new_docs), pa.string()),
                    "external_id": pa.array([r.external_id for _, r, _ in new_docs], pa.string()),
                    "title": pa.array([r.title for _, r, _ in new_docs], pa.string()),
                    "text": pa.array([r.text for _, r, _ in new_docs], pa.string()),
                    "metadata": pa.array([_json(r.metadata) for _, r, _ in new_docs], pa.string()),
                    "content_hash": pa.array([h for _, _, h in new_docs], pa.string()),
                    "ingested_at": pa.array([now] * len(new_docs), pa.timestamp("us")),
                })
                con.register("new_docs_view", table)
                con.execute("INSERT INTO documents SELECT * FROM new_docs_view")
                con.unregister("new_docs_view")
            if chunk_ids:
                dim = chunks.vectors.shape[1]
                chunk_table = pa.table({
                    "chunk_id": pa.array(chunk_ids, pa.int64()),
                    "doc_id": pa.array(chunks.doc_ids, pa.int64()),
                    "ordinal": pa.array(chunks.ordinals, pa.int32()),
                    "start_char": pa.array(chunks.starts, pa.int32()),
                    "end_char": pa.array(chunks.ends, pa.int32()),
                    "n_tokens": pa.array(chunks.n_tokens, pa.int32()),
                })
                flat = pa.array(np.ascontiguousarray(chunks.vectors, dtype=np.float32).ravel())
                vector_table = pa.table({
                    "chunk_id": pa.array(chunk_ids, pa.int64()),
                    "embedding": pa.FixedSizeListArray.from_arrays(flat, dim),
                })
                con.register("new_chunks_view", chunk_table)
                con.register("new_vectors_view", vector_table)
                con.execute("INSERT INTO chunks SELECT * FROM new_chunks_view")
                con.execute("INSERT INTO vectors SELECT * FROM new_vectors_view")
                con.unregister("new_chunks_view")
                con.unregister("new_vectors_view")
            self._insert_rejected(rejected, run_id, now)
            if new_docs or changed_docs or metadata_updates or chunk_ids:
                self._bump_data_version()
            crash_point("batch.before_commit")
        crash_point("batch.after_commit")
        return chunk_ids, removed

    def delete_documents(
        self, collection: str, external_ids: Sequence[str] | None = None,
        keep: Sequence[str] | None = None,
    ) -> tuple[list[str], list[int]]:
        """Delete documents with their chunks and vectors, in one transaction.

        Args:
            collection: the collection they belong to.
            external_ids: delete these ids (unknown ones are ignored).
            keep: or, instead, delete every document of the collection whose id is not here
                (a source's `on_missing: delete`).
        Returns:
            (external ids deleted, chunk ids removed) for the vector index.
        """
        if (external_ids is None) == (keep is None):
            raise ValueError("pass exactly one of external_ids and keep")
        con = self.con
        with self.transaction():
            ids = pa.table({"external_id": pa.array(
                list(external_ids if external_ids is not None else keep), pa.string())})
            con.register("id_list_view", ids)
            member = "IN" if external_ids is not None else "NOT IN"
            rows = con.execute(
                "SELECT doc_id, external_id FROM documents WHERE collection = ? AND external_id "
                + member + " (SELECT external_id FROM id_list_view)",
                [collection],
            ).fetchall()
            con.unregister("id_list_view")
            doc_ids = [r[0] for r in rows]
            removed: list[int] = []
            if doc_ids:
                removed = self._delete_docs(doc_ids)  # annotations of deleted documents too
                self._bump_data_version()
            crash_point("delete.before_commit")
        return sorted(r[1] for r in rows), removed

    def _insert_rejected(self, rejected: list[Rejected], run_id: str, now: datetime) -> None:
        if rejected:
            self.con.executemany(
                "INSERT INTO rejected VALUES (?, ?, ?, ?, ?, ?)",
                [[run_id, r.source, r.row, r.external_id, r.reason, now] for r in rejected],
            )

    def start_run(self, run_id: str, kind: str, started: datetime) -> None:
        """Record a run as `running`. Runs still `running` from earlier were killed: this
        process holds the only write connection, so no other run can be alive."""
        self.con.execute("UPDATE runs SET status = 'interrupted' WHERE status = 'running'")
        self.con.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, NULL, 'running', NULL)",
            [run_id, kind, started],
        )

    def record_run(self, run_id: str, kind: str, started: datetime, status: str, summary: dict) -> None:
        finished = datetime.now(timezone.utc).replace(tzinfo=None)
        self.con.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?)",
            [run_id, kind, started, finished, status, _json(summary)],
        )

    # -- reads ------------------------------------------------------------------------
    def collection_counts(self) -> list[dict]:
        """Documents, chunks and stored vectors per collection."""
        has_vectors = self.provenance() is not None
        vectors = ("(SELECT count(*) FROM vectors v JOIN chunks c2 ON v.chunk_id = c2.chunk_id "
                   "JOIN documents d2 ON c2.doc_id = d2.doc_id WHERE d2.collection = d.collection)"
                   if has_vectors else "0")
        rows = self.con.execute(
            "SELECT d.collection, count(DISTINCT d.doc_id), count(c.chunk_id), " + vectors
            + " FROM documents d LEFT JOIN chunks c ON c.doc_id = d.doc_id "
            "GROUP BY d.collection ORDER BY d.collection"
        ).fetchall()
        return [{"collection": r[0], "documents": r[1], "chunks": r[2], "vectors": r[3]}
                for r in rows]

    def annotation_counts(self) -> dict[str, int]:
        """Annotations per head; empty until an `annotations` table (head, ...) exists."""
        has = self.con.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_name = 'annotations' AND column_name = 'head'"
        ).fetchone()[0]
        if not has:
            return {}
        rows = self.con.execute(
            "SELECT head, count(*) FROM annotations GROUP BY head ORDER BY head").fetchall()
        return {r[0]: r[1] for r in rows}

    def last_runs(self, limit: int = 5) -> list[dict]:
        rows = self.con.execute(
            "SELECT run_id, kind, started_at, finished_at, status, summary FROM runs "
            "ORDER BY started_at DESC LIMIT ?", [limit],
        ).fetchall()
        out = []
        for run_id, kind, started, finished, status, summary in rows:
            info = json.loads(summary) if summary else {}
            out.append({"run_id": run_id, "kind": kind, "started_at": started,
                        "finished_at": finished, "status": status,
                        **{k: info[k] for k in ("read", "encoded", "deleted", "failed_batches")
                           if k in info}})
        return out

    def count_chunks(self) -> int:
        return self.con.execute("SELECT count(*) FROM chunks").fetchone()[0]

    def delete_unreachable(self) -> dict[str, int]:
        """Delete what no search can reach, in one transaction: chunks whose document is gone
        and their vectors, and vectors whose chunk is gone (`bertindex doctor --repair`).

        Returns:
            {"chunks": chunks deleted, "vectors": vectors deleted}.
        """
        orphans = ("SELECT c.chunk_id FROM chunks c LEFT JOIN documents d ON c.doc_id = d.doc_id "
                   "WHERE d.doc_id IS NULL")
        con = self.con
        with self.transaction():
            vectors = 0
            if self.provenance() is not None:
                vectors = con.execute(f"DELETE FROM vectors WHERE chunk_id IN ({orphans})"
                                      ).fetchone()[0]
                vectors += con.execute("DELETE FROM vectors WHERE chunk_id NOT IN "
                                       "(SELECT chunk_id FROM chunks)").fetchone()[0]
            chunks = con.execute(f"DELETE FROM chunks WHERE chunk_id IN ({orphans})").fetchone()[0]
            if chunks or vectors:
                self._bump_data_version()
        return {"chunks": int(chunks), "vectors": int(vectors)}

    def count_vectors(self) -> int:
        """Stored vectors (what `iter_vectors` yields); 0 before the first."""
        if self.provenance() is None:
            return 0
        return self.con.execute("SELECT count(*) FROM vectors").fetchone()[0]

    def count_documents(self, collection: str | None = None) -> int:
        if collection is None:
            return self.con.execute("SELECT count(*) FROM documents").fetchone()[0]
        return self.con.execute(
            "SELECT count(*) FROM documents WHERE collection = ?", [collection]
        ).fetchone()[0]

    def iter_vectors(self, batch_rows: int = 65536) -> Iterable[tuple[np.ndarray, np.ndarray]]:
        """Yield (chunk ids int64, vectors float32 (n, dim)) in the order they were written
        (ascending chunk ids: ids are drawn as rows are appended), the same order on every
        pass while nothing writes. No ORDER BY: a sort would hold every vector at once."""
        if self.provenance() is None:
            return
        reader = self.con.execute(
            "SELECT chunk_id, embedding FROM vectors"
        ).fetch_record_batch(batch_rows)
        for rb in reader:
            ids = rb.column(0).to_numpy().astype(np.int64)
            emb = rb.column(1)
            dim = emb.type.list_size
            vecs = emb.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, dim)
            yield ids, vecs

    def chunk_ids(self) -> np.ndarray:
        rows = self.con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id").fetchnumpy()
        return rows["chunk_id"].astype(np.int64)

    def filter_chunk_ids(
        self, collection: str | None = None, where: Sequence[tuple[str, str]] = (),
        labels: Sequence[tuple[str, str]] = (), entities: Sequence[tuple[str, str | None]] = (),
    ) -> np.ndarray | None:
        """Chunk ids of documents that pass every filter; None when there is no filter.

        Args:
            collection: keep one collection.
            where: (metadata field, value) pairs, compared as text; values are bound
                parameters, never SQL.
            labels: (head, label) pairs from `bertindex annotate`.
            entities: (type, text or None) pairs; text compared case-insensitively.
        """
        filters = _filter_clauses("d.", collection, where, labels, entities)
        if filters is None:
            return None
        clauses, params = filters
        sql = ("SELECT c.chunk_id FROM chunks c JOIN documents d ON c.doc_id = d.doc_id WHERE "
               + " AND ".join(clauses))
        return self.con.execute(sql, params).fetchnumpy()["chunk_id"].astype(np.int64)

    def fetch_hits(self, chunk_ids: Sequence[int]) -> dict[int, Hit]:
        """Documents behind chunk ids, by chunk id."""
        if not len(chunk_ids):
            return {}
        with self.bound([int(i) for i in chunk_ids]) as ids:
            rows = self.con.execute(
                "SELECT c.chunk_id, d.doc_id, d.collection, d.external_id, d.title, d.text, "
                "d.metadata, c.start_char, c.end_char FROM chunks c JOIN documents d "
                f"ON c.doc_id = d.doc_id WHERE c.chunk_id IN {ids}").fetchall()
        return {
            r[0]: Hit(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]) if r[6] else {}, r[7], r[8])
            for r in rows
        }

    def chunk_doc_ids(self, chunk_ids: Sequence[int]) -> dict[int, int]:
        if not len(chunk_ids):
            return {}
        with self.bound([int(i) for i in chunk_ids]) as ids:
            rows = self.con.execute(
                f"SELECT chunk_id, doc_id FROM chunks WHERE chunk_id IN {ids}").fetchall()
        return dict(rows)

    # -- document-level reads (keyword index, hybrid search) ------------------------------
    def document_hashes(self) -> dict[int, str]:
        """doc_id -> content hash of every stored document."""
        table = self.con.execute("SELECT doc_id, content_hash FROM documents").fetch_arrow_table()
        return dict(zip(table.column(0).to_pylist(), table.column(1).to_pylist()))

    def documents_text(self, doc_ids: Sequence[int]) -> list[tuple[int, str | None, str]]:
        """(doc_id, title, text) of the given documents (missing ids are skipped)."""
        if not len(doc_ids):
            return []
        with self.bound([int(d) for d in doc_ids]) as ids:
            return self.con.execute(
                f"SELECT doc_id, title, text FROM documents WHERE doc_id IN {ids} ORDER BY doc_id"
            ).fetchall()

    def filter_doc_ids(
        self, collection: str | None = None, where: Sequence[tuple[str, str]] = (),
        labels: Sequence[tuple[str, str]] = (), entities: Sequence[tuple[str, str | None]] = (),
    ) -> np.ndarray | None:
        """Doc ids that pass every filter (as `filter_chunk_ids`); None when there is no filter."""
        filters = _filter_clauses("", collection, where, labels, entities)
        if filters is None:
            return None
        clauses, params = filters
        sql = "SELECT doc_id FROM documents WHERE " + " AND ".join(clauses)
        return self.con.execute(sql, params).fetchnumpy()["doc_id"].astype(np.int64)

    def fetch_documents(self, doc_ids: Sequence[int]) -> dict[int, Hit]:
        """Documents by doc id, as Hits spanning the whole text (chunk_id -1)."""
        if not len(doc_ids):
            return {}
        with self.bound([int(d) for d in doc_ids]) as ids:
            rows = self.con.execute(
                "SELECT doc_id, collection, external_id, title, text, metadata FROM documents "
                f"WHERE doc_id IN {ids}").fetchall()
        return {
            r[0]: Hit(-1, r[0], r[1], r[2], r[3], r[4], json.loads(r[5]) if r[5] else {}, 0,
                      len(r[4]))
            for r in rows
        }


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _filter_clauses(prefix, collection, where, labels, entities):
    """SQL conditions (with their bound parameters) over `documents` columns named with
    `prefix` ("d." inside a join, "" alone); None when there is no filter at all."""
    if collection is None and not where and not labels and not entities:
        return None
    clauses, params = [], []
    if collection is not None:
        clauses.append(f"{prefix}collection = ?")
        params.append(collection)
    for field_name, value in where:
        clauses.append(f"json_extract_string({prefix}metadata, ?) = ?")
        params.extend([_json_path(field_name), value])
    _annotation_clauses(f"{prefix}doc_id", labels, entities, clauses, params)
    return clauses, params


def _json_path(field_name: str) -> str:
    """A JSON pointer (RFC 6901) selecting one top-level key, whatever characters the key
    holds: `~` and `/` are its only special characters and are escaped, so no key can become
    a wildcard (`*`), a nested path (`a.b`, `$..x`) or an array index. (A quoted `$."*"` path
    is still a wildcard in DuckDB, and `$.""` an error.)"""
    return "/" + field_name.replace("~", "~0").replace("/", "~1")


def _annotation_clauses(doc_col: str, labels: Sequence[tuple[str, str]],
                        entities: Sequence[tuple[str, str | None]], clauses: list, params: list
                        ) -> None:
    """`--label HEAD=LABEL` and `--entity TYPE[=TEXT]` as clauses on `doc_col` (bound values)."""
    for head, label in labels:
        clauses.append(f"{doc_col} IN (SELECT doc_id FROM annotations WHERE head = ? AND label = ?)")
        params.extend([head, label])
    for kind, text in entities:
        if text is None:
            clauses.append(f"{doc_col} IN (SELECT doc_id FROM entities WHERE type = ?)")
            params.append(kind)
        else:
            clauses.append(f"{doc_col} IN (SELECT doc_id FROM entities "
                           "WHERE type = ? AND lower(text) = lower(?))")
            params.extend([kind, text])
