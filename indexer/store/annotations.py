"""Annotations in the store: which documents still need which heads, writing labels and
entities (one transaction per batch), reading them back for search results, and the inbox
ledger. Tables come from schema step 2 in `indexer/store/schema.py`. Does not run models.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone

import pyarrow as pa

from indexer.progress import Progress, ProgressArg
from indexer.records import RESULT_TYPES, Annotation, Entity, Label
from indexer.store.reviews import has_reviews, record_heads
from indexer.store.store import Store


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def remove_orphans(store: Store) -> None:
    """Drop annotations of documents that no longer exist (deleted since)."""
    con = store.con
    for table in (*(rt.table for rt in RESULT_TYPES), "annotated"):
        con.execute(f"DELETE FROM {table} WHERE doc_id NOT IN (SELECT doc_id FROM documents)")


def has_annotations(store: Store) -> bool:
    """True when the store has the annotation tables (a store older than schema step 2 has not)."""
    return bool(store.con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
        [Label.table]).fetchone()[0])


def pending_doc_ids(store: Store, versions: dict[str, str], collection: str | None = None
                    ) -> list[int]:
    """Doc ids that miss at least one head at its current version (or whose text changed
    since it was annotated), in doc id order.

    Args:
        versions: head name -> head version.
        collection: only this collection (None: all).
    """
    wanted = pa.table({"head": pa.array(list(versions), pa.string()),
                       "head_version": pa.array(list(versions.values()), pa.string())})
    store.con.register("wanted_heads", wanted)
    try:
        rows = store.con.execute(
            "SELECT d.doc_id FROM documents d WHERE (?::VARCHAR IS NULL OR d.collection = ?) "
            "AND EXISTS (SELECT 1 FROM wanted_heads w WHERE NOT EXISTS ("
            "  SELECT 1 FROM annotated a WHERE a.doc_id = d.doc_id AND a.head = w.head"
            "  AND a.head_version = w.head_version AND a.content_hash = d.content_hash)) "
            "ORDER BY d.doc_id",
            [collection, collection],
        ).fetchnumpy()["doc_id"]
    finally:
        store.con.unregister("wanted_heads")
    return [int(d) for d in rows]


def iter_texts(store: Store, doc_ids: Sequence[int], batch_rows: int
               ) -> Iterator[list[tuple[int, str, str]]]:
    """(doc id, text, content hash) of the given documents, `batch_rows` at a time."""
    for start in range(0, len(doc_ids), batch_rows):
        with store.bound(doc_ids[start:start + batch_rows]) as wanted:
            rows = store.con.execute(
                "SELECT doc_id, text, content_hash FROM documents "
                f"WHERE doc_id IN {wanted} ORDER BY doc_id").fetchall()
        yield rows


def write_annotations(store: Store, docs: Sequence[tuple[int, str, str]],
                      annotations: Sequence[Annotation], versions: dict[str, str]) -> None:
    """Replace these documents' annotations by the given heads, in one transaction.

    Args:
        docs: (doc id, text, content hash), parallel to `annotations`.
        versions: head name -> version of every head that ran.
    """
    now = _now()
    doc_ids = [d for d, _, _ in docs]
    heads = list(versions)
    rows: dict[type, list[dict]] = {rt: [] for rt in RESULT_TYPES}
    for (doc_id, _, _), a in zip(docs, annotations):
        for rt, results in a.results().items():
            rows[rt].extend(x.table_row(doc_id, versions[x.head]) for x in results)
    tables = {
        **{rt.table: pa.Table.from_pylist(found, schema=rt.table_schema)
           for rt, found in rows.items()},
        "annotated": pa.table({
            "doc_id": pa.array([d for d, _, _ in docs for _ in heads], pa.int64()),
            "head": pa.array([h for _ in docs for h in heads], pa.string()),
            "head_version": pa.array([versions[h] for _ in docs for h in heads], pa.string()),
            "content_hash": pa.array([c for _, _, c in docs for _ in heads], pa.string()),
            "annotated_at": pa.array([now] * (len(docs) * len(heads)), pa.timestamp("us")),
        }),
    }
    con = store.con
    with store.transaction():
        for table, rows in tables.items():
            with store.bound(doc_ids) as batch_docs, store.bound(heads, pa.string()) as ran:
                con.execute(f"DELETE FROM {table} WHERE doc_id IN {batch_docs} AND head IN {ran}")
            if rows.num_rows:
                con.register("new_rows_view", rows)
                con.execute(f"INSERT INTO {table} SELECT * FROM new_rows_view")
                con.unregister("new_rows_view")
        store._bump_data_version()  # searches see the labels once a snapshot is published


def annotations_by_document(store: Store, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """{(collection, external id): {"labels": [...], "entities": [...]}} for search results,
    plus `reviewed` (people's current labels: head, label, reviewer, reviewed_at) where any."""
    out: dict[tuple[str, str], dict] = {tuple(k): {"labels": [], "entities": []} for k in keys}
    if not keys:
        return out
    wanted = pa.table({"collection": pa.array([k[0] for k in keys], pa.string()),
                       "external_id": pa.array([k[1] for k in keys], pa.string())})
    con = store.con
    con.register("hit_keys", wanted)
    try:
        base = ("FROM documents d JOIN hit_keys k ON d.collection = k.collection "
                "AND d.external_id = k.external_id ")
        for row in con.execute(
                "SELECT d.collection, d.external_id, a.head, a.head_version, a.label, "
                "a.probability " + base + "JOIN annotations a ON a.doc_id = d.doc_id "
                "ORDER BY a.head").fetchall():
            label = Label(label=row[4], score=row[5], head=row[2])
            out[(row[0], row[1])][Label.field].append(label.out_row(row[3]))
        for row in con.execute(
                "SELECT d.collection, d.external_id, e.head, e.type, e.start_char, e.end_char, "
                "e.text, e.score, e.head_version " + base + "JOIN entities e ON e.doc_id = d.doc_id "
                "ORDER BY e.start_char, e.head").fetchall():
            entity = Entity(type=row[3], start=row[4], end=row[5], text=row[6], score=row[7],
                            head=row[2])
            out[(row[0], row[1])][Entity.field].append(entity.out_row(row[8]))
        if has_reviews(store):  # a person's current label per head, only where there is one
            for row in con.execute(
                    "SELECT d.collection, d.external_id, r.head, arg_max(r.label, r.review_id), "
                    "arg_max(r.reviewer, r.review_id), max(r.reviewed_at)::VARCHAR "
                    + base + "JOIN reviews r ON r.doc_id = d.doc_id "
                    "GROUP BY d.collection, d.external_id, r.head ORDER BY r.head").fetchall():
                out[(row[0], row[1])].setdefault("reviewed", []).append(
                    {"head": row[2], "label": row[3], "reviewer": row[4], "reviewed_at": row[5]})
    finally:
        con.unregister("hit_keys")
    return out


# -- inbox ledger -----------------------------------------------------------------------
def ledger_status(store: Store, content_hash: str) -> str | None:
    """'started', 'done' or None (never seen) for a file's content hash."""
    row = store.con.execute("SELECT status FROM inbox_ledger WHERE content_hash = ?",
                            [content_hash]).fetchone()
    return row[0] if row else None


def ledger_start(store: Store, content_hash: str, path: str, run_id: str) -> None:
    """Record a file as 'started' (committed before any of its work begins)."""
    store.con.execute(
        "INSERT OR REPLACE INTO inbox_ledger VALUES (?, ?, NULL, 'started', ?, ?, NULL, NULL)",
        [content_hash, path, run_id, _now()])


def ledger_done(store: Store, content_hash: str, rows: int, summary: dict) -> None:
    store.con.execute(
        "UPDATE inbox_ledger SET status = 'done', rows = ?, finished_at = ?, summary = ? "
        "WHERE content_hash = ?",
        [rows, _now(), json.dumps(summary, default=str), content_hash])


def ledger(store: Store) -> list[dict]:
    rows = store.con.execute(
        "SELECT path, content_hash, rows, status FROM inbox_ledger ORDER BY started_at").fetchall()
    return [{"path": r[0], "content_hash": r[1], "rows": r[2], "status": r[3]} for r in rows]


# -- the run over the store ---------------------------------------------------------------
def annotate_store(store: Store, annotator, collection: str | None = None,
                   batch_rows: int = 4096, progress: ProgressArg = False) -> dict:
    """Annotate every document that misses one of the annotator's heads at its version.

    Already annotated documents (same head version, same text) are skipped, so a second run
    with the same heads does nothing. Each batch of `batch_rows` documents is one transaction.

    Returns:
        {"documents", "annotated", "skipped", "labels", "entities", "heads", "dtype"}.
    """
    from collections import deque

    versions = annotator.versions()
    # the review loop validates imported labels against these
    record_heads(store, [(h.name, h.kind.name, h.labels, str(h.path), h.version)
                         for h in annotator.heads])
    remove_orphans(store)
    todo = pending_doc_ids(store, versions, collection)
    total = store.count_documents(collection)
    buffered: deque = deque()

    def texts():
        for docs in iter_texts(store, todo, batch_rows):
            buffered.append(docs)
            yield [t for _, t, _ in docs]

    n_labels = n_entities = 0
    bar = Progress(len(todo), "annotating", "doc", progress)
    for batch in annotator.annotate_chunks(texts()):
        docs = buffered.popleft()
        write_annotations(store, docs, batch, versions)
        n_labels += sum(len(a.labels) for a in batch)
        n_entities += sum(len(a.entities) for a in batch)
        bar.update(len(docs))
    bar.close()
    return {"documents": total, "annotated": len(todo), "skipped": total - len(todo),
            "labels": n_labels, "entities": n_entities, "heads": versions,
            "dtype": annotator.dtype_name}
