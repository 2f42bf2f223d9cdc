"""Document writes: the content hash that decides re-encoding, which records are already
stored, one batch committed in one transaction, deletes by id, and streaming documents back out
(for re-encoding). Does not encode; the vectors arrive ready in `ChunkRows`."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from datetime import datetime

import numpy as np
import pyarrow as pa

from indexer.core.faults import crash_point
from indexer.core.timeutil import utc_now
from indexer.errors import StoreError
from indexer.ingest.readers import Record, Rejected
from indexer.store import vector_files
from indexer.store.core import StoreCore
from indexer.store.rows import ChunkRows, StoredDoc, WorkerFiles
from indexer.store.side_tables import SideTables
from indexer.store.stored_ids import StoredIds
from indexer.store.vector_files import VectorFile
from indexer.store.vectors import Vectors

log = logging.getLogger(__name__)

SEQUENCES = ("doc_ids", "chunk_ids")
SELECT_EXISTING = (
    "SELECT external_id, doc_id, content_hash, metadata FROM documents "
    "WHERE collection = ? AND doc_id <= ? AND external_id IN {ids}"
)
SELECT_LAST_DOC_ID = "SELECT coalesce(max(doc_id), 0) FROM documents"
NEXT_IDS = "SELECT nextval('{sequence}') FROM range(?)"
SELECT_CHUNKS_OF_DOCS = "SELECT chunk_id FROM chunks WHERE doc_id IN {ids}"
DELETE_VECTORS_OF_CHUNKS = "DELETE FROM vectors WHERE chunk_id IN {ids}"
DELETE_CHUNKS = "DELETE FROM chunks WHERE chunk_id IN {ids}"
DELETE_CHUNKS_OF_DOCS = "DELETE FROM chunks WHERE doc_id IN {ids}"
DELETE_DOCUMENTS = "DELETE FROM documents WHERE doc_id IN {ids}"
# Stored documents a writer changes before it checkpoints. What an update or a delete dirties
# (row versions, index nodes of a 10M-row table) stays in memory until a checkpoint, which the
# 1 GB log threshold (`core.WRITER_CHECKPOINT_THRESHOLD`) delays: a 10M store's 1 % re-run ran
# out of the writer's 128 MB after ~30,000 changed documents.
CHANGED_PER_CHECKPOINT = 8192
# Documents and chunks a writer appends before it checkpoints. Their primary keys' index nodes
# stay in memory until a checkpoint too; with vectors in files (`vector_files`) the log grows
# ~160 bytes a document, so the 1 GB threshold came after the writer's 128 MB was full: a 10M
# run failed every batch after ~2M documents ("could not allocate block"). With vectors as
# rows the threshold came every ~600k documents.
ADDED_PER_CHECKPOINT = 1_000_000
CHECKPOINT = "CHECKPOINT"
FORGET_SOURCE_FILES = ("DELETE FROM source_files",)  # their fingerprint files: `store.sources`
# a batch's changed documents in one statement, from a registered Arrow table: one UPDATE a
# row (`executemany`) took 2.19 s for 2,048 rows of a 1M-row table against 0.28 s
UPDATE_DOCUMENTS = (
    "UPDATE documents SET title = u.title, text = u.text, metadata = u.metadata, "
    "content_hash = u.content_hash, ingested_at = u.ingested_at FROM {view} u "
    "WHERE documents.doc_id = u.doc_id"
)
UPDATE_METADATA = (
    "UPDATE documents SET metadata = u.metadata FROM {view} u WHERE documents.doc_id = u.doc_id"
)
INSERT_DOCUMENTS = "INSERT INTO documents SELECT * FROM {view}"
INSERT_CHUNKS = "INSERT INTO chunks SELECT * FROM {view}"
INSERT_VECTORS = "INSERT INTO vectors SELECT * FROM {view}"
INSERT_REJECTED = "INSERT INTO rejected VALUES (?, ?, ?, ?, ?, ?)"
SELECT_DOCS_BY_EXTERNAL_ID = (
    "SELECT doc_id, external_id FROM documents WHERE collection = ? AND external_id {member} {ids}"
)
SELECT_DOCUMENTS_FOR_REENCODE = (
    "SELECT doc_id, collection, external_id, title, text, metadata, content_hash, ingested_at "
    "FROM documents "
    "WHERE doc_id NOT IN {ids} ORDER BY collection, doc_id"
)
RESTART_DOC_IDS = ("DROP SEQUENCE doc_ids", "CREATE SEQUENCE doc_ids START {start}")


def content_hash(record: Record) -> str:
    """What decides re-encoding: the title and text (metadata changes do not re-encode).

    Args:
        record: a record as a reader yields it.
    Returns:
        32 hex characters of SHA-256 over title, NUL, text.
    """
    digest = hashlib.sha256()
    digest.update((record.title or "").encode("utf-8", "surrogatepass"))
    digest.update(b"\x00")
    digest.update(record.text.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:32]


def to_json(value: object) -> str:
    """JSON text as the store keeps it (UTF-8 as is; dates and the like as str)."""
    return json.dumps(value, ensure_ascii=False, default=str)


class DocumentWrites:
    """Document writes: add, change, delete, and stream documents back out (`store.documents`).

    Args:
        core: the open store.
        vectors: its vectors (provenance: whether any are stored).
        side: its side tables (rows of deleted documents go too).
    """

    def __init__(self, core: StoreCore, vectors: Vectors, side: SideTables):
        self.core = core
        self.vectors = vectors
        self.side = side
        self._changed_since_checkpoint = 0  # stored documents changed since the last one
        self._added_since_checkpoint = 0  # documents and chunks appended since the last one
        # (collection, up_to) -> the run's map of stored ids (`stored_ids`; None: too few)
        self._stored_ids: dict[tuple[str, int], StoredIds | None] = {}

    def existing(
        self, collection: str, external_ids: Sequence[str], up_to: int | None = None
    ) -> dict[str, StoredDoc]:
        """The stored documents among `external_ids`.

        Args:
            collection: the collection the ids belong to.
            external_ids: ids as the source gives them.
            up_to: look only at documents with doc ids up to this one (`last_doc_id` when an
                index run began: its own documents never hold a later batch's ids, and the
                rows it appended are skipped whole by their zone maps; 0: none). None: all.
        Returns:
            external id -> StoredDoc, for the ids already stored.
        """
        if not external_ids or up_to == 0:
            return {}
        if up_to is not None:  # an index run: its map of the ids stored when it began
            key = (collection, up_to)
            if key not in self._stored_ids:
                big = StoredIds.worth_it(self.core, collection, up_to)
                self._stored_ids[key] = StoredIds(self.core, collection, up_to) if big else None
            stored = self._stored_ids[key]
            if stored is not None:
                return stored.existing(external_ids)
        limit = up_to if up_to is not None else 2**63 - 1
        with self.core.bound(list(external_ids), pa.string()) as ids:
            rows = self.core.con.execute(
                SELECT_EXISTING.format(ids=ids), [collection, limit]
            ).fetchall()
        return {r[0]: StoredDoc(r[1], r[2], r[3]) for r in rows}

    def last_doc_id(self) -> int:
        """The highest doc id stored (0: none)."""
        return int(self.core.scalar(SELECT_LAST_DOC_ID))

    def next_ids(self, sequence: str, count: int) -> list[int]:
        """Draw `count` ids from a sequence.

        Args:
            sequence: `doc_ids` or `chunk_ids`.
            count: how many.
        Returns:
            The ids, ascending.
        """
        if count == 0:
            return []
        if sequence not in SEQUENCES:
            raise ValueError(f"unknown sequence {sequence!r}; choose one of {', '.join(SEQUENCES)}")
        rows = self.core.con.execute(NEXT_IDS.format(sequence=sequence), [count]).fetchall()
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
        as_file: bool = False,
    ) -> tuple[list[int], list[int]]:
        """Commit one batch in one transaction.

        Args:
            collection: the collection of every document here.
            new_docs, changed_docs: (doc_id, record, content hash).
            metadata_updates: (doc_id, record): unchanged text, new metadata.
            chunks: the chunks of new and changed documents with their vectors.
            rejected: records the reader refused, kept with the run id.
            run_id: the run this batch belongs to.
            as_file: keep the vectors in one file of the store's folder, recorded by this
                transaction, instead of rows of `vectors` (`indexer.store.vector_files`: what
                large batches do). `chunks.vectors` may then also be `WorkerFiles`, the files
                a batch's cluster workers wrote, which are moved in rather than written again.
        Returns:
            (chunk ids added, chunk ids removed) for the vector index.
        """
        now = utc_now()
        chunk_ids = self.next_ids("chunk_ids", len(chunks.doc_ids))
        written = self._vector_files(chunk_ids, chunks) if as_file else None
        # On an error the batch's files stay, for the store to decide (`_landed`): the next
        # collection deletes them if they are not recorded (`Vectors.collect_files`)
        con = self.core.con
        removed = self._chunks_of([d for d, _, _ in changed_docs]) if changed_docs else []
        changes = bool(new_docs or changed_docs or metadata_updates or chunk_ids)
        before = self.core.data_version() if changes else None
        try:
            with self.core.transaction():
                if changed_docs:
                    with self.core.bound(removed) as old_chunks:
                        con.execute(DELETE_VECTORS_OF_CHUNKS.format(ids=old_chunks))
                        con.execute(DELETE_CHUNKS.format(ids=old_chunks))
                    self.core.insert_view(UPDATE_DOCUMENTS, _updates_table(changed_docs, now))
                if metadata_updates:
                    self.core.insert_view(UPDATE_METADATA, _metadata_table(metadata_updates))
                if new_docs:
                    self.core.insert_view(
                        INSERT_DOCUMENTS, _documents_table(collection, new_docs, now)
                    )
                if chunk_ids:
                    chunk_table, vector_table = _chunk_tables(chunk_ids, chunks, written is None)
                    self.core.insert_view(INSERT_CHUNKS, chunk_table)
                    if written is None:
                        self.core.insert_view(INSERT_VECTORS, vector_table)
                    else:
                        for vf, size in written:
                            self.vectors.record_file(vf, size)
                if rejected:
                    con.executemany(
                        INSERT_REJECTED,
                        [[run_id, r.source, r.row, r.external_id, r.reason, now] for r in rejected],
                    )
                if changes:
                    self.core.bump_data_version()
                crash_point("batch.before_commit")
        except Exception as exc:  # (DuckDB's errors: not imported here, searches load this)
            if before is None or not self._landed(before):
                raise
            log.warning("store %s: a commit reported as failed had landed: %s", self.core.path, exc)
        crash_point("batch.after_commit")
        changed, added = len(changed_docs) + len(metadata_updates), len(new_docs) + len(chunk_ids)
        self._checkpoint_after(changed, added)
        return chunk_ids, removed

    def _landed(self, before: int) -> bool:
        """Whether the transaction that raised the data version from `before` committed, asked
        of the store (False when it cannot answer). DuckDB can report a commit as failed that
        landed (out of memory in a 10M run: the records were there when the store was opened
        again); such a batch counts as committed, so that it is neither reported failed nor
        retried into duplicate keys."""
        try:
            return self.core.data_version() == before + 1
        except Exception:  # noqa: BLE001 - a store that cannot answer: the error stands
            return False

    def _checkpoint_after(self, changed: int, added: int) -> None:
        """Count a committed batch's changed and added rows; checkpoint past either bound."""
        self._changed_since_checkpoint += changed
        self._added_since_checkpoint += added
        if (
            self._changed_since_checkpoint >= CHANGED_PER_CHECKPOINT
            or self._added_since_checkpoint >= ADDED_PER_CHECKPOINT
        ):
            self.core.con.execute(CHECKPOINT)
            self._changed_since_checkpoint = self._added_since_checkpoint = 0

    def _vector_files(
        self, chunk_ids: list[int], chunks: ChunkRows
    ) -> list[tuple[VectorFile, int]] | None:
        """The batch's vectors written as a file (or its workers' files moved in, one after
        another over the batch's chunk ids) before the transaction that records them; None
        when the ids are not one consecutive range (rows of `vectors` then).

        Raises:
            StoreError: a worker's file is missing or of another shape (nothing is recorded).
        """
        vectors = chunks.vectors
        if not chunk_ids:
            return None
        if chunk_ids[-1] - chunk_ids[0] != len(chunk_ids) - 1:
            if isinstance(vectors, WorkerFiles):
                raise StoreError(
                    f"store {self.core.path}: a batch's chunk ids are not consecutive (another "
                    "process drew from the store's sequence); run the index again"
                )
            return None
        if not isinstance(vectors, WorkerFiles):
            written = [vector_files.write(self.core.path, chunk_ids[0], vectors)]
            crash_point("batch.vector_file_written")
            return written
        if vectors.rows != len(chunk_ids):
            raise StoreError(
                f"store {self.core.path}: workers' files hold {vectors.rows} vectors for "
                f"{len(chunk_ids)} chunks"
            )
        written, first = [], chunk_ids[0]
        try:
            for part in vectors.files:
                if part.rows:
                    written.append(
                        vector_files.adopt(self.core.path, part.path, first, part.rows, part.dim)
                    )
                first += part.rows
        except BaseException:
            vector_files.remove(self.core.path, [vf.name for vf, _ in written])
            raise
        crash_point("batch.vector_file_written")
        return written

    def delete(
        self,
        collection: str,
        external_ids: Sequence[str] | None = None,
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
        listed = list(external_ids) if external_ids is not None else list(keep or ())
        member = "IN" if external_ids is not None else "NOT IN"
        with self.core.transaction():
            with self.core.bound(listed, pa.string()) as ids:
                rows = self.core.con.execute(
                    SELECT_DOCS_BY_EXTERNAL_ID.format(member=member, ids=ids), [collection]
                ).fetchall()
            doc_ids = [r[0] for r in rows]
            removed: list[int] = []
            if doc_ids:
                removed = self._delete_docs(doc_ids)  # annotations of deleted documents too
                self.core.bump_data_version()
            crash_point("delete.before_commit")
        return sorted(r[1] for r in rows), removed

    def delete_doc_ids(self, doc_ids: Sequence[int]) -> list[int]:
        """Delete documents by doc id with their chunks, vectors and side rows.

        Args:
            doc_ids: doc ids (unknown ones are ignored).
        Returns:
            The chunk ids removed.
        """
        if not doc_ids:
            return []
        with self.core.transaction():
            removed = self._delete_docs([int(d) for d in doc_ids])
            self.core.bump_data_version()
        return removed

    def iter_documents(
        self, batch_rows: int = 2048, exclude: Iterable[int] = ()
    ) -> Iterable[tuple[str, list[tuple[int, Record, str]]]]:
        """Stream stored documents back as records, for re-encoding them (each keeps when
        the store took it in: `Record.ingested_at`).

        Args:
            batch_rows: at most this many documents per item.
            exclude: doc ids to skip.
        Returns:
            (collection, [(doc id, record, content hash)]) items in doc id order, one
            collection per item: what `write_batch` takes as `new_docs`.

        The stream runs on a connection of its own (a cursor): a query on the store's between
        two items (a rewrite reads each batch's chunks and vectors) would end it there.
        """
        cursor = self.core.con.cursor()
        try:
            with self.core.bound(sorted(exclude), con=cursor) as skip:
                reader = cursor.execute(
                    SELECT_DOCUMENTS_FOR_REENCODE.format(ids=skip)
                ).fetch_record_batch(batch_rows)
                pending: list = []
                current = ""  # the collection of `pending`
                for rb in reader:
                    for row in rb.to_pylist():
                        if pending and (row["collection"] != current or len(pending) >= batch_rows):
                            yield current, pending
                            pending = []
                        current = row["collection"]
                        record = Record(
                            row["external_id"],
                            row["text"],
                            row["title"],
                            json.loads(row["metadata"]) if row["metadata"] else {},
                            source=f"store:{row['collection']}",
                            row=row["doc_id"],
                            ingested_at=row["ingested_at"],
                        )
                        pending.append((row["doc_id"], record, row["content_hash"]))
                if pending:
                    yield current, pending
        finally:
            cursor.close()

    def restart_doc_ids_after(self, max_doc_id: int) -> None:
        """Make new doc ids start above `max_doc_id` (a store whose documents were copied).

        Args:
            max_doc_id: the highest doc id in use.
        """
        drop, create = RESTART_DOC_IDS
        con = self.core.con
        con.execute(drop)
        con.execute(
            create.format(start=int(max_doc_id) + 1)
        )  # an int: nothing else reaches the SQL

    # -- helpers (inside the caller's transaction) -------------------------------------------
    def _chunks_of(self, doc_ids: Sequence[int]) -> list[int]:
        with self.core.bound(doc_ids) as ids:
            found = self.core.con.execute(SELECT_CHUNKS_OF_DOCS.format(ids=ids)).fetchnumpy()
        return found["chunk_id"].astype(np.int64).tolist()

    def _delete_docs(self, doc_ids: list[int]) -> list[int]:
        """Delete documents with their chunks, vectors and side rows; returns the chunk ids."""
        removed = self._chunks_of(doc_ids)
        if removed and self.vectors.provenance() is not None:
            with self.core.bound(removed) as chunk_ids:
                self.core.con.execute(DELETE_VECTORS_OF_CHUNKS.format(ids=chunk_ids))
        with self.core.bound(doc_ids) as ids:
            self.core.con.execute(DELETE_CHUNKS_OF_DOCS.format(ids=ids))
            self.side.delete_rows(ids)
            self.core.con.execute(DELETE_DOCUMENTS.format(ids=ids))
        # a file recorded as read whole holds a deleted document no more (`store.sources`)
        for forget in FORGET_SOURCE_FILES:
            self.core.con.execute(forget)
        return removed


def _updates_table(docs: list[tuple[int, Record, str]], now: datetime) -> pa.Table:
    """Changed documents as the Arrow table UPDATE_DOCUMENTS reads (taken in again: `now`)."""
    return pa.table(
        {
            "doc_id": pa.array([d for d, _, _ in docs], pa.int64()),
            "title": pa.array([r.title for _, r, _ in docs], pa.string()),
            "text": pa.array([r.text for _, r, _ in docs], pa.string()),
            "metadata": pa.array([to_json(r.metadata) for _, r, _ in docs], pa.string()),
            "content_hash": pa.array([h for _, _, h in docs], pa.string()),
            "ingested_at": pa.array([now] * len(docs), pa.timestamp("us")),
        }
    )


def _metadata_table(updates: list[tuple[int, Record]]) -> pa.Table:
    """Metadata-only changes as the Arrow table UPDATE_METADATA reads."""
    return pa.table(
        {
            "doc_id": pa.array([d for d, _ in updates], pa.int64()),
            "metadata": pa.array([to_json(r.metadata) for _, r in updates], pa.string()),
        }
    )


def _documents_table(
    collection: str, docs: list[tuple[int, Record, str]], now: datetime
) -> pa.Table:
    """New documents as an Arrow table in `documents` column order."""
    return pa.table(
        {
            "doc_id": pa.array([d for d, _, _ in docs], pa.int64()),
            "collection": pa.array([collection] * len(docs), pa.string()),
            "external_id": pa.array([r.external_id for _, r, _ in docs], pa.string()),
            "title": pa.array([r.title for _, r, _ in docs], pa.string()),
            "text": pa.array([r.text for _, r, _ in docs], pa.string()),
            "metadata": pa.array(
                ["{}" if not r.metadata else to_json(r.metadata) for _, r, _ in docs], pa.string()
            ),
            "content_hash": pa.array([h for _, _, h in docs], pa.string()),
            "ingested_at": pa.array([r.ingested_at or now for _, r, _ in docs], pa.timestamp("us")),
        }
    )


def _chunk_tables(
    chunk_ids: list[int], chunks: ChunkRows, with_vectors: bool = True
) -> tuple[pa.Table, pa.Table | None]:
    """(chunks, vectors) as Arrow tables in their tables' column order (vectors None when
    `with_vectors` is False: they went to a file)."""
    chunk_table = pa.table(
        {
            "chunk_id": pa.array(chunk_ids, pa.int64()),
            "doc_id": pa.array(chunks.doc_ids, pa.int64()),
            "ordinal": pa.array(chunks.ordinals, pa.int32()),
            "start_char": pa.array(chunks.starts, pa.int32()),
            "end_char": pa.array(chunks.ends, pa.int32()),
            "n_tokens": pa.array(chunks.n_tokens, pa.int32()),
        }
    )
    if not with_vectors:
        return chunk_table, None
    flat = pa.array(np.ascontiguousarray(chunks.vectors, dtype=np.float32).ravel())
    vector_table = pa.table(
        {
            "chunk_id": pa.array(chunk_ids, pa.int64()),
            "embedding": pa.FixedSizeListArray.from_arrays(flat, chunks.vectors.shape[1]),
        }
    )
    return chunk_table, vector_table
