"""The SQL of the trends report: documents put in buckets (by time or by a metadata field), then
per bucket the label counts and mean scores of each head, entity counts with their change
against the previous bucket, rising entities, the largest near-duplicate waves, and score
histograms. All aggregation runs in DuckDB; Python gets the small results. Does not format.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import datetime

import pyarrow as pa

from indexer.store.core import StoreCore
from indexer.store.filters import json_path
from indexer.store.timefield import DOC_TIMES, SET_UTC, documents_with_field

UNKNOWN = "unknown"
TIME_UNITS = {"day": "%Y-%m-%d", "week": "%Y-%m-%d", "month": "%Y-%m"}
# doc -> bucket by time: binds (path, collection, collection, since, since, until, until)
TIME_BUCKETS = (
    "SELECT doc_id, CASE WHEN t IS NULL THEN NULL ELSE "
    "strftime(date_trunc('{unit}', t), '{fmt}') END AS bucket FROM ("
    + DOC_TIMES
    + ") WHERE t IS NULL OR ((?::TIMESTAMP IS NULL OR t >= ?) "
    "AND (?::TIMESTAMP IS NULL OR t < ?))"
)
# doc -> bucket by a metadata field's value: binds (path, collection, collection)
FIELD_BUCKETS = (
    "SELECT doc_id, json_extract_string(metadata, ?) AS bucket FROM documents "
    "WHERE (?::VARCHAR IS NULL OR collection = ?)"
)
# a temporary table: allowed on a read-only connection, and joined faster than an Arrow view
CREATE_BUCKETS = (
    "CREATE OR REPLACE TEMP TABLE report_buckets AS "
    "SELECT doc_id, coalesce(bucket, ?) AS bucket FROM ({buckets})"
)
COUNT_BUCKETS = "SELECT bucket, count(*) FROM report_buckets GROUP BY bucket"
DROP_BUCKETS = "DROP TABLE IF EXISTS temp.report_buckets"
HEAD_FILTER = "(? OR a.head IN (SELECT v FROM {heads}))"
LABELS = (
    """
    SELECT b.bucket, a.head, a.label, count(*), avg(a.probability)
    FROM annotations a JOIN {buckets} b ON b.doc_id = a.doc_id
    WHERE """
    + HEAD_FILTER
    + """ GROUP BY ALL ORDER BY 1, 2, 3"""
)
HISTOGRAM = (
    """
    SELECT a.head, a.label, least(CAST(floor(a.probability * ?) AS INTEGER), ? - 1) AS bin,
           count(*)
    FROM annotations a JOIN {buckets} b ON b.doc_id = a.doc_id
    WHERE """
    + HEAD_FILTER
    + """ GROUP BY ALL ORDER BY 1, 2, 3"""
)
# entities: documents mentioning each (type, lower text) per bucket, share of the bucket's
# documents, the same in the previous bucket (by `ord`), top per type and the rising ones.
# binds (top, rising)
ENTITIES = """
    WITH agg AS (
        SELECT o.ord, e.type, lower(e.text) AS text, count(DISTINCT e.doc_id) AS n
        FROM entities e JOIN {buckets} b ON b.doc_id = e.doc_id
        JOIN {order} o ON o.bucket = b.bucket GROUP BY ALL),
    cur AS (
        SELECT c.ord, c.type, c.text, c.n, c.n / o.docs AS share,
               coalesce(p.n, 0) AS prev_n,
               CASE WHEN po.docs > 0 THEN coalesce(p.n, 0) / po.docs ELSE 0 END AS prev_share,
               po.docs IS NOT NULL AS has_prev
        FROM agg c JOIN {order} o ON o.ord = c.ord
        LEFT JOIN {order} po ON po.ord = c.ord - 1
        LEFT JOIN agg p ON p.ord = c.ord - 1 AND p.type = c.type AND p.text = c.text),
    ranked AS (
        SELECT *, row_number() OVER (PARTITION BY ord, type ORDER BY n DESC, text) AS r_top,
               row_number() OVER (PARTITION BY ord ORDER BY share - prev_share DESC, n DESC,
                                  text) AS r_rise
        FROM cur)
    SELECT ord, type, text, n, share, prev_n, prev_share, has_prev, r_top <= ?, r_rise <= ?
    FROM ranked WHERE r_top <= ? OR (has_prev AND r_rise <= ?) ORDER BY ord, type, n DESC, text"""
# largest waves per bucket: binds (min_size, waves)
WAVES = """
    WITH sized AS (
        SELECT group_id FROM dedup_members GROUP BY group_id HAVING count(*) >= ?),
    per AS (
        SELECT b.bucket, m.group_id, count(*) AS n
        FROM dedup_members m JOIN sized s ON s.group_id = m.group_id
        JOIN {buckets} b ON b.doc_id = m.doc_id GROUP BY ALL),
    ranked AS (
        SELECT *, row_number() OVER (PARTITION BY bucket ORDER BY n DESC, group_id) AS r FROM per)
    SELECT r.bucket, r.group_id, r.n,
           (SELECT count(*) FROM dedup_members x WHERE x.group_id = r.group_id) AS size,
           (SELECT d.text FROM dedup_members x JOIN documents d ON d.doc_id = x.doc_id
            WHERE x.group_id = r.group_id ORDER BY x.doc_id LIMIT 1) AS representative
    FROM ranked r WHERE r.r <= ? ORDER BY r.bucket, r.n DESC"""


class Trends:
    """The trends report's aggregates (`store.trends`).

    Args:
        core: the open store.
    """

    def __init__(self, core: StoreCore):
        self.core = core

    @contextlib.contextmanager
    def bucketed(
        self,
        collection: str | None,
        by: str,
        time_field: str | None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Iterator[dict[str, int]]:
        """Each document's bucket, as the temporary table `report_buckets` (doc_id, bucket)
        for `aggregates` inside the block (dropped after it).

        Args:
            collection: one collection, or None for all.
            by: `day`, `week`, `month` (by `time_field`) or a metadata field's name.
            time_field: the metadata field holding the time (time buckets only).
            since, until: time buckets only: keep documents with since <= time < until
                (documents without a readable time stay, in the unknown bucket).
        Yields:
            {bucket: documents}; documents without a readable time (or value) are in UNKNOWN.
        """
        self.core.con.execute(SET_UTC)
        if by in TIME_UNITS:
            if time_field is None:
                raise ValueError(f"time buckets (by {by}) need the time field")
            sql = TIME_BUCKETS.format(unit=by, fmt=TIME_UNITS[by])
            params = [json_path(time_field), collection, collection, since, since, until, until]
        else:
            sql, params = FIELD_BUCKETS, [json_path(by), collection, collection]
        self.core.con.execute(CREATE_BUCKETS.format(buckets=sql), [UNKNOWN, *params])
        try:
            yield dict(self.core.con.execute(COUNT_BUCKETS).fetchall())
        finally:
            self.core.con.execute(DROP_BUCKETS)

    def documents_with_field(self, field: str, collection: str | None = None) -> int:
        """How many documents (of a collection, or all) carry the metadata field at all."""
        return documents_with_field(self.core.con, field, collection)

    def _has(self, table: str) -> bool:
        return self.core.has_table(table)

    def aggregates(
        self,
        order: list[tuple[str, int]],
        timed: bool,
        heads: list[str] | None,
        top: int = 5,
        rising: int = 10,
        waves: int = 3,
        min_size: int = 3,
        bins: int = 10,
    ) -> dict:
        """Every aggregate of the report over bucketed documents, in a few queries.

        Args:
            (inside `bucketed`, whose table holds each document's bucket)
            order: (bucket, documents) in report order (ord = position).
            timed: buckets are consecutive times (the caller ignores the previous-bucket
                figures otherwise).
            heads: only these heads (None: all).
            top: entities per type and bucket; rising: rising entities per bucket;
            waves: largest waves per bucket (of groups of at least `min_size`); bins: score
            histogram bins over [0, 1].
        Returns:
            {"labels": [(bucket, head, label, count, mean score)], "histogram": [(head, label,
            bin, count)], "entities": [(ord, type, text, n, share, prev_n, prev_share,
            has_prev, is_top, is_rising)], "waves": [(bucket, group id, n in bucket, size,
            representative)]}.
        """
        con = self.core.con
        order_table = pa.table(
            {
                "bucket": pa.array([b for b, _ in order], pa.string()),
                "ord": pa.array(range(len(order)), pa.int64()),
                "docs": pa.array([float(n) for _, n in order], pa.float64()),
            }
        )
        out: dict[str, list] = {"labels": [], "histogram": [], "entities": [], "waves": []}
        with self.core.bound(heads or [], pa.string()) as head_ref:
            con.register("report_order", order_table)
            try:
                refs = {"buckets": "report_buckets", "order": "report_order", "heads": head_ref}
                everything = heads is None
                if self._has("annotations"):
                    out["labels"] = con.execute(LABELS.format(**refs), [everything]).fetchall()
                    out["histogram"] = con.execute(
                        HISTOGRAM.format(**refs), [bins, bins, everything]
                    ).fetchall()
                if self._has("entities"):
                    out["entities"] = con.execute(
                        ENTITIES.format(**refs), [top, rising, top, rising]
                    ).fetchall()
                if self._has("dedup_members"):
                    out["waves"] = con.execute(WAVES.format(**refs), [min_size, waves]).fetchall()
            finally:
                con.unregister("report_order")
        return out
