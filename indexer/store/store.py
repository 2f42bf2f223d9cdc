"""The Store: a `StoreCore` (connection, transactions, data version, writer lock, snapshot)
that hands out one group of tables per concept as an attribute (`store.documents`,
`store.vectors`, `store.runs`, ...), each holding the core and the groups it needs.

The vectors here are the truth; a FAISS index is a cache rebuilt from them. Does not encode
and does not touch FAISS. All SQL takes values as bound parameters.
"""

from __future__ import annotations

from pathlib import Path

from indexer.store.annotations import AnnotationTables
from indexer.store.checks import Checks
from indexer.store.core import DB_NAME, StoreCore
from indexer.store.counts import Counts
from indexer.store.dedup import DedupTables
from indexer.store.documents import DocumentWrites
from indexer.store.filters import Filters
from indexer.store.reads import DocumentReads
from indexer.store.reviews import ReviewTables, read_reviewed_file
from indexer.store.runs import RunLog
from indexer.store.side_tables import SideTables
from indexer.store.sources import SourceFiles
from indexer.store.tokens import StoredToken, TokenTables, read_tokens_file
from indexer.store.trends import Trends
from indexer.store.vectors import Vectors


def read_reviewed_since(store_dir: str | Path, head: str, after: int) -> set[int] | None:
    """Documents labelled for `head` in the live file by reviews numbered above `after` (the
    published snapshot's `reviews.last_review_id()`), read without the writer lock; None while
    a writer holds the file (`reviews.read_reviewed_file`)."""
    path = Path(store_dir) / DB_NAME
    return read_reviewed_file(path, head, after) if path.is_file() else None


def read_token_table(store_dir: str | Path) -> list[StoredToken] | None:
    """The access tokens of a store, read from its live file (not the published snapshot, so
    a token created or revoked since the last publish counts), without taking the writer lock.

    Args:
        store_dir: the store directory.
    Returns:
        The rows (empty: no store or no token), or None while a writer holds the file.
    """
    return read_tokens_file(Path(store_dir) / DB_NAME)


class Store(StoreCore):
    """A store directory opened (see `StoreCore` for the arguments), with its tables grouped
    by concept.

    Attributes:
        vectors: vectors, their provenance and the tuned hybrid weight.
        side: the side tables by name (annotations, runs, rejected, ...).
        documents: document writes, deletes and the stream for re-encoding.
        reads: documents and hits read back, content hashes.
        filters: search filters as bound SQL, facet counts.
        runs: the run log.
        counts: documents, chunks, vectors and annotations counted.
        checks: integrity counts and repairs.
        dedup: near-duplicate groups.
        trends: the report's aggregates.
        reviews: people's labels and the heads they check.
        annotations: the heads' labels and entities, the inbox ledger.
        tokens: access tokens, hashed.
    """

    def __init__(
        self, path: str | Path, read_only: bool = False, snapshot: bool = True, lock: bool = True
    ):
        super().__init__(path, read_only=read_only, snapshot=snapshot, lock=lock)
        self.vectors = Vectors(self)
        self.side = SideTables(self)
        self.sources = SourceFiles(self)
        self.documents = DocumentWrites(self, self.vectors, self.side)
        self.reads = DocumentReads(self)
        self.filters = Filters(self)
        self.runs = RunLog(self)
        self.counts = Counts(self, self.vectors)
        self.checks = Checks(self, self.vectors)
        self.dedup = DedupTables(self, self.vectors)
        self.trends = Trends(self)
        self.reviews = ReviewTables(self)
        self.annotations = AnnotationTables(self, self.reviews)
        self.tokens = TokenTables(self)
