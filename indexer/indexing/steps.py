"""Indexing steps: a batch of records -> new/changed/unchanged -> windows -> vectors -> store,
then the FAISS index brought in step with the store.

Each step is a plain function so that a Prefect flow (or a notebook) can chain them.
"""

from __future__ import annotations

import functools
import json
import logging
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from indexer.config import Config
from indexer.core.progress import ProgressArg
from indexer.core.stages import timed
from indexer.encode.encoder import Encoder
from indexer.encode.onnx_export import export_for_index
from indexer.errors import ConfigError, ProvenanceMismatch, VectorIndexError
from indexer.index.span_file import spans_path, write_spans
from indexer.index.vector import VectorIndex, resolve_spec
from indexer.index.version_files import bases_dir
from indexer.ingest.chunking import make_windows
from indexer.ingest.readers import Batch, Record, document_text
from indexer.records.index_spec import parse_spec
from indexer.records.provenance import QUERY_KEYS
from indexer.store import (
    VECTOR_FILE_MIN_ROWS,
    ChunkRows,
    Store,
    WorkerFiles,
    collect_segments,
    content_hash,
)

log = logging.getLogger(__name__)


@dataclass
class BatchResult:
    read: int = 0
    encoded: int = 0
    skipped_unchanged: int = 0
    changed: int = 0  # stored documents given new text or metadata
    rejected: int = 0
    chunks: int = 0
    # chunk ids as packed int64 (8 bytes each, not a Python int): a run over millions of
    # records keeps them until the index step
    added: array = field(default_factory=lambda: array("q"))
    removed: array = field(default_factory=lambda: array("q"))

    def merge(self, other: BatchResult) -> None:
        self.read += other.read
        self.encoded += other.encoded
        self.skipped_unchanged += other.skipped_unchanged
        self.changed += other.changed
        self.rejected += other.rejected
        self.chunks += other.chunks
        self.added.extend(other.added)
        self.removed.extend(other.removed)

    def summary(self) -> dict:
        return {
            "read": self.read,
            "encoded": self.encoded,
            "skipped_unchanged": self.skipped_unchanged,
            "rejected": self.rejected,
            "chunks": self.chunks,
        }


def encode_documents(
    encoder: Encoder, texts: list[str], config: Config, progress: ProgressArg = False
) -> tuple[list[int], ChunkRows]:
    """Window and encode texts.

    Returns:
        (document position of each chunk, ChunkRows whose doc_ids are positions into `texts`).
    """
    with timed("tokenize"):
        ids, offsets = encoder.tokenize(texts, offsets=True)
        owners, ordinals, starts, ends, n_tokens, seqs = [], [], [], [], [], []
        for pos, (tok, off, text) in enumerate(zip(ids, offsets, texts)):
            windows = make_windows(
                tok,
                off,
                len(text),
                encoder.cls_id,
                encoder.sep_id,
                config.model.max_length,
                config.long_documents.stride,
                config.long_documents.mode,
                prefix=encoder.document_prefix,
            )
            for ordinal, w in enumerate(windows):
                owners.append(pos)
                ordinals.append(ordinal)
                starts.append(w.start_char)
                ends.append(w.end_char)
                n_tokens.append(len(w.ids))
                seqs.append(w.ids)
    with timed("encode"):
        vectors = encoder.encode_ids(seqs, progress=progress)
    return owners, ChunkRows(owners, ordinals, starts, ends, n_tokens, vectors)


@dataclass
class BatchPlan:
    """What one batch needs: which documents to encode, which to skip, what to write.

    `texts` is all an encoding worker needs; the rest stays with the single writer.
    """

    batch: Batch
    collection: str
    new_rows: list[tuple[int, Record, str]]  # (doc id, record, content hash)
    changed_docs: list[tuple[int, Record, str]]
    meta_updates: list[tuple[int, Record]]
    skipped_unchanged: int
    texts: list[str]
    parts: list[BatchPlan] = field(default_factory=list)  # the plans merged into this (`then`)

    @property
    def to_encode(self) -> list[tuple[int, Record, str]]:
        return self.new_rows + self.changed_docs

    def then(self, later: BatchPlan) -> BatchPlan:
        """This plan and a later one as one batch (`texts` kept in `to_encode`'s order)."""
        new, later_new = len(self.new_rows), len(later.new_rows)
        return BatchPlan(
            Batch(
                self.batch.records + later.batch.records, self.batch.rejected + later.batch.rejected
            ),
            self.collection,
            self.new_rows + later.new_rows,
            self.changed_docs + later.changed_docs,
            self.meta_updates + later.meta_updates,
            self.skipped_unchanged + later.skipped_unchanged,
            self.texts[:new] + later.texts[:later_new] + self.texts[new:] + later.texts[later_new:],
            (self.parts or [self]) + (later.parts or [later]),
        )

    def describe(self) -> str:
        rows = [r.row for r in self.batch.records] + [r.row for r in self.batch.rejected]
        sources = sorted(
            {r.source for r in self.batch.records} | {r.source for r in self.batch.rejected}
        )
        return f"{', '.join(sources)} rows {min(rows, default=0)}-{max(rows, default=0)}"


def plan_batch(
    batch: Batch, store: Store, collection: str, stored_up_to: int | None = None
) -> BatchPlan:
    """Sort a batch's records into new, changed (re-encode) and unchanged (skip) by content hash.

    New documents get their doc ids here, in reading order, so ids do not depend on which
    worker encodes them. `stored_up_to`: the store's last doc id when the run began (ids are
    unique within a run, so only documents stored before it can match; None: look at all).
    """
    ids = [r.external_id for r in batch.records]
    known = store.documents.existing(collection, ids, up_to=stored_up_to)
    new_docs, changed_docs, meta_updates, skipped = [], [], [], 0
    for record in batch.records:
        digest = content_hash(record)
        if record.external_id not in known:
            new_docs.append((record, digest))
            continue
        stored = known[record.external_id]
        if stored.content_hash != digest:
            changed_docs.append((stored.doc_id, record, digest))
        else:
            skipped += 1
            if json.loads(stored.metadata or "{}") != record.metadata:
                meta_updates.append((stored.doc_id, record))
    new_ids = store.documents.next_ids("doc_ids", len(new_docs))
    new_rows = [(d, r, h) for d, (r, h) in zip(new_ids, new_docs)]
    texts = [document_text(r) for _, r, _ in new_rows + changed_docs]
    return BatchPlan(batch, collection, new_rows, changed_docs, meta_updates, skipped, texts)


def encode_texts_for_index(
    texts: list[str], config: Config, encoder: Encoder | None = None, progress: ProgressArg = False
) -> ChunkRows:
    """Window and encode texts; a pure function of its inputs, so any worker can run it.

    Args:
        encoder: a loaded encoder; None loads (and caches per process) the configured one.
    Returns:
        ChunkRows whose doc_ids are positions into `texts`.
    """
    if encoder is None:
        from indexer.encode.encoder import load_encoder

        encoder = load_encoder(config.model)
    return encode_documents(encoder, texts, config, progress=progress)[1]


def as_file(chunks: ChunkRows) -> bool:
    """Whether a batch keeps its vectors in a file of the store (`indexer.store.vector_files`):
    a cluster worker wrote them as one, or they are many (a full batch, an import)."""
    return isinstance(chunks.vectors, WorkerFiles) or len(chunks.doc_ids) >= VECTOR_FILE_MIN_ROWS


def commit_batch(plan: BatchPlan, chunks: ChunkRows, store: Store, run_id: str) -> BatchResult:
    """Write one planned batch and its vectors in one transaction."""
    batch = plan.batch
    to_encode = plan.to_encode
    chunks = ChunkRows(
        [to_encode[pos][0] for pos in chunks.doc_ids],
        chunks.ordinals,
        chunks.starts,
        chunks.ends,
        chunks.n_tokens,
        chunks.vectors,
    )
    added, removed = store.documents.write_batch(
        plan.collection,
        plan.new_rows,
        plan.changed_docs,
        plan.meta_updates,
        chunks,
        batch.rejected,
        run_id,
        as_file=as_file(chunks),
    )
    return BatchResult(
        read=len(batch.records) + len(batch.rejected),
        encoded=len(to_encode),
        skipped_unchanged=plan.skipped_unchanged,
        changed=len(plan.changed_docs) + len(plan.meta_updates),
        rejected=len(batch.rejected),
        chunks=len(added),
        added=array("q", added),
        removed=array("q", removed),
    )


def sync_vector_index(
    store: Store,
    config: Config,
    added,
    removed,
    base_version: int | None = None,
    force: bool = False,
    build: Callable | None = None,
) -> dict:
    """Bring the FAISS index in step with the store; publish it with the store's snapshot.

    The index records the store's `data_version` it reflects. Up to date: nothing is written.
    Updated (the removed ids deleted, the added vectors put in the delta; the new version
    writes only those and shares the current base file) only when the current index reflects
    `base_version`, the store's data_version when this run started, so that `added`/`removed`
    are exactly the difference, and the delta and deleted ids stay under their rebuild
    shares (`VectorIndex`); otherwise (first run, a run killed after committing batches, a
    spec that changed with size, another encoder, damage, `force`, a delta grown too large)
    it is rebuilt from the stored vectors, streamed batch by batch, into a new base. Nothing
    is re-encoded either way.

    A current index that reflects another data version than `base_version` (a run killed
    after committing batches, a store changed since; None: doctor's repair) is brought in
    step by its difference from the store's chunk ids instead (`_out_of_step`: chunk rows never
    change, so the ids tell what was added and removed): the cost of what changed, not a
    rebuild, while the difference fits the delta's and deleted ids' shares.

    Args:
        added, removed: chunk ids (any int sequence) added to / removed from the store.
        force: rebuild from the stored vectors whatever the current index holds
            (`bertindex doctor --repair`).
        build: makes a rebuild, `build(spec, provenance, index config, batches, count,
            spill=folder for rescoring vectors)` (None: `VectorIndex.build_from_batches`;
            `flows.cluster` builds IVF specs in shards on the workers).
    Returns:
        {"version", "spec", "ntotal", "rebuilt"}; version is None when nothing changed.
    """
    provenance = store.vectors.provenance()
    if provenance is None:
        return {"version": None, "spec": None, "ntotal": 0, "rebuilt": False}
    total = store.counts.chunks()
    data_version = store.data_version()
    spec = resolve_spec(config.index.spec, total, config.index, provenance.dim)
    current = None
    if not force:
        try:  # mapped: an update changes only the delta and the deleted ids, never the base
            current = VectorIndex.load(store.path, config.index, provenance, QUERY_KEYS)
        except (VectorIndexError, ProvenanceMismatch) as exc:
            log.warning("%s; rebuilding from the stored vectors", exc)
    query_encoder = export_for_index(store.path, config, provenance)
    if (
        current is not None
        and current.data_version == data_version
        and current.ntotal == total
        and (current.query_encoder == query_encoder or query_encoder is None)
    ):
        return {"version": None, "spec": current.spec, "ntotal": total, "rebuilt": False}
    added = np.unique(np.asarray(added, dtype=np.int64))
    removed = np.asarray(removed, dtype=np.int64)
    if current is not None and current.spec == spec:
        update = _updatable(current, store, total, added, removed, base_version)
        added, removed, incremental = update
    else:
        incremental = False
    with timed("vector_index"):
        if incremental and current is not None:
            index = _add_stored(current, store, added)
        else:
            index = rebuild_base(store, config, spec, provenance, build)
    if index.ntotal != total:
        raise VectorIndexError(
            f"index holds {index.ntotal} vectors but the store {store.path} has {total} chunks "
            "(chunks without a stored vector); run `bertindex doctor` to see which"
        )
    index.query_encoder = query_encoder
    version = _save(store, index, data_version, rebuilt=not incremental)
    info = {"version": version, "spec": spec, "ntotal": total, "rebuilt": not incremental}
    return info | short_of_target(index.tuning)


def _updatable(
    current: VectorIndex, store: Store, total: int, added, removed, base_version: int | None
) -> tuple[np.ndarray, np.ndarray, bool]:
    """(added, removed, whether `current` takes them as an update): the run's own when the
    index reflects `base_version`, else its difference from the store (`_out_of_step`);
    an update while the counts agree and the delta's and deleted ids' shares allow it
    (`current.remove` applies the removal when it does)."""
    if base_version is None or current.data_version != base_version:
        with timed("vector_index"):
            added, removed = _out_of_step(current, store)
    incremental = (
        current.ntotal + len(added) - len(removed) == total
        and current.takes(len(added))
        and current.remove(removed)
    )
    return added, removed, incremental


def _out_of_step(current: VectorIndex, store: Store) -> tuple[np.ndarray, np.ndarray]:
    """(stored chunk ids the index lacks, ids it holds the store lacks), both sorted: what
    an update must add and remove (about 3 s for 10M ids here)."""
    stored = store.vectors.chunk_ids()
    held = np.sort(current.ids())
    added = np.setdiff1d(stored, held, assume_unique=True)
    removed = np.setdiff1d(held, stored)
    if len(added) or len(removed):
        log.info(
            "index %s reflects data version %s: %d stored chunk(s) to add, %d to remove",
            current.version,
            current.data_version,
            len(added),
            len(removed),
        )
    return added, removed


def rebuild_base(
    store: Store,
    config: Config,
    spec: str,
    provenance,
    build: Callable | None = None,
    spill_to: Path | None = None,
):
    """A new base from the stored vectors, streamed batch by batch (`build` or here); it
    rescores from the store's vector files where they hold every vector (`store_rows`): the
    few vectors kept as rows (a run's short last batch) are moved into a file first. Built
    here, such a base never computes its rescoring stage (`store_rows.fill_first_pass`);
    a `build` (a cluster's shards) computes it and the base is written without it.
    `spill_to`: the store whose index folder takes the build's temporary files (`reindex`'s
    next generation spills beside the live store's bases; default `store`'s own)."""
    files = None
    if parse_spec(spec).refine is not None:
        store.vectors.move_rows_to_files()
        if build is None and store.vectors.all_in_files():
            files = (store.path, store.vectors.files())
    build = build or functools.partial(VectorIndex.build_from_batches, files=files)
    index = build(
        *(spec, provenance, config.index, store.vectors.iter_batches, store.vectors.count()),
        spill=bases_dir(spill_to or store.path),
        tune_queries=tune_queries(config),
    )
    index.row_files = store.vectors.files()
    return index


def tune_queries(config: Config) -> np.ndarray | None:
    """`index.tune_queries` read and encoded as a search encodes queries (at most
    `index.tune_sample` of them, a seeded draw); None when unset or the spec is not `auto`.

    Raises:
        ConfigError: the file is missing, unreadable, or holds no query.
    """
    where = config.index.tune_queries
    if not where or config.index.spec != "auto":
        return None
    path = Path(where)
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in lines if line]
            lines = [str(r.get("query") or r.get("text") or "") for r in rows]
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"index.tune_queries {path}: {exc}; give a file of example queries, one a line "
            "(.jsonl: a `query` or `text` field a line)"
        ) from None
    queries = [q for q in lines if q]
    if not queries:
        raise ConfigError(f"index.tune_queries {path} holds no query")
    if len(queries) > config.index.tune_sample:
        drawn = np.random.default_rng(0).choice(len(queries), config.index.tune_sample, False)
        queries = [queries[i] for i in sorted(drawn)]
    from indexer.encode.encoder import load_encoder

    return load_encoder(config.model).encode_queries(queries)


def _save(store: Store, index: VectorIndex, data_version: int, rebuilt: bool) -> str:
    """Publish `index` with the store's snapshot as a new version; a rebuilt base gets its
    span map (`indexer.index.span_file`), which readers map instead of reading every chunk,
    as does a base without one (written before it existed, or by a writer killed after the
    base): chunk rows never change, so the live map serves the base and the chunks since."""
    version = index.save(store.path, data_version, extra=store.write_snapshot)
    spans = spans_path(bases_dir(store.path) / index.base) if index.base is not None else None
    if spans is not None and (rebuilt or not spans.is_file()):
        write_spans(spans, store.vectors.chunk_span_map())
    collect_segments(store.path)  # the snapshot segments of versions gone and unread
    return version


def _add_stored(index: VectorIndex, store: Store, added: np.ndarray) -> VectorIndex:
    """Add the stored vectors of `added` to `index` (its delta), a batch at a time."""
    for start in range(0, len(added), _ADD_BATCH):
        part = added[start : start + _ADD_BATCH]
        index.add(store.vectors.fetch(part), part)
    return index


def short_of_target(tuning: dict | None) -> dict:
    """`recall_short` when `auto`'s tuning found no search parameter reaching the target
    recall (`indexer.index.auto.tune`): the summary and the CLI say so, not a log line only."""
    if not tuning or tuning.get("reached", True):
        return {}
    return {"recall_short": {k: tuning.get(k) for k in ("recall@10", "target", "param", "value")}}


_ADD_BATCH = 65536  # chunk ids whose vectors are fetched and added at once
