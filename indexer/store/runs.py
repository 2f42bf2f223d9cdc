"""The run log and what `bertindex status` counts: runs started, finished or interrupted;
documents, chunks and vectors per collection; annotations per head."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import duckdb

from indexer.store.documents import to_json

INTERRUPT_RUNNING = "UPDATE runs SET status = 'interrupted' WHERE status = 'running'"
START_RUN = "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, NULL, 'running', NULL)"
RECORD_RUN = "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?)"
SELECT_LAST_RUNS = ("SELECT run_id, kind, started_at, finished_at, status, summary FROM runs "
                    "ORDER BY started_at DESC LIMIT ?")
SELECT_LAST_OF_KIND = ("SELECT run_id, started_at, finished_at, status, summary FROM runs "
                      "WHERE kind = ? ORDER BY started_at DESC LIMIT 1")
RUN_SUMMARY_KEYS = ("read", "encoded", "deleted", "failed_batches")  # shown by `status`
COUNT_DOCUMENTS = "SELECT count(*) FROM documents"
COUNT_COLLECTION = "SELECT count(*) FROM documents WHERE collection = ?"
COUNT_CHUNKS = "SELECT count(*) FROM chunks"
VECTORS_PER_COLLECTION = (
    "(SELECT count(*) FROM vectors v JOIN chunks c2 ON v.chunk_id = c2.chunk_id "
    "JOIN documents d2 ON c2.doc_id = d2.doc_id WHERE d2.collection = d.collection)")
COLLECTION_COUNTS = (
    "SELECT d.collection, count(DISTINCT d.doc_id), count(c.chunk_id), {vectors} "
    "FROM documents d LEFT JOIN chunks c ON c.doc_id = d.doc_id "
    "GROUP BY d.collection ORDER BY d.collection")
HAS_ANNOTATION_HEADS = ("SELECT count(*) FROM information_schema.columns "
                        "WHERE table_name = 'annotations' AND column_name = 'head'")
ANNOTATIONS_PER_HEAD = "SELECT head, count(*) FROM annotations GROUP BY head ORDER BY head"


class RunLog:
    """Store methods for the run log and the status counts (mixed into `Store`)."""

    con: duckdb.DuckDBPyConnection

    def start_run(self, run_id: str, kind: str, started: datetime) -> None:
        """Record a run as `running`. Runs still `running` from earlier were killed: this
        process holds the only write connection, so no other run can be alive.

        Args:
            run_id: the new run's id.
            kind: `index`, `reindex`, `annotate`, ...
            started: when it started (naive UTC).
        """
        self.con.execute(INTERRUPT_RUNNING)
        self.con.execute(START_RUN, [run_id, kind, started])

    def record_run(self, run_id: str, kind: str, started: datetime, status: str,
                   summary: dict) -> None:
        """Record how a run ended, finished now.

        Args:
            run_id, kind, started: as given to `start_run`.
            status: `completed`, `failed`, ...
            summary: counts kept as JSON.
        """
        finished = datetime.now(timezone.utc).replace(tzinfo=None)
        self.con.execute(RECORD_RUN, [run_id, kind, started, finished, status, to_json(summary)])

    def last_runs(self, limit: int = 5) -> list[dict]:
        """The latest runs, newest first.

        Args:
            limit: how many.
        Returns:
            Dicts of run_id, kind, started_at, finished_at, status and the summary's
            read/encoded/deleted/failed_batches counts where present.
        """
        out = []
        for run_id, kind, started, finished, status, summary in self.con.execute(
                SELECT_LAST_RUNS, [limit]).fetchall():
            info = json.loads(summary) if summary else {}
            out.append({"run_id": run_id, "kind": kind, "started_at": started,
                        "finished_at": finished, "status": status,
                        **{k: info[k] for k in RUN_SUMMARY_KEYS if k in info}})
        return out

    def last_run_of(self, kind: str) -> dict | None:
        """The latest run of one kind (`index`, `annotate`, `dedup`, `report`, ...).

        Returns:
            {run_id, started_at, finished_at, status, summary} or None when none ran.
        """
        row = self.con.execute(SELECT_LAST_OF_KIND, [kind]).fetchone()
        if row is None:
            return None
        return {"run_id": row[0], "started_at": row[1], "finished_at": row[2], "status": row[3],
                "summary": json.loads(row[4]) if row[4] else {}}

    def collection_counts(self) -> list[dict]:
        """Documents, chunks and stored vectors per collection.

        Returns:
            Dicts of collection, documents, chunks, vectors; sorted by collection.
        """
        vectors = VECTORS_PER_COLLECTION if self.provenance() is not None else "0"
        rows = self.con.execute(COLLECTION_COUNTS.format(vectors=vectors)).fetchall()
        return [{"collection": r[0], "documents": r[1], "chunks": r[2], "vectors": r[3]}
                for r in rows]

    def annotation_counts(self) -> dict[str, int]:
        """Annotations per head; empty until an `annotations` table (head, ...) exists."""
        if not self.con.execute(HAS_ANNOTATION_HEADS).fetchone()[0]:
            return {}
        return dict(self.con.execute(ANNOTATIONS_PER_HEAD).fetchall())

    def count_documents(self, collection: str | None = None) -> int:
        """Stored documents, in one collection or in all.

        Args:
            collection: None counts every collection.
        """
        if collection is None:
            return self.con.execute(COUNT_DOCUMENTS).fetchone()[0]
        return self.con.execute(COUNT_COLLECTION, [collection]).fetchone()[0]

    def count_chunks(self) -> int:
        """Stored chunks."""
        return self.con.execute(COUNT_CHUNKS).fetchone()[0]
