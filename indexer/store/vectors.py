"""Stored vectors and their provenance: which encoder set-up made them (checked before adding
or querying), streaming them out for FAISS, fetching some by chunk id, and the chunk -> document
map a dense search needs; the hybrid weight tuned for the store. Does not touch FAISS."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import numpy as np

from indexer.errors import ProvenanceMismatch, StoreError
from indexer.records.provenance import WRITE_KEYS, FusionTuning, Provenance
from indexer.store.core import StoreCore
from indexer.store.schema import INSERT_META, SET_META, create_vectors_sql, read_meta

FUSION_TUNING_KEY = "fusion_tuning"  # meta key of the FusionTuning record (JSON)
SELECT_VECTORS = "SELECT chunk_id, embedding FROM vectors"
SELECT_VECTORS_OF = (
    "SELECT chunk_id, embedding FROM vectors WHERE chunk_id IN {ids} ORDER BY chunk_id"
)
COUNT_VECTORS = "SELECT count(*) FROM vectors"
SPAN_COLUMNS = ("chunk_id", "doc_id", "start_char", "end_char")
SELECT_CHUNK_SPANS = f"SELECT {', '.join(SPAN_COLUMNS)} FROM chunks"  # unordered
SELECT_CHUNK_IDS_UNORDERED = "SELECT chunk_id FROM chunks"
SELECT_CHUNKS_OF_DOCS = (
    "SELECT chunk_id, doc_id FROM chunks WHERE doc_id IN {ids} ORDER BY chunk_id"
)
SELECT_CHUNK_SPANS_AFTER = SELECT_CHUNK_SPANS + " WHERE chunk_id > {last} ORDER BY chunk_id"
SELECT_CHUNK_SPANS_OF = SELECT_CHUNK_SPANS + " WHERE chunk_id IN {ids} ORDER BY chunk_id"


def _spans(ids, docs, starts, ends) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(chunk ids, doc ids) as int64, (start chars, end chars) as int32."""
    return (
        np.asarray(ids, np.int64),
        np.asarray(docs, np.int64),
        np.asarray(starts, np.int32),
        np.asarray(ends, np.int32),
    )


def _as_matrix(embeddings) -> np.ndarray:
    """An Arrow FLOAT[dim] column as a float32 (n, dim) array."""
    dim = embeddings.type.list_size
    return embeddings.flatten().to_numpy(zero_copy_only=False).astype(np.float32).reshape(-1, dim)


class Vectors:
    """Vectors and their provenance (`store.vectors`).

    Args:
        core: the open store.
    """

    def __init__(self, core: StoreCore):
        self.core = core

    def provenance(self) -> Provenance | None:
        """The encoder set-up the stored vectors were made with; None before the first."""
        value = read_meta(self.core.con, "provenance")
        return Provenance(**json.loads(value)) if value is not None else None

    def check_provenance(self, current: Provenance, keys: Sequence[str]) -> None:
        """Refuse to mix vectors of different encoders in one store.

        Args:
            current: the encoder set-up about to add or query.
            keys: the provenance keys that must agree (WRITE_KEYS or QUERY_KEYS).
        Raises:
            ProvenanceMismatch: naming the keys that differ and how to fix it.
        """
        stored = self.provenance()
        if stored is None:
            return
        diffs = stored.mismatches(current, keys)
        if diffs:
            raise ProvenanceMismatch(
                f"store {self.core.path} holds vectors made by another encoder set-up "
                f"(stored != configured: {'; '.join(diffs)}). Use the configuration the store "
                "was built with, re-encode it with the configured model (`bertindex reindex "
                f"--store {self.core.path}`), or index into a new --store."
            )

    def set_provenance(self, current: Provenance) -> None:
        """Record the encoder set-up (and create `vectors` at its width) on the first add;
        afterwards check that it agrees on WRITE_KEYS.

        Args:
            current: the encoder set-up about to add vectors.
        """
        self.check_provenance(current, WRITE_KEYS)
        if self.provenance() is None:
            self.core.con.execute(INSERT_META, ["provenance", json.dumps(current.to_dict())])
            self.core.con.execute(create_vectors_sql(current.dim))

    def fusion_tuning(self) -> FusionTuning | None:
        """The hybrid weight the last index run tuned for this store; None when none did."""
        value = read_meta(self.core.con, FUSION_TUNING_KEY)
        return FusionTuning(**json.loads(value)) if value is not None else None

    def set_fusion_tuning(self, record: FusionTuning) -> None:
        """Record (or replace) the store's tuned hybrid weight; searches see it once the
        next index version (and its snapshot) is published.

        Args:
            record: what `indexer.indexing.fusion_tune.tune_dense_weight` measured.
        """
        with self.core.transaction():
            self.core.con.execute(SET_META, [FUSION_TUNING_KEY, json.dumps(record.to_dict())])
            self.core.bump_data_version()  # what a search sees changed

    def count(self) -> int:
        """Stored vectors (what `iter_batches` yields); 0 before the first."""
        if self.provenance() is None:
            return 0
        return self.core.scalar(COUNT_VECTORS)

    def iter_batches(self, batch_rows: int = 65536) -> Iterable[tuple[np.ndarray, np.ndarray]]:
        """Every stored vector, in the order written (ascending chunk ids: ids are drawn as
        rows are appended), the same order on every pass while nothing writes. No ORDER BY: a
        sort would hold every vector at once.

        Args:
            batch_rows: vectors per item.
        Returns:
            (chunk ids int64, vectors float32 (n, dim)) items.
        """
        if self.provenance() is None:
            return
        self._live_only()
        for rb in self.core.con.execute(SELECT_VECTORS).fetch_record_batch(batch_rows):
            yield rb.column(0).to_numpy().astype(np.int64), _as_matrix(rb.column(1))

    def fetch(self, chunk_ids: np.ndarray) -> np.ndarray:
        """The vectors of `chunk_ids`, in ascending chunk id order.

        Args:
            chunk_ids: ascending chunk ids that have a stored vector.
        Returns:
            float32 (len(chunk_ids), dim); (0, dim) for no ids.
        Raises:
            StoreError: some of the ids have no stored vector.
        """
        if not len(chunk_ids):
            stored = self.provenance()
            return np.zeros((0, stored.dim if stored is not None else 0), np.float32)
        self._live_only()
        with self.core.bound(chunk_ids) as ids:
            table = self.core.con.execute(SELECT_VECTORS_OF.format(ids=ids)).fetch_arrow_table()
        if table.num_rows != len(chunk_ids):
            raise StoreError(
                f"store {self.core.path}: {len(chunk_ids) - table.num_rows} of {len(chunk_ids)} "
                "chunk ids have no stored vector; run `bertindex doctor` to see which"
            )
        return _as_matrix(table.column("embedding").combine_chunks())

    def _live_only(self) -> None:
        """Embeddings are read from the live file: a published snapshot leaves them out (the
        index holds them), so reading them there is a caller's error, said as such."""
        if self.core.version is not None:
            raise StoreError(
                f"{self.core.path}: the published snapshot holds no embeddings; open the store "
                "with Store(path, read_only=True, snapshot=False) to read them"
            )

    def chunk_ids(self, batch_rows: int = 1 << 20) -> np.ndarray:
        """Every stored chunk id, ascending, int64: streamed out of DuckDB (a materialised
        result must fit the writer's 128 MB; 10M ids do not) and sorted here."""
        reader = self.core.con.execute(SELECT_CHUNK_IDS_UNORDERED).fetch_record_batch(batch_rows)
        parts = [batch.column(0).to_numpy().astype(np.int64) for batch in reader]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def chunk_span_map(
        self, batch_rows: int = 1 << 20
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every chunk's document and character span (24 bytes a chunk): a Searcher holding it
        maps FAISS ids to documents and fetches a search's hits with one documents query, no
        chunks join. Streamed out of DuckDB unordered and sorted here, as `chunk_ids`.

        Returns:
            (chunk ids ascending, doc ids, start chars, end chars), aligned.
        """
        reader = self.core.con.execute(SELECT_CHUNK_SPANS).fetch_record_batch(batch_rows)
        parts = [_spans(*(batch.column(i).to_numpy() for i in range(4))) for batch in reader]
        if not parts:
            return _spans([], [], [], [])
        ids, docs, starts, ends = (np.concatenate(p) for p in zip(*parts))
        order = np.argsort(ids, kind="stable")
        return ids[order], docs[order], starts[order], ends[order]

    def chunk_spans_after(self, last: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`chunk_span_map`'s rows of the chunks whose id is above `last` (those added since a
        base was built: `indexer.index.span_file`)."""
        rows = self.core.con.execute(SELECT_CHUNK_SPANS_AFTER.format(last=int(last))).fetchnumpy()
        return _spans(rows["chunk_id"], rows["doc_id"], rows["start_char"], rows["end_char"])

    def chunks_of_documents(
        self, doc_ids: Sequence[int] | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(chunk ids ascending, their doc ids) of the given documents (a sample's)."""
        if not len(doc_ids):
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        with self.core.bound([int(d) for d in doc_ids]) as ids:
            rows = self.core.con.execute(SELECT_CHUNKS_OF_DOCS.format(ids=ids)).fetchnumpy()
        return rows["chunk_id"].astype(np.int64), rows["doc_id"].astype(np.int64)

    def chunk_spans(
        self, chunk_ids: Sequence[int] | np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """`chunk_span_map`'s rows for some chunk ids only (a search's few hundred): what a
        one-off search reads instead of the whole map (24 bytes a chunk: 240 MB at 10M).

        Returns:
            (chunk ids ascending, doc ids, start chars, end chars) of the ids that exist.
        """
        wanted = sorted({int(i) for i in chunk_ids})
        if not wanted:
            return _spans([], [], [], [])
        lookup = self.core.row_lookup("chunks", "chunk_id")
        found = lookup.fetch(wanted, SPAN_COLUMNS) if lookup is not None else None
        if found is not None:  # straight from the snapshot's segments
            found.sort()
            return _spans(*(zip(*found) if found else ([], [], [], [])))
        # a literal list: DuckDB skips the row groups whose min/max miss every id (a bound
        # view is a join, which reads them all)
        ids = "(" + ",".join(str(i) for i in wanted) + ")"
        rows = self.core.con.execute(SELECT_CHUNK_SPANS_OF.format(ids=ids)).fetchnumpy()
        return _spans(rows["chunk_id"], rows["doc_id"], rows["start_char"], rows["end_char"])
