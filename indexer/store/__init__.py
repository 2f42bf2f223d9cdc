"""Store: the DuckDB file and the only code that speaks SQL.

Public API (import these from `indexer.store`): `Store` (a `StoreCore`, which opens the file and
owns the connection, transactions, bound views, data version, writer lock and snapshots, plus
one group of tables per concept as attributes: `store.documents`, `store.vectors`,
`store.reads`, `store.filters`, `store.runs`, `store.counts`, `store.checks`, `store.dedup`,
`store.trends`, `store.annotations`, `store.reviews`, `store.tokens`, `store.side`), its row
types `Hit`, `ChunkRows`, `StoredDoc`, `DocText`, `DocRef`, `DocDigest`, `ChunkLayout`,
`HashDiff`, `IntegrityCounts`, `SnapshotFacts`, `WorkerFile`, `WorkerFiles`, `Run` (what
`store.runs.recorded_run` yields),
the review rows `HeadInfo`, `Candidates`, `NewReview`, `ReviewRow` and `read_reviewed_since`
(a head's live review rows, lock-free); the access tokens' `StoredToken`, `read_token_table`,
`hash_token`, `new_token`, `scope_allows`, `SCOPES`;
`WriterLock`; `is_transient_store_error` (a DuckDB error a retry may clear); `content_hash`;
`read_snapshot_facts`, `segment_problems` and
`collect_segments` (a published snapshot's facts, its damaged segments, removing unused ones);
`new_run_id`; `write_worker_vectors` (a cluster worker's vectors as a file the writer
records) and `incoming_probe` (whether workers see the store's folder);
`share_with_generation` (a reindex's next generation writes its vector files into the live
store's folder); `FileState` and
`SourceFile` (a corpus file's bytes and what a run recorded of it); the constants
`DB_NAME`, `VECTOR_FILE_MIN_ROWS`, `NEXT_GENERATION`,
`SCHEMA_VERSION`, `COMPLETED_WITH_FAILURES`, and the report's `TIME_UNITS` and `UNKNOWN` bucket
(the provenance keys live in `indexer.records.provenance`). No module of the library, the flows or
the surface imports this package's modules or touches `Store.con` (tests may, to check them).

Modules, one concept each: `store` (the Store: the core and its groups), `core` (connection,
transactions, data version), `lock` (writer lock), `schema` (DDL and migrations), `snapshot`
(published snapshots opened as views over Parquet segments, connected on first use), `segments`
(writing only what changed as segments, merging and collecting them), and one module per group,
each a class that holds the core and the groups it needs: `documents` (content hash and document
writes), `side_tables` (annotations, runs, ... by name), `sources` (files an index run read whole,
skipped when unchanged), `vectors` (vectors and provenance), `vector_files` (large batches' vectors
as `.npy` files in the store's folder), `reads` (documents read back), `filters` (search filters as
bound SQL), `runs` (run log), `counts` (status counts), `checks` (integrity), `annotations`
(labels, entities and the inbox ledger), `reviews` (people's labels: the review loop), `tokens`
(access tokens, hashed), `dedup` (near-duplicate groups: `store.dedup.groups_of`), `trends` (the
report's aggregates); `rows` (row dataclasses), `timefield` (a metadata field read as a time).
"""

from indexer.store.core import DB_NAME, is_transient_store_error
from indexer.store.documents import content_hash
from indexer.store.lock import WriterLock
from indexer.store.reviews import Candidates, HeadInfo, NewReview, ReviewRow
from indexer.store.rows import (
    ChunkLayout,
    ChunkRows,
    DocDigest,
    DocRef,
    DocText,
    HashDiff,
    Hit,
    IntegrityCounts,
    SnapshotFacts,
    StoredDoc,
    WorkerFile,
    WorkerFiles,
)
from indexer.store.runs import COMPLETED_WITH_FAILURES, Run, new_run_id
from indexer.store.schema import SCHEMA_VERSION
from indexer.store.segments import collect_segments
from indexer.store.snapshot import read_snapshot_facts, segment_problems
from indexer.store.sources import FileState, SourceFile
from indexer.store.store import Store, read_reviewed_since, read_token_table
from indexer.store.tokens import SCOPES, StoredToken, hash_token, new_token, scope_allows
from indexer.store.trends import TIME_UNITS, UNKNOWN
from indexer.store.vector_files import (
    NEXT_GENERATION,
    VECTOR_FILE_MIN_ROWS,
    incoming_probe,
    share_with_generation,
    write_worker_vectors,
)

__all__ = [
    "is_transient_store_error",
    "COMPLETED_WITH_FAILURES",
    "DB_NAME",
    "SCHEMA_VERSION",
    "TIME_UNITS",
    "UNKNOWN",
    "VECTOR_FILE_MIN_ROWS",
    "NEXT_GENERATION",
    "FileState",
    "SourceFile",
    "Candidates",
    "ChunkLayout",
    "ChunkRows",
    "DocDigest",
    "DocRef",
    "DocText",
    "HashDiff",
    "HeadInfo",
    "Hit",
    "IntegrityCounts",
    "NewReview",
    "Run",
    "SnapshotFacts",
    "Store",
    "StoredDoc",
    "WorkerFile",
    "WorkerFiles",
    "WriterLock",
    "collect_segments",
    "incoming_probe",
    "share_with_generation",
    "write_worker_vectors",
    "content_hash",
    "new_run_id",
    "read_snapshot_facts",
    "segment_problems",
    "ReviewRow",
    "SCOPES",
    "StoredToken",
    "hash_token",
    "new_token",
    "read_reviewed_since",
    "read_token_table",
    "scope_allows",
]
