"""Re-encode a whole store with another encoder into a new generation beside the live one, then
switch atomically; or, with the same encoder, rebuild the FAISS index from the stored vectors.
A same-encoder reindex of a store that keeps its vectors as rows of store.duckdb (indexed
before vector files; more of them than index runs move: `Vectors.rows_left_in_place`)
copies it into a new generation instead, chunks and vectors as they are, nothing encoded
(mode `rewrite`): afterwards its vectors are kept once, in files, and store.duckdb holds no
vector. The way to bring an old store to the layout of new ones; it needs the disk of one
more copy of the vectors until the switch, as an encoder change does.

Layout while it runs: `<store>/generations/next/` is a complete store (same documents and doc
ids, new vectors). The switch publishes its index and snapshot as a new `index/vN`, replaces
`store.duckdb` with the new file and points `index/CURRENT` at vN, under the store's writer
lock. Searches read the old version until CURRENT moves. A killed reindex resumes: documents
already encoded in the new generation (same doc id and content hash) are kept.

Vectors: the generation's full batches keep theirs in files, as an index run's do, written
straight into the live store's `vectors/` (the generation's folder is a link to it:
`vector_files.share_with_generation`), so the switch renames one file and the new base
rescores from those files instead of codes of its own (one copy of the vectors on disk, as
after `bertindex index`). Until the switch the live store leaves them alone; after it, the
old generation's files are collected by the next run once no kept version's base reads them.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from indexer.config import Config
from indexer.core.faults import crash_point
from indexer.core.fsio import fsync_dir
from indexer.core.progress import ProgressArg
from indexer.encode.encoder import Encoder
from indexer.encode.onnx_export import export_for_index
from indexer.index.vector import remove_old_versions, resolve_spec
from indexer.indexing.steps import as_file, encode_texts_for_index, rebuild_base, sync_vector_index
from indexer.ingest.readers import document_text
from indexer.records.provenance import WRITE_KEYS, Provenance
from indexer.records.versions import write_pointer
from indexer.store import (
    DB_NAME,
    NEXT_GENERATION,
    ChunkRows,
    Store,
    WriterLock,
    collect_segments,
    share_with_generation,
)

log = logging.getLogger(__name__)


def reindex_store(
    config: Config, encoder: Encoder, batch_size: int = 2048, progress: ProgressArg = False
) -> dict:
    """Bring the store to `encoder`: a new generation when the encoder differs, else an index
    rebuilt from the stored vectors (a store with its vectors as rows: a new generation they
    are copied into, `Vectors.rows_left_in_place`).

    Returns:
        {"mode": "new_generation" | "rewrite" | "rebuild", "documents", "encoded",
        "index": sync info}.
    """
    path = Path(config.store.path)
    lock = WriterLock(path)  # held until the switch is complete
    try:
        with Store(path, lock=False) as live:
            stored = live.vectors.provenance()
            same = stored is None or not stored.mismatches(encoder.provenance, WRITE_KEYS)
            if same and not live.vectors.rows_left_in_place():
                shutil.rmtree(path / NEXT_GENERATION, ignore_errors=True)  # an earlier switch
                info = _rebuild(live, config)
                return {
                    "mode": "rebuild",
                    "documents": live.counts.documents(),
                    "encoded": 0,
                    "index": info,
                }
            version, documents, encoded, index_info = _build_generation(
                live, config, encoder, batch_size, progress, copy_as=stored if same else None
            )
        _switch(path, version)
        return {
            "mode": "rewrite" if same else "new_generation",
            "documents": documents,
            "encoded": encoded,
            "index": index_info | {"version": version},
        }
    finally:
        lock.release()


def _rebuild(store: Store, config: Config) -> dict:
    return sync_vector_index(store, config, [], [], force=True)


def _build_generation(
    live: Store,
    config: Config,
    encoder: Encoder,
    batch_size: int,
    progress: ProgressArg,
    copy_as: Provenance | None = None,
) -> tuple[str, int, int, dict]:
    """Encode every live document into the next generation (`copy_as`: the live store's
    provenance, its chunks and vectors copied instead, the same encoder's); publish (not
    switch) its index."""
    gen_path = live.path / NEXT_GENERATION
    live_hashes = live.reads.document_hashes()
    encoded = 0
    copy = copy_as is not None
    provenance = copy_as or encoder.provenance
    _drop_other_generation(gen_path, provenance)
    share_with_generation(live.path, gen_path)
    with Store(gen_path, lock=False) as gen:
        with gen.runs.recorded_run("reindex") as run:
            gen.vectors.set_provenance(provenance)
            have = gen.reads.document_hashes()
            stale = [d for d, h in have.items() if live_hashes.get(d) != h]
            gen.documents.delete_doc_ids(
                stale
            )  # changed or deleted in the live store since a killed run
            done = set(have) - set(stale)
            for collection, rows in live.documents.iter_documents(batch_size, exclude=done):
                if copy:
                    chunks = live.vectors.chunk_rows([d for d, _, _ in rows])
                else:
                    chunks = _encoded(rows, config, encoder, progress)
                    encoded += len(rows)
                gen.documents.write_batch(  # a rewrite's every batch: not one row left
                    collection, rows, [], [], chunks, [], run.id, as_file=copy or as_file(chunks)
                )
            gen.documents.restart_doc_ids_after(max(live_hashes, default=0))
            gen.side.copy_from(
                live.side
            )  # annotations, runs, rejects: same doc ids, kept as they are
            # chunk ids need not match the live store's: FAISS is rebuilt from these vectors
            count = gen.vectors.count()
            spec = resolve_spec(config.index.spec, count, config.index, provenance.dim)
            index = rebuild_base(gen, config, spec, provenance, spill_to=live.path)
            run.summary = {"encoded": encoded, "documents": len(live_hashes), "copied": copy}
        index.query_encoder = export_for_index(live.path, config, provenance, encoder)
        version = index.save(live.path, gen.data_version(), extra=gen.write_snapshot, switch=False)
        info = {"spec": spec, "ntotal": index.ntotal, "rebuilt": True}
    return version, len(live_hashes), encoded, info


def _encoded(rows: list, config: Config, encoder: Encoder, progress: ProgressArg) -> ChunkRows:
    """The chunks of `rows` (`iter_documents`' (doc id, record, hash)) encoded, by doc id."""
    chunks = encode_texts_for_index(
        [document_text(r) for _, r, _ in rows], config, encoder, progress=progress
    )
    return ChunkRows(
        [rows[p][0] for p in chunks.doc_ids],
        chunks.ordinals,
        chunks.starts,
        chunks.ends,
        chunks.n_tokens,
        chunks.vectors,
    )


def _drop_other_generation(gen_path: Path, provenance: Provenance) -> None:
    """Remove a generation a killed reindex left for another encoder set-up (a rewrite
    killed, then a reindex to a new model): its vectors cannot be resumed into this one."""
    if not (gen_path / DB_NAME).is_file():
        return
    with Store(gen_path, read_only=True, snapshot=False, lock=False) as gen:
        stored = gen.vectors.provenance()
    if stored is not None and stored.mismatches(provenance, WRITE_KEYS):
        log.info("reindex: a generation for another encoder set-up is started again")
        shutil.rmtree(gen_path, ignore_errors=True)


def _switch(path: Path, version: str) -> None:
    """Replace the live store file by the new generation's, then point CURRENT at `version`.

    Runs under the writer lock with no connection open. Killed between the two steps, the
    store file is new and CURRENT still names the old version: searches stay consistent on
    the old one, and the next index run or reindex rebuilds the index for the new vectors.
    """
    gen_db = path / NEXT_GENERATION / DB_NAME
    crash_point("reindex.before_swap")
    for wal in (path / f"{DB_NAME}.wal",):
        if wal.exists():  # closed cleanly there is none; a stale one must not be replayed
            wal.unlink()
    os.replace(gen_db, path / DB_NAME)
    fsync_dir(path)
    crash_point("reindex.before_pointer")
    write_pointer(path, version)
    remove_old_versions(path)
    collect_segments(path)
    shutil.rmtree(path / NEXT_GENERATION.parent, ignore_errors=True)
