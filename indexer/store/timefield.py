"""A metadata field read as a point in time, in SQL: ISO 8601 strings (any UTC offset) or epoch
numbers (seconds, or milliseconds from 1e11 up), as naive UTC timestamps; anything else is
NULL (the report's "unknown" bucket). Shared by the trends report and the dedup groups."""

from __future__ import annotations

from typing import TYPE_CHECKING

from indexer.store.filters import json_path
from indexer.store.schema import scalar

if TYPE_CHECKING:
    import duckdb

SET_UTC = "SET TimeZone = 'UTC'"  # strings without an offset are UTC
# over columns `v` (the raw text) and `num` (TRY_CAST(v AS DOUBLE), computed once)
TIME_OF = """(CASE
    WHEN v IS NULL THEN NULL
    WHEN num IS NOT NULL THEN epoch_ms(CAST(CASE WHEN abs(num) >= 1e11 THEN num
                                                 ELSE num * 1000 END AS BIGINT))
    ELSE CAST(TRY_CAST(v AS TIMESTAMPTZ) AT TIME ZONE 'UTC' AS TIMESTAMP) END)"""
COUNT_WITH_FIELD = (
    "SELECT count(*) FROM documents WHERE (?::VARCHAR IS NULL OR collection = ?) "
    "AND json_extract(metadata, ?) IS NOT NULL"
)
# doc_id, the raw value and its time, of a collection's documents (or all): binds
# (path, collection, collection)
DOC_TIMES = (
    "SELECT doc_id, v AS raw, " + TIME_OF + " AS t FROM ("
    "SELECT doc_id, v, TRY_CAST(v AS DOUBLE) AS num FROM ("
    "SELECT doc_id, json_extract_string(metadata, ?) AS v FROM documents "
    "WHERE (?::VARCHAR IS NULL OR collection = ?)))"
)


def documents_with_field(con: duckdb.DuckDBPyConnection, field: str, collection: str | None) -> int:
    """How many documents (of a collection, or all) have the metadata field at all."""
    return scalar(con, COUNT_WITH_FIELD, [collection, collection, json_path(field)])
