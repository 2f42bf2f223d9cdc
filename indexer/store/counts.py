"""What `bertindex status` counts: documents (in all or one collection), chunks, and per
collection their documents, chunks and stored vectors; annotations per head."""

from __future__ import annotations

from indexer.store.core import StoreCore
from indexer.store.schema import COUNT_CHUNKS, COUNT_DOCUMENTS
from indexer.store.vectors import Vectors

COUNT_COLLECTION = "SELECT count(*) FROM documents WHERE collection = ?"
VECTORS_PER_COLLECTION = (
    "(SELECT count(*) FROM {ids} v JOIN chunks c2 ON v.chunk_id = c2.chunk_id "
    "JOIN documents d2 ON c2.doc_id = d2.doc_id WHERE d2.collection = d.collection)"
)
COLLECTION_COUNTS = (
    "SELECT d.collection, count(DISTINCT d.doc_id), count(c.chunk_id), {vectors} "
    "FROM documents d LEFT JOIN chunks c ON c.doc_id = d.doc_id "
    "GROUP BY d.collection ORDER BY d.collection"
)
HAS_ANNOTATION_HEADS = (
    "SELECT count(*) FROM information_schema.columns "
    "WHERE table_name = 'annotations' AND column_name = 'head'"
)
ANNOTATIONS_PER_HEAD = "SELECT head, count(*) FROM annotations GROUP BY head ORDER BY head"


class Counts:
    """Row counts over the stored tables (`store.counts`).

    Args:
        core: the open store.
        vectors: its vectors (whether any are stored decides the per-collection count).
    """

    def __init__(self, core: StoreCore, vectors: Vectors):
        self.core = core
        self.vectors = vectors

    def collections(self) -> list[dict]:
        """Documents, chunks and stored vectors per collection.

        Returns:
            Dicts of collection, documents, chunks, vectors; sorted by collection.
        """
        vectors = (
            VECTORS_PER_COLLECTION.format(ids=self.vectors.ids_sql())
            if self.vectors.provenance() is not None
            else "0"
        )
        rows = self.core.con.execute(COLLECTION_COUNTS.format(vectors=vectors)).fetchall()
        return [
            {"collection": r[0], "documents": r[1], "chunks": r[2], "vectors": r[3]} for r in rows
        ]

    def annotations(self) -> dict[str, int]:
        """Annotations per head; empty until an `annotations` table (head, ...) exists."""
        if not self.core.scalar(HAS_ANNOTATION_HEADS):
            return {}
        return dict(self.core.con.execute(ANNOTATIONS_PER_HEAD).fetchall())

    def documents(self, collection: str | None = None) -> int:
        """Stored documents, in one collection or in all.

        Args:
            collection: None counts every collection.
        """
        if collection is None:
            return self.core.scalar(COUNT_DOCUMENTS)
        return self.core.scalar(COUNT_COLLECTION, [collection])

    def chunks(self) -> int:
        """Stored chunks."""
        return self.core.scalar(COUNT_CHUNKS)
