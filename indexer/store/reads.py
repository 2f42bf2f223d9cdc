"""Document reads: search results (by chunk or by document), texts and content hashes for the
keyword index, and the diff of stored hashes against its manifest. Read-only."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from indexer.store.core import StoreCore
from indexer.store.rows import DocText, HashDiff, Hit
from indexer.store.schema import COUNT_DOCUMENTS

SELECT_CHUNK_HITS = (
    "SELECT c.chunk_id, d.doc_id, d.collection, d.external_id, d.title, d.text, d.metadata, "
    "c.start_char, c.end_char FROM chunks c JOIN documents d ON c.doc_id = d.doc_id "
    "WHERE c.chunk_id IN {ids}"
)
DOCUMENT_HIT_COLUMNS = ("doc_id", "collection", "external_id", "title", "text", "metadata")
SELECT_DOCUMENT_HITS = (
    f"SELECT {', '.join(DOCUMENT_HIT_COLUMNS)} FROM documents WHERE doc_id IN {{ids}}"
)
SELECT_TEXTS = "SELECT doc_id, title, text FROM documents WHERE doc_id IN {ids} ORDER BY doc_id"
SELECT_HASHES = "SELECT doc_id, content_hash FROM documents ORDER BY doc_id"
SELECT_DOC_IDS_UNORDERED = "SELECT doc_id FROM documents"
SELECT_HASHES_UNORDERED = "SELECT doc_id, content_hash FROM documents"
# the manifest path is a bound parameter of read_parquet
SELECT_NEW_OR_CHANGED = (
    "SELECT d.doc_id, m.doc_id IS NULL AS is_new FROM documents d "
    "LEFT JOIN read_parquet(?) m ON m.doc_id = d.doc_id "
    "WHERE m.content_hash IS DISTINCT FROM d.content_hash ORDER BY d.doc_id"
)
SELECT_GONE = (
    "SELECT m.doc_id FROM read_parquet(?) m LEFT JOIN documents d "
    "ON d.doc_id = m.doc_id WHERE d.doc_id IS NULL ORDER BY m.doc_id"
)


SMALL_ID_LIST = 256  # up to this many ids are written into the SQL as a literal list
# a literal list of ints (made by int(), so nothing but digits and commas reaches the SQL):
# DuckDB 1.4 probes for pandas on every bound Python value (two failing imports each), and
# registering an Arrow view costs ~5 ms; a search's 10-id fetch took 6.7 ms as a view, 6.8 ms
# as ten `?`s, 1.6 ms as one text parameter split in SQL (under load), and on a quiet machine
# 1.08 ms that way against 0.92 ms as a literal list (documents of SciFact)


@contextlib.contextmanager
def _id_list(core: StoreCore, ids: list[int]) -> Iterator[tuple[str, list]]:
    """(SQL for `x IN ...`, its parameters) for int ids: a short list (a search's hits) as a
    literal list, a long one as a registered Arrow view (`StoreCore.bound`)."""
    if len(ids) <= SMALL_ID_LIST:
        yield "(" + ",".join(str(int(i)) for i in ids) + ")", []
        return
    with core.bound(ids) as view:
        yield view, []


def _ids(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def _metadata(text: str | None) -> dict:
    return json.loads(text) if text else {}


class DocumentReads:
    """Documents and hits read back (`store.reads`).

    Args:
        core: the open store.
    """

    def __init__(self, core: StoreCore):
        self.core = core

    def fetch_hits(self, chunk_ids: Sequence[int]) -> dict[int, Hit]:
        """The documents behind chunk ids, with each chunk's span.

        Args:
            chunk_ids: chunk ids (unknown ones are skipped).
        Returns:
            chunk id -> Hit.
        """
        if not len(chunk_ids):
            return {}
        with _id_list(self.core, [int(i) for i in chunk_ids]) as (ids, params):
            rows = self.core.con.execute(SELECT_CHUNK_HITS.format(ids=ids), params).fetchall()
        return {
            r[0]: Hit(r[0], r[1], r[2], r[3], r[4], r[5], _metadata(r[6]), r[7], r[8]) for r in rows
        }

    def fetch_documents(self, doc_ids: Sequence[int]) -> dict[int, Hit]:
        """Documents by doc id, as Hits spanning the whole text (chunk_id -1).

        Args:
            doc_ids: doc ids (unknown ones are skipped).
        Returns:
            doc id -> Hit.
        """
        if not len(doc_ids):
            return {}
        wanted, rows = [int(d) for d in doc_ids], None
        lookup = self.core.row_lookup("documents", "doc_id")
        if lookup is not None and len(wanted) <= SMALL_ID_LIST:
            rows = lookup.fetch(wanted, DOCUMENT_HIT_COLUMNS)
        if rows is None:
            with _id_list(self.core, wanted) as (ids, params):
                sql = SELECT_DOCUMENT_HITS.format(ids=ids)
                rows = self.core.con.execute(sql, params).fetchall()
        return {
            r[0]: Hit(-1, r[0], r[1], r[2], r[3], r[4], _metadata(r[5]), 0, len(r[4])) for r in rows
        }

    def documents_text(self, doc_ids: Sequence[int]) -> list[DocText]:
        """Titles and texts of the given documents, by ascending doc id.

        Args:
            doc_ids: doc ids (unknown ones are skipped).
        Returns:
            One DocText per stored document.
        """
        if not len(doc_ids):
            return []
        with self.core.bound([int(d) for d in doc_ids]) as ids:
            rows = self.core.con.execute(SELECT_TEXTS.format(ids=ids)).fetchall()
        return [DocText(*r) for r in rows]

    def document_hashes(self) -> dict[int, str]:
        """doc id -> content hash of every stored document, in no order (streamed, unsorted: a
        materialised or sorted result must fit the writer's DuckDB memory limit, which 10M
        hashes do not)."""
        out: dict[int, str] = {}
        for batch in self.core.con.execute(SELECT_HASHES_UNORDERED).fetch_record_batch(1 << 16):
            out.update(zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()))
        return out

    def document_ids(self, batch_rows: int = 1 << 20) -> np.ndarray:
        """Every stored doc id, ascending: 8 bytes a document in this process, streamed out
        of DuckDB (whose writer memory is 128 MB) and sorted here."""
        reader = self.core.con.execute(SELECT_DOC_IDS_UNORDERED).fetch_record_batch(batch_rows)
        parts = [_ids(batch.column(0).to_numpy()) for batch in reader]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def document_hash_batches(self, batch_rows: int = 65536) -> pa.RecordBatchReader:
        """Every document's (doc_id, content_hash), by ascending doc id, streamed.

        Args:
            batch_rows: rows per record batch.
        Returns:
            A reader of record batches with columns doc_id and content_hash.
        """
        return self.core.con.execute(SELECT_HASHES).fetch_record_batch(batch_rows)

    def diff_hashes(self, manifest: Path) -> HashDiff:
        """The stored documents against a manifest of what an index holds, joined inside
        DuckDB (the Parquet file is read there too), so memory does not grow with the store.

        Args:
            manifest: a Parquet file of (doc_id, content_hash); a missing file means an empty
                index.
        Returns:
            HashDiff: doc ids new to the index, changed since, and gone from the store.
        """
        documents = self.core.scalar(COUNT_DOCUMENTS)
        if not Path(manifest).is_file():
            return HashDiff(documents, self.document_ids(), _ids([]), _ids([]))
        rows = self.core.con.execute(SELECT_NEW_OR_CHANGED, [str(manifest)]).fetchnumpy()
        gone = self.core.con.execute(SELECT_GONE, [str(manifest)]).fetchnumpy()["doc_id"]
        ids, is_new = _ids(rows["doc_id"]), np.asarray(rows["is_new"], dtype=bool)
        return HashDiff(documents, ids[is_new], ids[~is_new], _ids(gone))
