"""Stored vectors and their provenance: which encoder set-up made them (checked before adding
or querying), streaming them out for FAISS, fetching some by chunk id, and the chunk -> document
map a dense search needs; the hybrid weight tuned for the store. Does not touch FAISS.

A stored vector is a row of `vectors` or a row of a recorded vector file
(`indexer.store.vector_files`: large batches); every read here covers both, in chunk id order,
and keeps only the chunks that exist (a file keeps the rows of chunks deleted since)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from indexer.core.faults import crash_point
from indexer.core.timeutil import utc_now
from indexer.errors import ProvenanceMismatch, StoreError
from indexer.records.provenance import WRITE_KEYS, FusionTuning, Provenance
from indexer.store import vector_files
from indexer.store.core import StoreCore
from indexer.store.rows import ChunkRows
from indexer.store.schema import INSERT_META, SET_META, create_vectors_sql
from indexer.store.vector_files import VectorFile

FUSION_TUNING_KEY = "fusion_tuning"  # meta key of the FusionTuning record (JSON)
SELECT_VECTORS = "SELECT chunk_id, embedding FROM vectors"
SELECT_VECTORS_OF = (
    "SELECT chunk_id, embedding FROM vectors WHERE chunk_id IN {ids} ORDER BY chunk_id"
)
COUNT_VECTORS = "SELECT count(*) FROM vectors"
DELETE_VECTORS = "DELETE FROM vectors"
CHUNK_ROW_COLUMNS = ("doc_id", "ordinal", "start_char", "end_char", "n_tokens")  # ChunkRows'
MOVE_SHARE = 0.05  # `move_rows_to_files`: rows moved while at most this share of the vectors
MOVE_GAP = 1024  # `move_rows_to_files`: ids further apart start another file
FETCH_ROWS = 8192  # vectors a query of `Vectors.fetch` returns (12 MB at 384-d)
SELECT_VECTORS_IN = "SELECT chunk_id, embedding FROM vectors WHERE chunk_id >= ? AND chunk_id < ?"
HAS_VECTOR_FILES = (
    "SELECT count(*) FROM information_schema.tables WHERE table_catalog = current_database() "
    "AND table_name = 'vector_files'"
)
SELECT_VECTOR_FILES = (
    "SELECT name, first_chunk_id, n_rows FROM vector_files ORDER BY first_chunk_id"
)
INSERT_VECTOR_FILE = "INSERT INTO vector_files VALUES (?, ?, ?, ?, ?)"
DELETE_VECTOR_FILE = "DELETE FROM vector_files WHERE name = ?"
# the chunks whose vector is in a recorded file: an equality join on blocks of FILE_BLOCK chunk
# ids (each file listed once for every block its range touches; ~2.5 a file of 2,048 rows),
# then each file's own range. Not a range join of the chunks with the files: DuckDB's ran out
# of the writer's 128 MB at 10M chunks and 4,883 files (`counts.collections`, a 10M store); this
# one probes a small hash table with the chunks as they stream (benchmarks/file_chunk_ids.py at
# 10M: the ids counted in 0.15 s against 3.9 s, the collections query 6.2 s against 23.2 s,
# then out of memory on its second try)
FILE_BLOCK = 1024
FILE_BLOCKS = (
    "SELECT first_chunk_id, first_chunk_id + n_rows AS stop, unnest(range("
    f"first_chunk_id // {FILE_BLOCK}, (first_chunk_id + n_rows - 1) // {FILE_BLOCK} + 1)) AS block "
    "FROM vector_files"
)
FILE_CHUNK_IDS = (
    f"SELECT c.chunk_id FROM chunks c JOIN ({FILE_BLOCKS}) f ON c.chunk_id // {FILE_BLOCK} = "
    "f.block AND c.chunk_id >= f.first_chunk_id AND c.chunk_id < f.stop"
)
CHUNK_IDS_IN = "SELECT chunk_id FROM chunks WHERE chunk_id >= ? AND chunk_id < ?"
SPAN_COLUMNS = ("chunk_id", "doc_id", "start_char", "end_char")
SELECT_CHUNK_SPANS = f"SELECT {', '.join(SPAN_COLUMNS)} FROM chunks"  # unordered
SELECT_CHUNK_IDS_UNORDERED = "SELECT chunk_id FROM chunks"
SELECT_CHUNKS_OF_DOCS = (
    "SELECT chunk_id, doc_id FROM chunks WHERE doc_id IN {ids} ORDER BY chunk_id"
)
SELECT_CHUNK_ROWS_OF_DOCS = (
    "SELECT chunk_id, doc_id, ordinal, start_char, end_char, n_tokens FROM chunks "
    "WHERE doc_id IN {ids} ORDER BY doc_id, ordinal"
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


def _coalesced(
    pieces: Iterable[tuple[np.ndarray, np.ndarray]], batch_rows: int
) -> Iterable[tuple[np.ndarray, np.ndarray]]:
    """`pieces` regrouped into items of `batch_rows` (the last fewer): a store of many small
    files streams as it would as rows (a FAISS shard or add per item, not per file)."""
    ids: list[np.ndarray] = []
    vecs: list[np.ndarray] = []
    held = 0
    for part_ids, part in pieces:
        if not held and len(part_ids) == batch_rows:  # whole already: no copy
            yield part_ids, part
            continue
        ids.append(part_ids)
        vecs.append(part)
        held += len(part_ids)
        while held >= batch_rows:
            all_ids, all_vecs = np.concatenate(ids), np.concatenate(vecs)
            yield all_ids[:batch_rows], all_vecs[:batch_rows]
            ids, vecs = [all_ids[batch_rows:]], [all_vecs[batch_rows:]]
            held -= batch_rows
    if held:
        yield np.concatenate(ids), np.concatenate(vecs)


class Vectors:
    """Vectors and their provenance (`store.vectors`).

    Args:
        core: the open store.
    """

    def __init__(self, core: StoreCore):
        self.core = core

    def provenance(self) -> Provenance | None:
        """The encoder set-up the stored vectors were made with; None before the first."""
        value = self.core.meta("provenance")
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
        value = self.core.meta(FUSION_TUNING_KEY)
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

    # -- vector files ---------------------------------------------------------------------
    def files(self) -> list[VectorFile]:
        """The recorded vector files, by first chunk id (none in a store or snapshot from
        before them)."""
        if not self.core.scalar(HAS_VECTOR_FILES):
            return []
        rows = self.core.con.execute(SELECT_VECTOR_FILES).fetchall()
        return [VectorFile(name, int(first), int(n)) for name, first, n in rows]

    def ids_sql(self) -> str:
        """A subquery of the chunk ids that have a stored vector, rows and files alike (one
        `chunk_id` column), for SQL that joins on them; it reads no embedding, so it serves a
        published snapshot too. Only after the first vector (`vectors` exists)."""
        if not self.core.scalar(HAS_VECTOR_FILES):
            return "(SELECT chunk_id FROM vectors)"
        return f"(SELECT chunk_id FROM vectors UNION ALL {FILE_CHUNK_IDS})"

    def record_file(self, vf: VectorFile, size: int) -> None:
        """Record a written file, inside the caller's transaction (the one committing its
        chunks)."""
        self.core.con.execute(INSERT_VECTOR_FILE, [vf.name, vf.first, vf.rows, size, utc_now()])

    def collect_files(self, keep: set[str] | None) -> dict[str, int]:
        """Delete the vector files the store no longer needs, under the writer lock, before a
        run writes any: those no commit recorded (a writer killed between writing one and
        committing its chunks, a cluster worker's file of a partition never committed) and
        those none of whose chunks exist any more (their records first, then the files).
        While a reindex's next generation is pending, no unrecorded file is deleted: its
        batches' files are in this folder (`vector_files.share_with_generation`).

        Args:
            keep: files kept whatever their chunks, with their records: those a published
                index base rescores from (`version_files.named_row_files`; None: that could
                not be read, so every file is kept).
        Returns:
            {"unrecorded": files deleted, "emptied": recorded files dropped}.
        """
        nothing = {"unrecorded": 0, "emptied": 0}
        if self.core.read_only or not self.core.scalar(HAS_VECTOR_FILES) or keep is None:
            return nothing
        if vector_files.shares_folder(self.core.path):  # a generation: the live store collects
            return nothing
        recorded = {vf.name for vf in self.files()} | keep
        stray = []  # none while a reindex's generation is pending: its files are unrecorded here
        if not vector_files.generation_pending(self.core.path):
            stray = [name for name in vector_files.on_disk(self.core.path) if name not in recorded]
        live = self._live_per_file(self.files())
        emptied = sorted(name for name, n in live.items() if n == 0 and name not in keep)
        if emptied:
            with self.core.transaction():
                for name in emptied:
                    self.core.con.execute(DELETE_VECTOR_FILE, [name])
        vector_files.remove(self.core.path, stray + emptied)
        left = vector_files.clear_incoming(self.core.path)
        return {"unrecorded": len(stray) + left, "emptied": len(emptied)}

    def move_rows_to_files(self, max_share: float = MOVE_SHARE) -> int:
        """Move the vectors kept as rows of `vectors` into files of the store's folder, when
        they are at most `max_share` of the stored vectors (a run's last, short batch; small
        runs since), so that a base built next rescores from files only
        (`indexer.index.store_rows`). More rows stay where they are: moving them would leave
        their space in store.duckdb, which DuckDB does not give back.

        One file per run of chunk ids between two recorded files, ids without a row (chunks
        deleted) as zero rows, unread; a run is cut where ids are more than MOVE_GAP apart.
        The files are written durably first, then recorded and the rows deleted in one
        transaction: a writer killed between leaves files nothing records, which the next
        run's `collect_files` deletes, and the rows in place.

        Returns:
            How many vectors moved.
        """
        if self.core.read_only:
            return 0
        rows = self.rows_kept()
        if not rows or rows > max_share * self.count():
            return 0
        table = self.core.con.execute(SELECT_VECTORS + " ORDER BY chunk_id").fetch_arrow_table()
        ids = table.column(0).to_numpy().astype(np.int64)
        vectors = _as_matrix(table.column(1).combine_chunks())
        slot = np.searchsorted([vf.first for vf in self.files()], ids, side="right")
        cut = np.flatnonzero((np.diff(slot) != 0) | (np.diff(ids) > MOVE_GAP)) + 1
        written = []
        for part, block in zip(np.split(ids, cut), np.split(vectors, cut)):
            full = np.zeros((int(part[-1] - part[0]) + 1, vectors.shape[1]), np.float32)
            full[part - part[0]] = block
            written.append(vector_files.write(self.core.path, int(part[0]), full))
        crash_point("vectors.rows_moved")
        with self.core.transaction():
            for vf, size in written:
                self.record_file(vf, size)
            self.core.con.execute(DELETE_VECTORS)
        return rows

    def rows_kept(self) -> int:
        """How many vectors are rows of `vectors` rather than of files (0 before the first)."""
        return self.core.scalar(COUNT_VECTORS) if self.provenance() is not None else 0

    def rows_left_in_place(self) -> bool:
        """Whether the store keeps more of its vectors as rows than `move_rows_to_files` moves
        (more than MOVE_SHARE of them), and at least a file's worth: a store indexed before
        vector files, which a same-encoder `bertindex reindex` copies into files. Fewer rows
        (every run of a store small) cost little and stay."""
        rows = self.rows_kept()
        return rows >= vector_files.VECTOR_FILE_MIN_ROWS and rows > MOVE_SHARE * self.count()

    def chunk_rows(self, doc_ids: Sequence[int]) -> ChunkRows:
        """The chunks of `doc_ids` with their vectors, each document's in ordinal order, as
        `Documents.write_batch` takes them: a store copied into a new generation without
        encoding (`bertindex reindex` of a store that keeps its vectors as rows)."""
        wanted = sorted(int(d) for d in doc_ids)
        if not wanted:
            return ChunkRows([], [], [], [], [], np.zeros((0, self._dim()), np.float32))
        with self.core.bound(wanted) as ids:
            rows = self.core.con.execute(SELECT_CHUNK_ROWS_OF_DOCS.format(ids=ids)).fetchnumpy()
        chunk_ids = rows["chunk_id"].astype(np.int64)
        order = np.argsort(chunk_ids, kind="stable")
        vectors = np.empty((len(chunk_ids), self._dim()), np.float32)
        vectors[order] = self.fetch(chunk_ids[order])
        doc, ordinal, start, end, tokens = (
            rows[c].astype(np.int64).tolist() for c in CHUNK_ROW_COLUMNS
        )
        return ChunkRows(doc, ordinal, start, end, tokens, vectors)

    def all_in_files(self) -> bool:
        """Whether every stored vector is a row of a vector file (none in `vectors`)."""
        return not self.core.scalar(COUNT_VECTORS)

    def missing_files(self) -> list[tuple[Path, VectorFile]]:
        """Recorded vector files that are not in the store's folder (`doctor`): (where each
        should be, the file)."""
        target = vector_files.folder(self.core.path)
        return [(target / vf.name, vf) for vf in self.files() if not (target / vf.name).is_file()]

    def _dim(self) -> int:
        stored = self.provenance()
        return stored.dim if stored is not None else 0

    def _file_rows(self, vf: VectorFile, dim: int) -> np.ndarray:
        return vector_files.open_rows(self.core.path, vf, dim)

    def count(self) -> int:
        """Stored vectors (what `iter_batches` yields); 0 before the first."""
        if self.provenance() is None:
            return 0
        rows = self.core.scalar(COUNT_VECTORS)
        if self.core.scalar(HAS_VECTOR_FILES):
            rows += sum(self._live_per_file(self.files()).values())
        return rows

    def _live_per_file(self, files: list[VectorFile]) -> dict[str, int]:
        """How many existing chunks each file holds, counted here over the sorted chunk ids:
        DuckDB's range join of 10M chunks with 4,883 files (10M documents) ran out of the
        writer's 128 MB."""
        if not files:
            return {}
        ids = self.chunk_ids()
        firsts = np.array([vf.first for vf in files], np.int64)
        stops = np.array([vf.stop for vf in files], np.int64)
        counts = np.searchsorted(ids, stops) - np.searchsorted(ids, firsts)
        return {vf.name: int(n) for vf, n in zip(files, counts.tolist())}

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
        files = self.files()
        if not files:
            for rb in self.core.con.execute(SELECT_VECTORS).fetch_record_batch(batch_rows):
                yield rb.column(0).to_numpy().astype(np.int64), _as_matrix(rb.column(1))
            return
        yield from _coalesced(self._interleaved(files, batch_rows), batch_rows)

    def _interleaved(
        self, files: list[VectorFile], batch_rows: int
    ) -> Iterable[tuple[np.ndarray, np.ndarray]]:
        """Rows and files by chunk id: the rows before each file, then the file."""
        low = 0
        for vf in files:
            yield from self._rows_between(low, vf.first, batch_rows)
            yield from self._file_batches(vf, batch_rows)
            low = vf.stop
        yield from self._rows_between(low, 2**63 - 1, batch_rows)

    def _rows_between(
        self, low: int, high: int, batch_rows: int
    ) -> Iterable[tuple[np.ndarray, np.ndarray]]:
        """The `vectors` rows of chunk ids low..high-1, in the order written."""
        reader = self.core.con.execute(SELECT_VECTORS_IN, [low, high]).fetch_record_batch(
            batch_rows
        )
        for rb in reader:
            if rb.num_rows:
                yield rb.column(0).to_numpy().astype(np.int64), _as_matrix(rb.column(1))

    def _file_batches(
        self, vf: VectorFile, batch_rows: int
    ) -> Iterable[tuple[np.ndarray, np.ndarray]]:
        """A file's rows of the chunks that exist, `batch_rows` at a time (copied out of the
        mapped file, so a caller may keep them)."""
        rows = self._file_rows(vf, self._dim())
        live = self.core.con.execute(CHUNK_IDS_IN, [vf.first, vf.stop]).fetchnumpy()
        ids = np.sort(live["chunk_id"].astype(np.int64))
        whole = len(ids) == vf.rows
        for at in range(0, len(ids), batch_rows):
            part = ids[at : at + batch_rows]
            if whole:
                block = np.array(rows[at : at + len(part)])
            else:
                block = rows[part - vf.first]
            yield part, block

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
            return np.zeros((0, self._dim()), np.float32)
        self._live_only()
        files = self.files()
        if not files:
            return self._fetch_rows(chunk_ids)
        ids = np.asarray(chunk_ids, np.int64)
        dim = self._dim()  # one read of the provenance, not one per file
        out = np.empty((len(ids), dim), np.float32)
        in_file = np.zeros(len(ids), bool)
        for vf in files:
            lo, hi = np.searchsorted(ids, [vf.first, vf.stop])
            if hi > lo:
                out[lo:hi] = self._file_rows(vf, dim)[ids[lo:hi] - vf.first]
                in_file[lo:hi] = True
        if not in_file.all():
            out[~in_file] = self._fetch_rows(ids[~in_file])
        return out

    def _fetch_rows(self, chunk_ids: np.ndarray) -> np.ndarray:
        """`fetch` from the `vectors` rows only, FETCH_ROWS ids a query: the sorted result
        is held whole by DuckDB, whose writer has 128 MB (65,536 384-d vectors are 100 MB;
        a 10M store's 1 % re-run ran out of memory publishing)."""
        parts = []
        for start in range(0, len(chunk_ids), FETCH_ROWS):
            wanted = chunk_ids[start : start + FETCH_ROWS]
            with self.core.bound(wanted) as ids:
                query = SELECT_VECTORS_OF.format(ids=ids)
                table = self.core.con.execute(query).fetch_arrow_table()
            if table.num_rows != len(wanted):
                raise StoreError(
                    f"store {self.core.path}: {len(wanted) - table.num_rows} of {len(wanted)} "
                    "chunk ids have no stored vector; run `bertindex doctor` to see which"
                )
            parts.append(_as_matrix(table.column("embedding").combine_chunks()))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

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
