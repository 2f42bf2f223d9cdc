"""Store: one DuckDB file holding documents, chunks, their vectors, provenance and rejects.

The vectors here are the truth; a FAISS index is a cache rebuilt from them. Does not encode
and does not touch FAISS. All SQL takes values as bound parameters.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from indexer.encoder import Provenance
from indexer.errors import ProvenanceMismatch, StoreError
from indexer.readers import Record, Rejected

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
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


class Store:
    """A store directory: `store.duckdb` plus `index/` versions beside it.

    Args:
        path: the store directory (created when writable).
        read_only: open for queries only; the store must exist.
    """

    def __init__(self, path: str | Path, read_only: bool = False):
        self.path = Path(path)
        self.db_path = self.path / DB_NAME
        self.read_only = read_only
        if read_only and not self.db_path.is_file():
            raise StoreError(
                f"no store at {self.path} ({DB_NAME} missing); index something first with "
                f"`bertindex index PATH --store {self.path}`"
            )
        if not read_only:
            self.path.mkdir(parents=True, exist_ok=True)
        try:
            self.con = duckdb.connect(str(self.db_path), read_only=read_only)
        except duckdb.IOException as exc:
            raise StoreError(
                f"cannot open {self.db_path}: {exc}. Another bertindex process may be writing "
                "to this store; wait for it to finish."
            ) from None
        self._migrate()

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
                f"{self.db_path} was written by a newer bertindex (schema {version}, this one "
                f"knows {SCHEMA_VERSION}); upgrade bertindex to use it"
            )
        if version == SCHEMA_VERSION:
            return
        if self.read_only:
            raise StoreError(f"{self.db_path} needs a schema upgrade; run `bertindex index` once")
        for step in range(version + 1, SCHEMA_VERSION + 1):
            self.con.execute("BEGIN")
            for sql in _MIGRATIONS[step]:
                self.con.execute(sql)
            self.con.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(step)]
            )
            self.con.execute("COMMIT")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
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
                "was built with, or index into a new --store."
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

    # -- writes -----------------------------------------------------------------------
    def existing(self, collection: str, external_ids: Sequence[str]) -> dict[str, tuple[int, str, str]]:
        """external_id -> (doc_id, content_hash, metadata json) for ids already stored."""
        if not external_ids:
            return {}
        rows = self.con.execute(
            "SELECT external_id, doc_id, content_hash, metadata FROM documents "
            "WHERE collection = ? AND external_id IN (SELECT unnest(?::VARCHAR[]))",
            [collection, list(external_ids)],
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
        con.execute("BEGIN")
        try:
            removed: list[int] = []
            if changed_docs:
                changed_ids = [d for d, _, _ in changed_docs]
                removed = [r[0] for r in con.execute(
                    "SELECT chunk_id FROM chunks WHERE doc_id IN (SELECT unnest(?::BIGINT[]))",
                    [changed_ids],
                ).fetchall()]
                con.execute("DELETE FROM vectors WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [removed])
                con.execute("DELETE FROM chunks WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))", [removed])
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
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        return chunk_ids, removed

    def _insert_rejected(self, rejected: list[Rejected], run_id: str, now: datetime) -> None:
        if rejected:
            self.con.executemany(
                "INSERT INTO rejected VALUES (?, ?, ?, ?, ?, ?)",
                [[run_id, r.source, r.row, r.external_id, r.reason, now] for r in rejected],
            )

    def record_run(self, run_id: str, kind: str, started: datetime, status: str, summary: dict) -> None:
        finished = datetime.now(timezone.utc).replace(tzinfo=None)
        self.con.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?)",
            [run_id, kind, started, finished, status, _json(summary)],
        )

    # -- reads ------------------------------------------------------------------------
    def count_chunks(self) -> int:
        return self.con.execute("SELECT count(*) FROM chunks").fetchone()[0]

    def count_documents(self, collection: str | None = None) -> int:
        if collection is None:
            return self.con.execute("SELECT count(*) FROM documents").fetchone()[0]
        return self.con.execute(
            "SELECT count(*) FROM documents WHERE collection = ?", [collection]
        ).fetchone()[0]

    def iter_vectors(self, batch_rows: int = 65536) -> Iterable[tuple[np.ndarray, np.ndarray]]:
        """Yield (chunk ids int64, vectors float32 (n, dim)) in chunk id order."""
        if self.provenance() is None:
            return
        reader = self.con.execute(
            "SELECT chunk_id, embedding FROM vectors ORDER BY chunk_id"
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
        self, collection: str | None = None, where: Sequence[tuple[str, str]] = ()
    ) -> np.ndarray | None:
        """Chunk ids of documents that pass every filter; None when there is no filter.

        Args:
            collection: keep one collection.
            where: (metadata field, value) pairs, compared as text; values are bound
                parameters, never SQL.
        """
        if collection is None and not where:
            return None
        clauses, params = [], []
        if collection is not None:
            clauses.append("d.collection = ?")
            params.append(collection)
        for field_name, value in where:
            clauses.append("json_extract_string(d.metadata, ?) = ?")
            params.extend([_json_path(field_name), value])
        sql = ("SELECT c.chunk_id FROM chunks c JOIN documents d ON c.doc_id = d.doc_id WHERE "
               + " AND ".join(clauses))
        return self.con.execute(sql, params).fetchnumpy()["chunk_id"].astype(np.int64)

    def fetch_hits(self, chunk_ids: Sequence[int]) -> dict[int, Hit]:
        """Documents behind chunk ids, by chunk id."""
        if not len(chunk_ids):
            return {}
        rows = self.con.execute(
            "SELECT c.chunk_id, d.doc_id, d.collection, d.external_id, d.title, d.text, "
            "d.metadata, c.start_char, c.end_char FROM chunks c JOIN documents d "
            "ON c.doc_id = d.doc_id WHERE c.chunk_id IN (SELECT unnest(?::BIGINT[]))",
            [[int(i) for i in chunk_ids]],
        ).fetchall()
        return {
            r[0]: Hit(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6]) if r[6] else {}, r[7], r[8])
            for r in rows
        }

    def chunk_doc_ids(self, chunk_ids: Sequence[int]) -> dict[int, int]:
        if not len(chunk_ids):
            return {}
        rows = self.con.execute(
            "SELECT chunk_id, doc_id FROM chunks WHERE chunk_id IN (SELECT unnest(?::BIGINT[]))",
            [[int(i) for i in chunk_ids]],
        ).fetchall()
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
        return self.con.execute(
            "SELECT doc_id, title, text FROM documents "
            "WHERE doc_id IN (SELECT unnest(?::BIGINT[])) ORDER BY doc_id",
            [[int(d) for d in doc_ids]],
        ).fetchall()

    def filter_doc_ids(
        self, collection: str | None = None, where: Sequence[tuple[str, str]] = ()
    ) -> np.ndarray | None:
        """Doc ids that pass every filter (as `filter_chunk_ids`); None when there is no filter."""
        if collection is None and not where:
            return None
        clauses, params = [], []
        if collection is not None:
            clauses.append("collection = ?")
            params.append(collection)
        for field_name, value in where:
            clauses.append("json_extract_string(metadata, ?) = ?")
            params.extend([_json_path(field_name), value])
        sql = "SELECT doc_id FROM documents WHERE " + " AND ".join(clauses)
        return self.con.execute(sql, params).fetchnumpy()["doc_id"].astype(np.int64)

    def fetch_documents(self, doc_ids: Sequence[int]) -> dict[int, Hit]:
        """Documents by doc id, as Hits spanning the whole text (chunk_id -1)."""
        if not len(doc_ids):
            return {}
        rows = self.con.execute(
            "SELECT doc_id, collection, external_id, title, text, metadata FROM documents "
            "WHERE doc_id IN (SELECT unnest(?::BIGINT[]))",
            [[int(d) for d in doc_ids]],
        ).fetchall()
        return {
            r[0]: Hit(-1, r[0], r[1], r[2], r[3], r[4], json.loads(r[5]) if r[5] else {}, 0,
                      len(r[4]))
            for r in rows
        }


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _json_path(field_name: str) -> str:
    """A JSON path selecting one top-level key, whatever characters the key holds."""
    return '$."' + field_name.replace("\\", "\\\\").replace('"', '\\"') + '"'
