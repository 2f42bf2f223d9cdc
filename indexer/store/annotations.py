"""Annotations in the store: which documents still need which heads, writing labels and
entities (one transaction per batch), reading them back for search results, and the inbox
ledger (`AnnotationTables`, `store.annotations`). Tables come from schema step 2 in
`indexer/store/schema.py`. Does not run models (`indexer.annotate.store_pass` does).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import pyarrow as pa

from indexer.core.timeutil import utc_now
from indexer.records.annotations import RESULT_TYPES, Annotation, Entity, Label
from indexer.store.core import StoreCore
from indexer.store.reviews import ReviewTables


class AnnotationTables:
    """Labels, entities and the inbox ledger (`store.annotations`).

    Args:
        core: the open store.
        reviews: its review tables (people's labels join search results).
    """

    def __init__(self, core: StoreCore, reviews: ReviewTables):
        self.core = core
        self.reviews = reviews

    def remove_orphans(self) -> None:
        """Drop annotations of documents that no longer exist (deleted since)."""
        con = self.core.con
        for table in (*(rt.table for rt in RESULT_TYPES), "annotated"):
            con.execute(f"DELETE FROM {table} WHERE doc_id NOT IN (SELECT doc_id FROM documents)")

    def has_tables(self) -> bool:
        """True when the store has the annotation tables (a store older than schema step 2 has
        not)."""
        return self.core.has_table(Label.table)

    def pending_doc_ids(self, versions: dict[str, str], collection: str | None = None) -> list[int]:
        """Doc ids that miss at least one head at its current version (or whose text changed
        since it was annotated), in doc id order.

        Args:
            versions: head name -> head version.
            collection: only this collection (None: all).
        """
        wanted = pa.table(
            {
                "head": pa.array(list(versions), pa.string()),
                "head_version": pa.array(list(versions.values()), pa.string()),
            }
        )
        self.core.con.register("wanted_heads", wanted)
        try:
            rows = self.core.con.execute(
                "SELECT d.doc_id FROM documents d WHERE (?::VARCHAR IS NULL OR d.collection = ?) "
                "AND EXISTS (SELECT 1 FROM wanted_heads w WHERE NOT EXISTS ("
                "  SELECT 1 FROM annotated a WHERE a.doc_id = d.doc_id AND a.head = w.head"
                "  AND a.head_version = w.head_version AND a.content_hash = d.content_hash)) "
                "ORDER BY d.doc_id",
                [collection, collection],
            ).fetchnumpy()["doc_id"]
        finally:
            self.core.con.unregister("wanted_heads")
        return [int(d) for d in rows]

    def iter_doc_texts(
        self, doc_ids: Sequence[int], batch_rows: int
    ) -> Iterator[list[tuple[int, str, str]]]:
        """(doc id, text, content hash) of the given documents, `batch_rows` at a time."""
        for start in range(0, len(doc_ids), batch_rows):
            with self.core.bound(doc_ids[start : start + batch_rows]) as wanted:
                rows = self.core.con.execute(
                    "SELECT doc_id, text, content_hash FROM documents "
                    f"WHERE doc_id IN {wanted} ORDER BY doc_id"
                ).fetchall()
            yield rows

    def write(
        self,
        docs: Sequence[tuple[int, str, str]],
        annotations: Sequence[Annotation],
        versions: dict[str, str],
    ) -> None:
        """Replace these documents' annotations by the given heads, in one transaction.

        Args:
            docs: (doc id, text, content hash), parallel to `annotations`.
            versions: head name -> version of every head that ran.
        """
        now = utc_now()
        doc_ids = [d for d, _, _ in docs]
        heads = list(versions)
        rows: dict[type, list[dict]] = {rt: [] for rt in RESULT_TYPES}
        for (doc_id, _, _), a in zip(docs, annotations):
            for rt, results in a.results().items():
                # str(): every result `annotate` makes names its head (None only from `predict`)
                rows[rt].extend(x.table_row(doc_id, versions[str(x.head)]) for x in results)
        tables = {
            **{
                rt.table: pa.Table.from_pylist(rows[rt], schema=rt.table_schema)
                for rt in RESULT_TYPES
            },
            "annotated": pa.table(
                {
                    "doc_id": pa.array([d for d, _, _ in docs for _ in heads], pa.int64()),
                    "head": pa.array([h for _ in docs for h in heads], pa.string()),
                    "head_version": pa.array(
                        [versions[h] for _ in docs for h in heads], pa.string()
                    ),
                    "content_hash": pa.array([c for _, _, c in docs for _ in heads], pa.string()),
                    "annotated_at": pa.array([now] * (len(docs) * len(heads)), pa.timestamp("us")),
                }
            ),
        }
        con = self.core.con
        with self.core.transaction():
            for table, new_rows in tables.items():
                with (
                    self.core.bound(doc_ids) as batch_docs,
                    self.core.bound(heads, pa.string()) as ran,
                ):
                    con.execute(
                        f"DELETE FROM {table} WHERE doc_id IN {batch_docs} AND head IN {ran}"
                    )
                if new_rows.num_rows:
                    con.register("new_rows_view", new_rows)
                    con.execute(f"INSERT INTO {table} SELECT * FROM new_rows_view")
                    con.unregister("new_rows_view")
            self.core.bump_data_version()  # searches see the labels once a snapshot is published

    def by_document(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict]:
        """{(collection, external id): {"labels": [...], "entities": [...]}} for search results,
        plus `reviewed` (people's current labels: head, label, reviewer, reviewed_at) where any;
        empty for a store older than the annotation tables."""
        if not keys or not self.has_tables():
            return {}
        out: dict[tuple[str, str], dict] = {
            (k[0], k[1]): {"labels": [], "entities": []} for k in keys
        }
        reviewed = self.reviews.has_tables()
        # tables with no rows are not joined: each join reads the hits' documents (at 10M the
        # documents view's segment footers, ~60 ms of a one-off search)
        filled = {
            table
            for table in (Label.table, Entity.table, *(["reviews"] if reviewed else []))
            if self.core.has_rows(table)
        }
        if not filled:
            return out
        wanted = pa.table(
            {
                "collection": pa.array([k[0] for k in keys], pa.string()),
                "external_id": pa.array([k[1] for k in keys], pa.string()),
            }
        )
        con = self.core.con
        con.register("hit_keys", wanted)
        try:
            base = (
                "FROM documents d JOIN hit_keys k ON d.collection = k.collection "
                "AND d.external_id = k.external_id "
            )

            def rows(table: str, sql: str) -> list:
                return (
                    con.execute(sql.replace("{base}", base)).fetchall() if table in filled else []
                )

            for row in rows(
                Label.table,
                "SELECT d.collection, d.external_id, a.head, a.head_version, a.label, "
                "a.probability {base}JOIN annotations a ON a.doc_id = d.doc_id ORDER BY a.head",
            ):
                label = Label(label=row[4], score=row[5], head=row[2])
                out[(row[0], row[1])][Label.field].append(label.out_row(row[3]))
            for row in rows(
                Entity.table,
                "SELECT d.collection, d.external_id, e.head, e.type, e.start_char, e.end_char, "
                "e.text, e.score, e.head_version {base}JOIN entities e ON e.doc_id = d.doc_id "
                "ORDER BY e.start_char, e.head",
            ):
                entity = Entity(
                    type=row[3], start=row[4], end=row[5], text=row[6], score=row[7], head=row[2]
                )
                out[(row[0], row[1])][Entity.field].append(entity.out_row(row[8]))
            if "reviews" in filled:  # a person's current label per head, where there is one
                for row in con.execute(
                    "SELECT d.collection, d.external_id, r.head, arg_max(r.label, r.review_id), "
                    "arg_max(r.reviewer, r.review_id), max(r.reviewed_at)::VARCHAR "
                    + base
                    + "JOIN reviews r ON r.doc_id = d.doc_id "
                    "GROUP BY d.collection, d.external_id, r.head ORDER BY r.head"
                ).fetchall():
                    out[(row[0], row[1])].setdefault("reviewed", []).append(
                        {"head": row[2], "label": row[3], "reviewer": row[4], "reviewed_at": row[5]}
                    )
        finally:
            con.unregister("hit_keys")
        return out

    # -- inbox ledger ---------------------------------------------------------------------
    def ledger_status(self, content_hash: str) -> str | None:
        """'started', 'done' or None (never seen) for a file's content hash."""
        row = self.core.con.execute(
            "SELECT status FROM inbox_ledger WHERE content_hash = ?", [content_hash]
        ).fetchone()
        return row[0] if row else None

    def ledger_start(self, content_hash: str, path: str, run_id: str) -> None:
        """Record a file as 'started' (committed before any of its work begins)."""
        self.core.con.execute(
            "INSERT OR REPLACE INTO inbox_ledger VALUES (?, ?, NULL, 'started', ?, ?, NULL, NULL)",
            [content_hash, path, run_id, utc_now()],
        )

    def ledger_done(self, content_hash: str, rows: int, summary: dict) -> None:
        self.core.con.execute(
            "UPDATE inbox_ledger SET status = 'done', rows = ?, finished_at = ?, summary = ? "
            "WHERE content_hash = ?",
            [rows, utc_now(), json.dumps(summary, default=str), content_hash],
        )

    def ledger_entries(self) -> list[dict]:
        rows = self.core.con.execute(
            "SELECT path, content_hash, rows, status FROM inbox_ledger ORDER BY started_at"
        ).fetchall()
        return [{"path": r[0], "content_hash": r[1], "rows": r[2], "status": r[3]} for r in rows]
