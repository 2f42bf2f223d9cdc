"""Near-duplicate groups in the store (tables of schema step 3): which documents the grouping
has seen, their group ids, each collection's parameters, and the groups read back with their
size, times, representative text and labels. Does not find neighbours (`indexer.dedup` does).

A group id is the smallest doc id of its group; a document alone is its own group. Rows of a
deleted document go with it (`dedup_members` is keyed by doc id).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime

import numpy as np
import pyarrow as pa

from indexer.core.timeutil import utc_now
from indexer.store.core import StoreCore
from indexer.store.filters import json_path
from indexer.store.timefield import DOC_TIMES, SET_UTC
from indexer.store.vectors import Vectors

# first chunk (ordinal 0) of each document of a collection: the document's vector. Content
# hashes are compared as 64-bit hash() values, so the joins hold integers, not strings (the
# writer's DuckDB memory is capped), and nothing is sorted here (numpy sorts the ids).
COLLECTION_DOCS = "SELECT doc_id, hash(content_hash) AS h FROM documents WHERE collection = ?"
GROUPED_DOCS = "SELECT doc_id, hash(content_hash) AS h FROM dedup_members WHERE collection = ?"
FIRST_CHUNKS = (
    "SELECT c.doc_id, c.chunk_id FROM chunks c WHERE c.ordinal = 0 AND c.doc_id IN "
    "(SELECT doc_id FROM documents WHERE collection = ?)"
)
PENDING_FIRST_CHUNKS = (
    "SELECT c.doc_id, c.chunk_id FROM chunks c JOIN (" + COLLECTION_DOCS + ") d "
    "ON d.doc_id = c.doc_id WHERE c.ordinal = 0 AND NOT EXISTS (SELECT 1 FROM ("
    + GROUPED_DOCS
    + ") m WHERE m.doc_id = d.doc_id AND m.h = d.h)"
)
SEEN_FIRST_CHUNKS = (
    "SELECT c.chunk_id FROM chunks c JOIN (" + COLLECTION_DOCS + ") d ON d.doc_id = c.doc_id "
    "JOIN (" + GROUPED_DOCS + ") m ON m.doc_id = d.doc_id AND m.h = d.h WHERE c.ordinal = 0"
)
COUNT_COLLECTION_VECTORS = (
    "SELECT count(*) FROM {ids} v JOIN chunks c ON c.chunk_id = v.chunk_id "
    "JOIN documents d ON d.doc_id = c.doc_id WHERE d.collection = ?"
)
STREAM_FIRST_VECTORS = (
    "SELECT c.doc_id, v.chunk_id, v.embedding FROM vectors v JOIN (" + FIRST_CHUNKS + ") c "
    "ON c.chunk_id = v.chunk_id"
)
# with vector files: the first chunks that have a vector, whose vectors are then fetched
STREAM_FIRST_IDS = (
    "SELECT c.doc_id, v.chunk_id FROM {ids} v JOIN (" + FIRST_CHUNKS + ") c "
    "ON c.chunk_id = v.chunk_id"
)
SELECT_TEXTS = (
    "SELECT doc_id, coalesce(title || ' ', '') || text FROM documents WHERE doc_id IN {ids}"
)
STREAM_TEXTS = (
    "SELECT doc_id, coalesce(title || ' ', '') || text FROM documents WHERE collection = ?"
)
SELECT_GROUPS_OF = "SELECT doc_id, group_id FROM dedup_members WHERE doc_id IN {ids}"
SELECT_STATE = (
    "SELECT threshold, min_jaccard, min_size, neighbours, built_at, updated_at, summary "
    "FROM dedup_state WHERE collection = ?"
)
SELECT_COLLECTIONS = "SELECT collection FROM dedup_state ORDER BY collection"
SELECT_LAST_DEDUP = "SELECT max(updated_at) FROM dedup_state"
UPSERT_STATE = "INSERT OR REPLACE INTO dedup_state VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
DELETE_COLLECTION_MEMBERS = "DELETE FROM dedup_members WHERE collection = ?"
DELETE_MEMBERS_OF = "DELETE FROM dedup_members WHERE doc_id IN {ids}"
REGROUP = (
    "UPDATE dedup_members SET group_id = r.new_group FROM {view} r "
    "WHERE dedup_members.collection = ? AND dedup_members.group_id = r.old_group"
)
INSERT_MEMBERS = (
    "INSERT INTO dedup_members SELECT v.doc_id, ?, v.group_id, d.content_hash, ? "
    "FROM {view} v JOIN documents d ON d.doc_id = v.doc_id"
)
HAS_DEDUP = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'dedup_members'"
# groups of at least `min_size` members, largest first: binds (collection, min_size, limit)
SELECT_GROUPS = """
    SELECT group_id, count(*) AS size, min(doc_id) AS first_doc, list(doc_id ORDER BY doc_id)
    FROM dedup_members WHERE collection = ? GROUP BY group_id HAVING count(*) >= ?
    ORDER BY size DESC, group_id LIMIT ?"""
SELECT_MEMBER_INFO = """
    SELECT d.doc_id, d.external_id, d.text, d.ingested_at, t.t
    FROM documents d LEFT JOIN ({times}) t ON t.doc_id = d.doc_id WHERE d.doc_id IN {{ids}}"""
SELECT_MEMBER_LABELS = (
    "SELECT doc_id, head, label FROM annotations WHERE doc_id IN {ids} ORDER BY head, label"
)
COUNT_GROUPS = (
    "SELECT count(*), coalesce(sum(size), 0) FROM (SELECT count(*) AS size "
    "FROM dedup_members WHERE collection = ? GROUP BY group_id HAVING count(*) >= ?)"
)
SELECT_GROUP_SIZES = (
    "SELECT group_id, count(*) FROM dedup_members WHERE group_id IN {ids} GROUP BY group_id"
)


def _as_matrix(embeddings) -> np.ndarray:
    dim = embeddings.type.list_size
    return embeddings.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, dim)


class DedupTables:
    """The near-duplicate tables (`store.dedup`).

    Args:
        core: the open store.
        vectors: its vectors (provenance: whether any are stored).
    """

    def __init__(self, core: StoreCore, vectors: Vectors):
        self.core = core
        self.vectors = vectors

    # -- what to group ----------------------------------------------------------------------
    def collection_vector_count(self, collection: str) -> int:
        """Stored vectors of a collection's chunks (0 before the first encoder)."""
        if self.vectors.provenance() is None:
            return 0
        return self.core.scalar(
            COUNT_COLLECTION_VECTORS.format(ids=self.vectors.ids_sql()), [collection]
        )

    def first_chunks(
        self, collection: str, pending_only: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each document's first chunk (its vector stands for the document).

        Args:
            collection: the collection.
            pending_only: only documents the grouping has not seen with their current text.
        Returns:
            (doc ids ascending, their first chunk ids), int64 and aligned.
        """
        con = self.core.con
        if pending_only:
            rows = con.execute(PENDING_FIRST_CHUNKS, [collection, collection]).fetchnumpy()
        else:
            rows = con.execute(FIRST_CHUNKS, [collection]).fetchnumpy()
        doc_ids, chunk_ids = rows["doc_id"].astype(np.int64), rows["chunk_id"].astype(np.int64)
        order = np.argsort(doc_ids)
        return doc_ids[order], chunk_ids[order]

    def seen_first_chunks(self, collection: str) -> np.ndarray:
        """First chunk ids (ascending) of the documents already grouped with their current text."""
        found = self.core.con.execute(SEEN_FIRST_CHUNKS, [collection, collection]).fetchnumpy()
        return np.sort(found["chunk_id"].astype(np.int64))

    def iter_first_vectors(
        self, collection: str, batch_rows: int = 65536
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Each document's first-chunk vector, streamed (never all in memory at once).

        Returns:
            (doc ids, chunk ids, float32 (n, dim) vectors) items.
        """
        if not self.vectors.files():
            reader = self.core.con.execute(STREAM_FIRST_VECTORS, [collection]).fetch_record_batch(
                batch_rows
            )
            for rb in reader:
                yield (
                    rb.column(0).to_numpy().astype(np.int64),
                    rb.column(1).to_numpy().astype(np.int64),
                    _as_matrix(rb.column(2)),
                )
            return
        # vectors in files too: the ids first (all of them: small), then the vectors fetched
        # a batch at a time on the same connection
        query = STREAM_FIRST_IDS.format(ids=self.vectors.ids_sql())
        found = self.core.con.execute(query, [collection]).fetchnumpy()
        docs = found["doc_id"].astype(np.int64)
        chunks = found["chunk_id"].astype(np.int64)
        order = np.argsort(chunks, kind="stable")
        docs, chunks = docs[order], chunks[order]
        for at in range(0, len(chunks), batch_rows):
            part = chunks[at : at + batch_rows]
            yield docs[at : at + batch_rows], part, self.vectors.fetch(part)

    def texts_of(self, doc_ids: Iterable[int]) -> dict[int, str]:
        """{doc id: title and text} of the given documents (unknown ids are absent)."""
        ids = sorted({int(d) for d in doc_ids})
        if not ids:
            return {}
        with self.core.bound(ids) as wanted:
            return dict(self.core.con.execute(SELECT_TEXTS.format(ids=wanted)).fetchall())

    def iter_texts(
        self, collection: str, batch_rows: int = 65536
    ) -> Iterator[tuple[np.ndarray, list[str]]]:
        """Each document's title and text (as `texts_of`), streamed in batches.

        Returns:
            (doc ids, texts) items, in no particular order.
        """
        reader = self.core.con.execute(STREAM_TEXTS, [collection]).fetch_record_batch(batch_rows)
        for rb in reader:
            yield (
                rb.column(0).to_numpy().astype(np.int64),
                [t if t is not None else "" for t in rb.column(1).to_pylist()],
            )

    # -- groups ----------------------------------------------------------------------------
    def has_tables(self) -> bool:
        """True when the store has the dedup tables (schema step 3; a snapshot published
        before the upgrade has not)."""
        return bool(self.core.scalar(HAS_DEDUP))

    def groups_of(self, doc_ids: Iterable[int]) -> dict[int, int]:
        """The near-duplicate group of each given document.

        The review loop and `search --unique` call this to collapse copies: documents with the
        same group id are one wave. A document the grouping has seen but that has no near
        copy is its own group (its group id is its doc id); documents never grouped
        (`bertindex dedup` not run on their collection, or added since) are left out.

        Args:
            doc_ids: store doc ids (any iterable of ints; unknown ids are ignored).
        Returns:
            {doc id: group id}; a group id is the smallest doc id of its group.
        """
        ids = sorted({int(d) for d in doc_ids})
        if not ids or not self.has_tables():
            return {}
        with self.core.bound(ids) as wanted:
            return dict(self.core.con.execute(SELECT_GROUPS_OF.format(ids=wanted)).fetchall())

    def group_sizes(self, group_ids: Iterable[int]) -> dict[int, int]:
        """{group id: number of members} of the given groups."""
        ids = sorted({int(g) for g in group_ids})
        if not ids or not self.has_tables():
            return {}
        with self.core.bound(ids) as wanted:
            return dict(self.core.con.execute(SELECT_GROUP_SIZES.format(ids=wanted)).fetchall())

    def group_counts(self, collection: str, min_size: int) -> tuple[int, int]:
        """(groups of at least `min_size` members, documents in them) of a collection."""
        if not self.has_tables():
            return 0, 0
        row = self.core.con.execute(COUNT_GROUPS, [collection, min_size]).fetchone()
        groups, docs = row if row is not None else (0, 0)
        return int(groups), int(docs)

    def state(self, collection: str) -> dict | None:
        """A collection's grouping parameters and last run; None before its first run."""
        if not self.has_tables():
            return None
        row = self.core.con.execute(SELECT_STATE, [collection]).fetchone()
        if row is None:
            return None
        return {
            "threshold": row[0],
            "min_jaccard": row[1],
            "min_size": row[2],
            "neighbours": row[3],
            "built_at": row[4],
            "updated_at": row[5],
            "summary": json.loads(row[6]) if row[6] else {},
        }

    def collections(self) -> list[str]:
        """Collections grouped at least once."""
        if not self.has_tables():
            return []
        return [r[0] for r in self.core.con.execute(SELECT_COLLECTIONS).fetchall()]

    def last_at(self) -> datetime | None:
        """When any collection's groups were last brought up to date (None: never)."""
        if not self.has_tables():
            return None
        return self.core.scalar(SELECT_LAST_DEDUP)

    def write(
        self,
        collection: str,
        doc_ids: Sequence[int] | np.ndarray,
        group_ids: Sequence[int] | np.ndarray,
        regroup: dict[int, int],
        full: bool,
        state: dict,
    ) -> None:
        """Store one grouping run in one transaction.

        Args:
            collection: the collection grouped.
            doc_ids, group_ids: the documents this run looked at and their groups (aligned).
            regroup: {old group id: new group id} for groups of earlier runs that this run
                merged into others (their members move along).
            full: the run re-grouped the whole collection (its earlier rows go).
            state: threshold, min_jaccard, min_size, neighbours and a `summary` dict.
        """
        now = utc_now()
        ids = np.asarray(doc_ids, dtype=np.int64)
        members = pa.table(
            {
                "doc_id": pa.array(ids, pa.int64()),
                "group_id": pa.array(np.asarray(group_ids, dtype=np.int64), pa.int64()),
            }
        )
        previous = self.state(collection)
        built = now if full or previous is None else previous["built_at"]
        with self.core.transaction():
            if full:
                self.core.con.execute(DELETE_COLLECTION_MEMBERS, [collection])
            else:
                with self.core.bound(ids) as wanted:
                    self.core.con.execute(DELETE_MEMBERS_OF.format(ids=wanted))
            if regroup:
                moves = pa.table(
                    {
                        "old_group": pa.array(list(regroup), pa.int64()),
                        "new_group": pa.array(list(regroup.values()), pa.int64()),
                    }
                )
                self.core.con.register("dedup_regroup", moves)
                try:
                    self.core.con.execute(REGROUP.format(view="dedup_regroup"), [collection])
                finally:
                    self.core.con.unregister("dedup_regroup")
            if len(ids):
                self.core.con.register("dedup_new_members", members)
                try:
                    self.core.con.execute(
                        INSERT_MEMBERS.format(view="dedup_new_members"), [collection, now]
                    )
                finally:
                    self.core.con.unregister("dedup_new_members")
            self.core.con.execute(
                UPSERT_STATE,
                [
                    collection,
                    state["threshold"],
                    state["min_jaccard"],
                    state["min_size"],
                    state["neighbours"],
                    built,
                    now,
                    json.dumps(state.get("summary", {}), default=str),
                ],
            )
            self.core.bump_data_version()  # `search --unique` sees the groups once published

    def groups(
        self,
        collection: str,
        min_size: int = 2,
        limit: int = 100,
        time_field: str | None = None,
        members: int = 50,
    ) -> list[dict]:
        """The largest groups of a collection, with what a reader needs to judge them.

        Args:
            collection: the collection.
            min_size: smallest group listed.
            limit: most groups listed.
            time_field: metadata field giving a document's time (None: ingestion time).
            members: most member ids listed per group.
        Returns:
            Dicts of group_id, size, first_seen, last_seen, representative (the first
            document's text), representative_id, members (external ids, first `members`),
            labels ({head: {label: count}}), largest first.
        """
        if not self.has_tables():
            return []
        groups = self.core.con.execute(
            SELECT_GROUPS, [collection, max(1, min_size), limit]
        ).fetchall()
        if not groups:
            return []
        every = sorted({int(d) for g in groups for d in g[3]})
        info = self._member_info(every, time_field, collection)
        labels = self._member_labels(every)
        out = []
        for group_id, size, first_doc, doc_ids in groups:
            times = (info[d][2] for d in doc_ids if d in info)
            seen = [t for t in times if t is not None]
            counts: dict[str, dict[str, int]] = {}
            for d in doc_ids:
                for head, label in labels.get(d, ()):
                    counts.setdefault(head, {}).setdefault(label, 0)
                    counts[head][label] += 1
            first = info.get(first_doc)
            out.append(
                {
                    "group_id": group_id,
                    "size": size,
                    "first_seen": min(seen) if seen else None,
                    "last_seen": max(seen) if seen else None,
                    "representative_id": first[0] if first else None,
                    "representative": first[1] if first else None,
                    "members": [info[d][0] for d in doc_ids[:members] if d in info],
                    "labels": counts,
                }
            )
        return out

    def _member_info(
        self, doc_ids: list[int], time_field: str | None, collection: str
    ) -> dict[int, tuple[str, str, datetime | None]]:
        """{doc id: (external id, text, time)}: the time field's value, else ingestion time."""
        times = DOC_TIMES if time_field else "SELECT NULL::BIGINT AS doc_id, NULL::TIMESTAMP AS t"
        params = [json_path(time_field), collection, collection] if time_field else []
        if time_field:
            self.core.con.execute(SET_UTC)
        with self.core.bound(doc_ids) as wanted:
            rows = self.core.con.execute(
                SELECT_MEMBER_INFO.format(times=times).format(ids=wanted), params
            ).fetchall()
        return {r[0]: (r[1], r[2], r[4] if r[4] is not None else r[3]) for r in rows}

    def _member_labels(self, doc_ids: list[int]) -> dict[int, list[tuple[str, str]]]:
        out: dict[int, list[tuple[str, str]]] = {}
        with self.core.bound(doc_ids) as wanted:
            for doc_id, head, label in self.core.con.execute(
                SELECT_MEMBER_LABELS.format(ids=wanted)
            ).fetchall():
                out.setdefault(doc_id, []).append((head, label))
        return out
