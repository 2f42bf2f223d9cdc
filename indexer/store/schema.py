"""Schema of `store.duckdb`: every DDL statement as a named constant, the numbered migrations
built from them, and the code that reads and upgrades a file's schema version (and `scalar`,
the one-value read every module uses). No data rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from indexer.errors import StoreError
from indexer.records.annotations import Entity, Label

if TYPE_CHECKING:
    import duckdb

T = TypeVar("T")

SCHEMA_VERSION = 11

# DuckDB column types of the Arrow types the records' schemas use
_SQL_TYPES = {
    pa.int64(): "BIGINT",
    pa.int32(): "INTEGER",
    pa.string(): "VARCHAR",
    pa.float64(): "DOUBLE",
}


def _column_sql(column: pa.Field) -> str:
    return f"{column.name} {_SQL_TYPES[column.type]}" + ("" if column.nullable else " NOT NULL")


def create_table_sql(table: str, schema: pa.Schema, leave_out: tuple[str, ...] = ()) -> str:
    """The CREATE TABLE statement of a table described by an Arrow schema.

    Args:
        table: the table name (a constant of `indexer.records.annotations`, never user input).
        schema: its columns; nullable=False becomes NOT NULL.
        leave_out: columns a later schema step adds (`add_column_sql`).
    """
    columns = ", ".join(_column_sql(c) for c in schema if c.name not in leave_out)
    return f"CREATE TABLE {table} ({columns})"


def add_column_sql(table: str, column: pa.Field) -> str:
    """The ALTER TABLE statement that adds one column of a record's schema."""
    return f"ALTER TABLE {table} ADD COLUMN {_column_sql(column)}"


# -- step 1: documents, chunks, rejects, runs ----------------------------------------------
CREATE_META = "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)"
CREATE_DOC_IDS = "CREATE SEQUENCE doc_ids START 1"
CREATE_CHUNK_IDS = "CREATE SEQUENCE chunk_ids START 1"
CREATE_DOCUMENTS = """CREATE TABLE documents (
            doc_id BIGINT PRIMARY KEY,
            collection VARCHAR NOT NULL,
            external_id VARCHAR NOT NULL,
            title VARCHAR,
            text VARCHAR NOT NULL,
            metadata JSON,
            content_hash VARCHAR NOT NULL,
            ingested_at TIMESTAMP NOT NULL,
            UNIQUE (collection, external_id))"""
CREATE_CHUNKS = """CREATE TABLE chunks (
            chunk_id BIGINT PRIMARY KEY,
            doc_id BIGINT NOT NULL,
            ordinal INTEGER NOT NULL,
            start_char INTEGER NOT NULL,
            end_char INTEGER NOT NULL,
            n_tokens INTEGER NOT NULL)"""
CREATE_CHUNKS_DOC_INDEX = "CREATE INDEX chunks_doc ON chunks (doc_id)"
CREATE_REJECTED = """CREATE TABLE rejected (
            run_id VARCHAR, source VARCHAR, row_number BIGINT, external_id VARCHAR,
            reason VARCHAR, rejected_at TIMESTAMP)"""
CREATE_RUNS = """CREATE TABLE runs (
            run_id VARCHAR PRIMARY KEY, kind VARCHAR, started_at TIMESTAMP,
            finished_at TIMESTAMP, status VARCHAR, summary JSON)"""

# -- step 2: bulk annotation (indexer/store/annotations.py). `annotated` marks (document, head)
# pairs done at a head version and content hash, so a tagger that found no entity is done too.
# Both tables are derived from their records' Arrow schemas (`indexer.records.annotations`), the one
# description of their columns; `annotations.runner_up` is added by step 4.
CREATE_ANNOTATIONS = create_table_sql(Label.table, Label.table_schema, leave_out=("runner_up",))
CREATE_ENTITIES = create_table_sql(Entity.table, Entity.table_schema)
CREATE_ANNOTATED = """CREATE TABLE annotated (
            doc_id BIGINT NOT NULL, head VARCHAR NOT NULL, head_version VARCHAR NOT NULL,
            content_hash VARCHAR NOT NULL, annotated_at TIMESTAMP NOT NULL)"""
CREATE_INBOX_LEDGER = """CREATE TABLE inbox_ledger (
            content_hash VARCHAR PRIMARY KEY, path VARCHAR NOT NULL, rows BIGINT,
            status VARCHAR NOT NULL, run_id VARCHAR, started_at TIMESTAMP,
            finished_at TIMESTAMP, summary JSON)"""

# -- step 3: near-duplicate waves (indexer/store/dedup.py). One row per document the grouping
# has seen (a singleton is its own group); `group_id` is the smallest doc id of its group, so
# the group's first document. `dedup_state` keeps each collection's parameters and last run.
CREATE_DEDUP_MEMBERS = """CREATE TABLE IF NOT EXISTS dedup_members (
            doc_id BIGINT NOT NULL, collection VARCHAR NOT NULL, group_id BIGINT NOT NULL,
            content_hash VARCHAR NOT NULL, deduped_at TIMESTAMP NOT NULL)"""
CREATE_DEDUP_STATE = """CREATE TABLE IF NOT EXISTS dedup_state (
            collection VARCHAR PRIMARY KEY, threshold DOUBLE NOT NULL,
            min_jaccard DOUBLE NOT NULL, min_size INTEGER NOT NULL, neighbours INTEGER NOT NULL,
            built_at TIMESTAMP, updated_at TIMESTAMP, summary JSON)"""

# -- step 4: the review loop (indexer/store/reviews.py). `reviews` only grows: a document's
# human label for a head is its latest row (highest review_id); an import that changes a label
# adds a row, so nothing a person stored is overwritten. `review_heads` keeps what `annotate`
# knew of each head (type, label names, directory) to validate imported labels. review_id is
# max + 1 under the one writer (no sequence: `reindex` copies side tables, not sequences).
# `annotations.runner_up`: the second-highest probability (the `margin` strategy; NULL on rows
# written before step 4).
CREATE_REVIEWS = """CREATE TABLE reviews (
            review_id BIGINT PRIMARY KEY, doc_id BIGINT NOT NULL, head VARCHAR NOT NULL,
            label VARCHAR NOT NULL, reviewer VARCHAR NOT NULL, reviewed_at TIMESTAMP NOT NULL,
            content_hash VARCHAR NOT NULL, source VARCHAR NOT NULL)"""
CREATE_REVIEWS_INDEX = "CREATE INDEX reviews_doc_head ON reviews (doc_id, head)"
CREATE_REVIEW_HEADS = """CREATE TABLE review_heads (
            head VARCHAR PRIMARY KEY, task VARCHAR NOT NULL, label_names JSON NOT NULL,
            path VARCHAR, head_version VARCHAR, recorded_at TIMESTAMP NOT NULL)"""
ADD_RUNNER_UP = add_column_sql(Label.table, Label.table_schema.field("runner_up"))

# -- step 5: who may ask (indexer/store/tokens.py). `tokens` keeps a name, a scope and the
# SHA-256 of each access token, never the token; `reviews.who` is the name of the token a
# review page label was stored with (NULL: no token, or a file import). A store written before
# step 5 has no token, so every server over it behaves as before until `token create`.
CREATE_TOKENS = """CREATE TABLE tokens (
            name VARCHAR PRIMARY KEY, scope VARCHAR NOT NULL, token_hash VARCHAR NOT NULL UNIQUE,
            created_at TIMESTAMP NOT NULL, last_used_at TIMESTAMP)"""
ADD_REVIEW_WHO = "ALTER TABLE reviews ADD COLUMN who VARCHAR"

# -- step 6: tokens expire (`bertindex token create --expires`). `tokens.expires_at` (UTC; NULL:
# never, as every token created before step 6) after which servers refuse the token (401).
ADD_TOKEN_EXPIRES = "ALTER TABLE tokens ADD COLUMN expires_at TIMESTAMP"

# -- step 7: vectors kept as files (indexer/store/vector_files.py). A batch of at least
# `VECTOR_FILE_MIN_ROWS` chunks (a full batch, an import, a cluster partition) keeps
# its vectors in one `.npy` file under `<store>/vectors/`, recorded here instead of inserted
# into `vectors`: chunk `first_chunk_id + i` has the file's row i. Readers of a published
# snapshot never read embeddings, so this step leaves the snapshot as it is (no data_version
# bump: `SNAPSHOT_UNCHANGED`).
CREATE_VECTOR_FILES = """CREATE TABLE vector_files (
            name VARCHAR PRIMARY KEY, first_chunk_id BIGINT NOT NULL, n_rows BIGINT NOT NULL,
            bytes BIGINT NOT NULL, created_at TIMESTAMP NOT NULL)"""

# -- step 8: files known unchanged (indexer/store/sources.py). An index run records each file
# whose batches all committed: its size, modification time and SHA-256, the reading settings,
# and its accepted ids as 128-bit fingerprints (`ids`, 16 bytes each, left out of snapshots),
# so that a later run skips a file whose bytes and settings are the same and still rejects
# another file's record that takes one of its ids. Readers never read it (no data_version
# bump). Step 9 adds `source`, the file's name as the run gave it: with `run_id` it names the
# file's rows in `rejected`, which a skipping run copies as its own (NULL on a row recorded
# before step 9: its rejections are not copied).
CREATE_SOURCE_FILES = """CREATE TABLE source_files (
            collection VARCHAR NOT NULL, path VARCHAR NOT NULL, bytes BIGINT NOT NULL,
            mtime_ns BIGINT NOT NULL, sha256 VARCHAR NOT NULL, settings VARCHAR NOT NULL,
            records BIGINT NOT NULL, rejected BIGINT NOT NULL, ids BLOB NOT NULL,
            run_id VARCHAR, recorded_at TIMESTAMP NOT NULL, PRIMARY KEY (collection, path))"""
ADD_SOURCE_FILES_SOURCE = "ALTER TABLE source_files ADD COLUMN source VARCHAR"

# -- step 10: a file's id fingerprints in parts (`source_file_ids`, at most 2^18 ids, 4 MiB, a
# row): one BLOB of a 10M-row file's 160 MB could not be written within the writer's 128 MB of
# DuckDB memory. Records made before are forgotten (their files are read once more).
CREATE_SOURCE_FILE_IDS = """CREATE TABLE source_file_ids (
            collection VARCHAR NOT NULL, path VARCHAR NOT NULL, part INTEGER NOT NULL,
            ids BLOB NOT NULL, PRIMARY KEY (collection, path, part))"""
FORGET_SOURCE_FILES = "DELETE FROM source_files"
DROP_SOURCE_FILES_IDS = "ALTER TABLE source_files DROP COLUMN ids"

# -- step 11: the fingerprints go to files beside the store (`<store>/sources/`), not rows: at
# the end of a 10M-document run the writer's DuckDB had no 4 MiB to spare for a part either.
DROP_SOURCE_FILE_IDS = "DROP TABLE source_file_ids"

MIGRATIONS: dict[int, list[str]] = {
    1: [
        CREATE_META,
        CREATE_DOC_IDS,
        CREATE_CHUNK_IDS,
        CREATE_DOCUMENTS,
        CREATE_CHUNKS,
        CREATE_CHUNKS_DOC_INDEX,
        CREATE_REJECTED,
        CREATE_RUNS,
    ],
    2: [CREATE_ANNOTATIONS, CREATE_ENTITIES, CREATE_ANNOTATED, CREATE_INBOX_LEDGER],
    3: [CREATE_DEDUP_MEMBERS, CREATE_DEDUP_STATE],
    # 3: near-duplicate groups (issue 14, another branch); numbering reconciled at merge
    4: [CREATE_REVIEWS, CREATE_REVIEWS_INDEX, CREATE_REVIEW_HEADS, ADD_RUNNER_UP],
    5: [CREATE_TOKENS, ADD_REVIEW_WHO],
    6: [ADD_TOKEN_EXPIRES],
    7: [CREATE_VECTOR_FILES],
    8: [CREATE_SOURCE_FILES],
    9: [ADD_SOURCE_FILES_SOURCE],
    10: [CREATE_SOURCE_FILE_IDS, FORGET_SOURCE_FILES, DROP_SOURCE_FILES_IDS],
    11: [FORGET_SOURCE_FILES, DROP_SOURCE_FILE_IDS],
}
# steps whose tables no snapshot reader needs before the next publish
SNAPSHOT_UNCHANGED = frozenset({7, 8, 9, 10, 11})

# -- created on demand ----------------------------------------------------------------------
# `vectors` waits for the first encoder: its column width is the encoder's dimension.
CREATE_VECTORS = (
    "CREATE TABLE IF NOT EXISTS vectors (chunk_id BIGINT PRIMARY KEY, embedding FLOAT[{dim}])"
)

HAS_META = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'meta'"
HAS_TABLE = "SELECT count(*) FROM information_schema.tables WHERE table_name = ?"
GET_META = "SELECT value FROM meta WHERE key = ?"
ALL_META = "SELECT key, value FROM meta ORDER BY key"
INSERT_META = "INSERT INTO meta VALUES (?, ?)"
SET_META = "INSERT OR REPLACE INTO meta VALUES (?, ?)"
# row counts that the status, the hash diff and a published snapshot's facts all read
COUNT_DOCUMENTS = "SELECT count(*) FROM documents"
COUNT_CHUNKS = "SELECT count(*) FROM chunks"


def create_vectors_sql(dim: int) -> str:
    """The `vectors` DDL for `dim`-wide embeddings (an int, so nothing else can reach the SQL).

    Args:
        dim: the encoder's output dimension.
    Returns:
        One CREATE TABLE IF NOT EXISTS statement.
    """
    return CREATE_VECTORS.format(dim=int(dim))


def scalar(con: duckdb.DuckDBPyConnection, statement: str, params: list | None = None) -> Any:
    """The one value of a statement that returns exactly one row (a count, `RETURNING` of an
    aggregate, an existence check).

    Args:
        con: an open connection.
        statement: SQL returning one row.
        params: its bound parameters.
    Returns:
        The first column of that row.
    """
    row = con.execute(statement, params).fetchone()
    if row is None:
        raise StoreError(f"expected one row, got none from: {statement}")
    return row[0]


def read_meta(con: duckdb.DuckDBPyConnection, key: str) -> str | None:
    """One `meta` value, None when the key is absent.

    Args:
        con: an open connection to a store whose `meta` table exists.
        key: the meta key (`schema_version`, `data_version`, `provenance`).
    Returns:
        The stored text, or None.
    """
    row = con.execute(GET_META, [key]).fetchone()
    return row[0] if row else None


def stored_schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The schema step a file is at: 0 for an empty file.

    Args:
        con: an open connection.
    Returns:
        The `schema_version` meta value, or 0 when there is no `meta` table or no value.
    """
    if not scalar(con, HAS_META):
        return 0
    value = read_meta(con, "schema_version")
    return int(value) if value is not None else 0


def apply_migration(con: duckdb.DuckDBPyConnection, step: int) -> None:
    """Run migration `step` and record it, inside the caller's transaction.

    Args:
        con: a writable connection, in a transaction.
        step: a key of MIGRATIONS.
    """
    for sql in MIGRATIONS[step]:
        con.execute(sql)
    con.execute(SET_META, ["schema_version", str(step)])


def read_briefly(path: Path, read: Callable[[duckdb.DuckDBPyConnection], T]) -> T | None:
    """What `read` returns from one DuckDB file opened read-only for the moment it takes,
    without the store's writer lock: how a server learns of tokens and review labels written
    to the live file since the last publish.

    Args:
        path: a store's `store.duckdb` (it must exist).
        read: the query, given the connection.
    Returns:
        Its result, or None when the file cannot be opened now (a writer holds it) or `read`
        fails on it (a file from before the table it reads); the caller keeps what it knew.
    """
    import duckdb

    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return None
    try:
        return read(con)
    except duckdb.Error:
        return None
    finally:
        con.close()
