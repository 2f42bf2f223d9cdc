"""Integrity of the store itself, for `doctor` and the consistency check: duplicate ids,
chunks without a document, vectors without a chunk, chunks without a vector; the layout two
stores are compared by; deleting what no search can reach. Does not look at FAISS."""

from __future__ import annotations

from indexer.store.core import StoreCore
from indexer.store.rows import ChunkLayout, DocDigest, DocRef, IntegrityCounts
from indexer.store.vectors import Vectors

COUNT_DUPLICATE_IDS = "SELECT count(*) - count(DISTINCT (collection, external_id)) FROM documents"
ORPHAN_CHUNKS = (
    "SELECT c.chunk_id FROM chunks c LEFT JOIN documents d ON c.doc_id = d.doc_id "
    "WHERE d.doc_id IS NULL"
)
COUNT_ORPHAN_CHUNKS = f"SELECT count(*) FROM ({ORPHAN_CHUNKS})"
STRAY_VECTORS = "FROM vectors WHERE chunk_id NOT IN (SELECT chunk_id FROM chunks)"
COUNT_STRAY_VECTORS = f"SELECT count(*) {STRAY_VECTORS}"
DOCS_WITH_BARE_CHUNKS = (
    "SELECT d.collection, d.external_id FROM chunks c JOIN documents d ON c.doc_id = d.doc_id "
    "WHERE c.chunk_id NOT IN (SELECT chunk_id FROM {ids}) GROUP BY ALL ORDER BY ALL"
)
SELECT_DIGESTS = "SELECT collection, external_id, content_hash, metadata FROM documents"
SELECT_LAYOUT = (
    "SELECT c.chunk_id, d.collection, d.external_id, c.ordinal, c.start_char, "
    "c.end_char FROM chunks c JOIN documents d ON c.doc_id = d.doc_id"
)
DELETE_ORPHAN_VECTORS = f"DELETE FROM vectors WHERE chunk_id IN ({ORPHAN_CHUNKS})"
DELETE_STRAY_VECTORS = f"DELETE {STRAY_VECTORS}"
DELETE_ORPHAN_CHUNKS = f"DELETE FROM chunks WHERE chunk_id IN ({ORPHAN_CHUNKS})"


class Checks:
    """The store's own invariants, counted and repaired (`store.checks`).

    Args:
        core: the open store.
        vectors: its vectors (provenance: whether any are stored).
    """

    def __init__(self, core: StoreCore, vectors: Vectors):
        self.core = core
        self.vectors = vectors

    def integrity_counts(self) -> IntegrityCounts:
        """Count the broken invariants (all 0 in a healthy store).

        Returns:
            IntegrityCounts: duplicate (collection, id) pairs, chunks whose document is gone,
            vectors whose chunk is gone (0 before the first vector).
        """
        stray = (
            self.core.scalar(COUNT_STRAY_VECTORS) if self.vectors.provenance() is not None else 0
        )
        return IntegrityCounts(
            duplicate_ids=self.core.scalar(COUNT_DUPLICATE_IDS),
            orphan_chunks=self.core.scalar(COUNT_ORPHAN_CHUNKS),
            stray_vectors=stray,
        )

    def documents_missing_vectors(self) -> list[DocRef]:
        """Documents with a chunk whose vector is gone (nothing to rebuild it from).

        Returns:
            DocRefs sorted by collection and id; empty before the first vector.
        """
        if self.vectors.provenance() is None:
            return []
        query = DOCS_WITH_BARE_CHUNKS.format(ids=self.vectors.ids_sql())
        return [DocRef(*r) for r in self.core.con.execute(query).fetchall()]

    def document_digests(self) -> list[DocDigest]:
        """Every document's identity, content hash and metadata, to compare stores by."""
        return [DocDigest(*r) for r in self.core.con.execute(SELECT_DIGESTS).fetchall()]

    def chunk_layout(self) -> list[ChunkLayout]:
        """Every chunk that has a document, with that document's identity and its span."""
        return [ChunkLayout(*r) for r in self.core.con.execute(SELECT_LAYOUT).fetchall()]

    def delete_unreachable(self) -> dict[str, int]:
        """Delete what no search can reach, in one transaction: chunks whose document is gone
        and their vectors, and vectors whose chunk is gone (`bertindex doctor --repair`).

        Returns:
            {"chunks": chunks deleted, "vectors": vectors deleted}.
        """
        with self.core.transaction():
            vectors = 0
            if self.vectors.provenance() is not None:
                vectors = self.core.scalar(DELETE_ORPHAN_VECTORS)
                vectors += self.core.scalar(DELETE_STRAY_VECTORS)
            chunks = self.core.scalar(DELETE_ORPHAN_CHUNKS)
            if chunks or vectors:
                self.core.bump_data_version()
        return {"chunks": int(chunks), "vectors": int(vectors)}
