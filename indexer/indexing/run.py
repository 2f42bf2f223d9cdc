"""An index run without Prefect: read -> plan (new / changed / unchanged) -> encode -> commit
-> publish the indexes, batch by batch, with one writer; and a delete run.

The steps are plain functions (`Steps`); the Prefect flow `flows.index_corpus` passes its
tasks instead, to retry I/O and to encode on Dask workers. Does not import Prefect.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexer.config import Config
from indexer.core.faults import crash_point
from indexer.core.gc_policy import fewer_collections
from indexer.core.prefetch import prefetched
from indexer.core.progress import Progress, ProgressArg, as_mode
from indexer.core.stages import StageClock, in_context, running, timed, timed_iter
from indexer.encode.encoder import Encoder, load_encoder
from indexer.errors import ConfigError, ModelError, ProvenanceMismatch, StoreError
from indexer.index.keyword import sync_keyword_index
from indexer.index.version_files import named_row_files
from indexer.indexing.fusion_tune import is_due, tune_dense_weight
from indexer.indexing.imported import ImportedVectors, Split
from indexer.indexing.run_files import RunFiles, reading_settings
from indexer.indexing.steps import (
    BatchPlan,
    BatchResult,
    commit_batch,
    encode_texts_for_index,
    plan_batch,
    sync_vector_index,
)
from indexer.ingest.paths import expand_paths
from indexer.ingest.readers import Batch, FieldMap, Rejected
from indexer.store import COMPLETED_WITH_FAILURES, Store

log = logging.getLogger(__name__)

# Errors that concern the whole run, not one batch: they stop it.
_FATAL = (ProvenanceMismatch, ModelError, ConfigError)
_MAX_REJECTIONS = 100  # rejections listed in a run summary (all are in the `rejected` table)
# Batches with little to encode are held and sent together (`_IndexRun._merge`): until they
# have half a batch to encode, or hold this many batches' records.
MERGE_SHARE = 0.5
MERGE_BATCHES = 32
MERGE_CHARS = 32_000_000  # ... or this many characters of text: long documents stay few
# The stages a run summary times (`stages`, busy seconds each, plus `wall`): reading and
# parsing the files, sorting records into new/changed/unchanged, tokenizing and windowing,
# the forward pass, committing batches, the FAISS and keyword indexes, and the rest of the
# publish (the store snapshot, the index version, the query encoder export, tuning).
STAGES = (
    "read",
    "plan",
    "tokenize",
    "encode",
    "commit",
    "vector_index",
    "keyword_index",
    "publish",
)
_READ_AHEAD = 2  # batches the reader thread parses ahead of the writer
_ENCODE_AHEAD = 1  # batches encoding on the local encode thread while the writer commits


def load_model(config: Config) -> Encoder:
    """The configured encoder (cached per process).

    Args:
        config: the configuration (its `model` section).
    Returns:
        The loaded Encoder.
    """
    return load_encoder(config.model)


def delete_missing(store: Store, collection: str, seen: set[str]) -> tuple[list[str], list[int]]:
    """`on_missing: delete`: remove the collection's documents that no file holds any more.

    Args:
        store: the open store.
        collection: the collection.
        seen: every external id the run's files hold (read or rejected).
    Returns:
        (deleted external ids, removed chunk ids).
    """
    return store.documents.delete(collection, keep=sorted(seen))


def publish_indexes(
    store: Store,
    config: Config,
    added,
    removed,
    base_version: int | None = None,
    build: Callable | None = None,
) -> dict:
    """Bring the FAISS and keyword indexes in step with the store and publish them.

    Args:
        store: the open store.
        config: the configuration (`index` section).
        added, removed: chunk ids added to / removed from the store by this run.
        base_version: the store's data_version when the run started.
        build: how a rebuild is made (`sync_vector_index`; None: in this process).
    Returns:
        The vector index info (`sync_vector_index`) plus `keyword`, and `fusion` when the
        run tuned the hybrid weight (`indexer.indexing.fusion_tune`: before the publish, so
        the new version's snapshot carries it).
    """
    tuned = {}
    if is_due(store, config):
        record = tune_dense_weight(store, config, load_model(config))
        if record is not None:
            tuned = {
                "fusion": {
                    "dense_weight": record.dense_weight,
                    "queries": record.queries,
                    "seconds": record.seconds,
                }
            }
    vector = sync_vector_index(store, config, added, removed, base_version, build=build)
    with timed("keyword_index"):
        keyword = sync_keyword_index(store, config.keyword.language)
    return vector | {"keyword": keyword} | tuned


@dataclass
class Steps:
    """An index run's steps; the defaults are the plain functions.

    `submit` true: `encode(partition id, texts, config)` returns a future (a partition sent
    to a cluster worker, `flows.cluster`), resolved in order by the writer, with at most
    `in_flight` batches ahead; the partition id is the batch's file and rows
    (`BatchPlan.describe`), stable across runs.
    """

    load: Callable = load_model
    encode: Callable = encode_texts_for_index
    commit: Callable = commit_batch
    delete_missing: Callable = delete_missing
    write: Callable = publish_indexes
    submit: bool = False
    in_flight: int = 0


def run_index(
    paths: Sequence[str],
    config: Config,
    collection: str = "default",
    fmt: str = "auto",
    fields: FieldMap | None = None,
    batch_size: int = 2048,
    progress: ProgressArg = False,
    *,
    on_missing: str = "keep",
    strict: bool = False,
    steps: Steps | None = None,
    vectors: str | Path | None = None,
) -> dict:
    """Index corpus files into the configured store and return the run summary.

    Ids are unique within the run: the first record read with an id wins, later ones (same
    file or another) are rejected. With `config.roots.data`, files must resolve inside it.

    Args:
        paths: files or directories (`indexer.ingest.paths.expand_paths`).
        config: the validated configuration.
        collection: collection name; external ids are unique within it.
        fmt: a registered format name, or `auto` (by file name).
        fields: id/text/title/metadata column mapping (None: id, text, title, the rest).
        batch_size: records read a batch (a re-run's with few changes merged: `_merge`).
        progress: a progress mode (`indexer.core.progress`): "bar", an encoding bar per batch;
            "lines", a line every 30 s with documents done, rate and the file being read.
        on_missing: `delete` removes the collection's documents that no file holds any more.
        strict: a batch with any rejection commits only its rejections (listed under
            `refused_batches`).
        steps: the steps to run (None: the plain functions).
        vectors: a vector file (`indexer.ingest.vector_files`): the documents it names are
            stored with its vectors instead of being encoded (`indexer.indexing.imported`).
    Returns:
        The run summary: counts, `deleted`, `failed_batches`, `refused_batches`, the index
        info, the run id, the first rejections, and `vectors` with a vector file.
    Raises:
        InputError: a vector file of another model or dimension, before anything is written.
    """
    steps = steps or Steps()
    clock = StageClock(STAGES)
    files, refused_files = expand_paths(paths, config.roots.data)
    fields = fields or FieldMap()
    encoder = steps.load(config)
    with running(clock), timed("read"):  # the vector file, whole, before any batch
        imported = _open_vectors(vectors, encoder, config)
    with (
        running(clock),
        Store(Path(config.store.path)) as store,
        store.runs.recorded_run("index") as run,
        _IndexRun(
            store,
            config,
            collection,
            steps,
            encoder,
            run.id,
            as_mode(progress),
            seen=set() if on_missing == "delete" else None,
            imported=imported,
            clock=clock,
            batch_size=batch_size,  # and a re-run's batches of few changes are merged
        ) as job,
    ):
        settings = reading_settings(fmt, fields, config)  # unchanged files are not read:
        sources = RunFiles.of(store, collection, files, settings, on_missing, imported)
        reads = sources.batches(files, refused_files, fmt, fields, batch_size, config, job.run_bar)
        try:
            index_info = job.index(reads, strict)
        except BaseException:  # recorded as failed
            run.summary = job.so_far()
            raise
        summary = job.finish(files, index_info, sources)
        crash_point("run.before_record")
        run.summary = summary
        if job.failed or job.refused:
            run.status = COMPLETED_WITH_FAILURES
    return summary


def _open_vectors(vectors: str | Path | None, encoder, config: Config) -> ImportedVectors | None:
    """The run's vector file, its header checked against the encoder and its vectors being
    read on a thread while the first corpus batches are (None: no file)."""
    if not vectors:
        return None
    return ImportedVectors.opening(vectors, encoder.provenance, config.model)


class _IndexRun:
    """One index run's writer side: batches planned and sent to encode, settled in order
    (committed, or reported as failed while the rest goes on), and what the summary counts.

    With `steps.submit`, up to `steps.in_flight` batches are encoding ahead of the writer;
    otherwise one batch encodes on a local thread while the writer commits the one before
    (tokenizers and torch let go of the GIL). A batch holding an id that a batch not yet
    settled holds waits until they are settled."""

    def __init__(
        self,
        store: Store,
        config: Config,
        collection: str,
        steps: Steps,
        encoder,
        run_id: str,
        mode: str,
        seen: set[str] | None,
        imported: ImportedVectors | None = None,
        clock: StageClock | None = None,
        batch_size: int = 2048,
    ):
        self.store, self.config, self.collection = store, config, collection
        self.steps, self.encoder, self.run_id = steps, encoder, run_id
        # vector files a killed run left unrecorded, and those whose chunks are all gone
        self.collected_files = store.vectors.collect_files(named_row_files(store.path))
        self.encode_progress = mode if mode == "bar" else "off"  # lines: one reporter a run
        self.run_bar = Progress(None, "indexing", "doc", "lines" if mode == "lines" else "off")
        self.seen = seen  # on_missing: delete: every id the files hold
        self.imported = imported
        self.clock = clock or StageClock(STAGES)
        self.total = BatchResult()
        self.rejected_rows: list = []
        self.failed: list[dict] = []
        self.refused: list[dict] = []
        self.refused_records = 0
        self.failed_sources: set[str] = set()  # files with a failed or refused batch
        self.sources_error: str | None = None  # why the files read were not recorded
        self.deleted: list[str] = []
        self.delete_skipped: str | None = None
        self.pending: deque[tuple[BatchPlan, Any, Split | None]] = deque()
        self.pending_ids: set[str] = set()
        self.ahead = steps.in_flight if steps.submit else _ENCODE_AHEAD
        self.batch_size = batch_size
        self.held: BatchPlan | None = None  # planned, waiting for more to encode (`_merge`)
        self.held_chars = 0  # characters of the records held
        self.stored_up_to = store.documents.last_doc_id()  # what a batch may find stored
        self.worker = None if steps.submit else ThreadPoolExecutor(1, thread_name_prefix="encode")

    def __enter__(self) -> _IndexRun:
        return self

    def __exit__(self, *exc) -> None:
        if self.worker is not None:  # a batch still encoding (the run failed) is let finish
            self.worker.shutdown(wait=True, cancel_futures=True)

    def add(self, batch: Batch, strict: bool) -> None:
        """Plan `batch` and send it to encode; settle what is due."""
        self._note_seen(batch)
        if self.imported is not None:
            self.imported.note(batch)  # before --strict drops its records: they were read
        if strict and batch.rejected:  # commit the rejections, not the documents
            self.refused.append(
                {
                    "batch": BatchPlan(batch, self.collection, [], [], [], 0, []).describe(),
                    "records": len(batch.records),
                    "rejected": len(batch.rejected),
                    "first_reason": batch.rejected[0].reason,
                }
            )
            self.refused_records += len(batch.records)
            self.failed_sources.update(_sources_of(batch))
            batch = Batch(rejected=batch.rejected)
        ids = [r.external_id for r in batch.records]
        if self.pending_ids.intersection(ids):  # same id in a batch not yet written
            self.drain()
        with timed("plan"):
            plan = plan_batch(batch, self.store, self.collection, self.stored_up_to)
            split, texts = None, plan.texts
            if self.imported is not None:
                split = self.imported.split(plan)
                texts = [plan.texts[p] for p in split.rest]
        self.pending_ids.update(ids)
        if split is None:  # held until it has enough to encode (`_merge`)
            merged = self._merge(plan)
            if merged is None:
                return
            plan, texts = merged, merged.texts
        self._send(plan, texts, split)

    def _merge(self, plan: BatchPlan) -> BatchPlan | None:
        """`plan` after those held (`held`), once together they have `MERGE_SHARE` of a batch
        to encode, `MERGE_BATCHES` batches' records or `MERGE_CHARS` characters of text; None:
        held for the next.

        A re-run of a corpus with 1 % changed planned ~20 documents to encode a batch of 2,048,
        and each such batch cost an encode and a commit (a transaction on the store, a vector
        file) as a full one does: at 10M, 4,900 commits of ~20 documents, 330 busy seconds of a
        656 s re-run. Held together, they are encoded and committed ~2,048 at a time. A batch
        of new documents (a first run) is sent as it comes. Batches held together that fail are
        tried again one by one (`_one_by_one`): a failure names its own batch, and the others
        are stored."""
        self.held = held = plan if self.held is None else self.held.then(plan)
        records = len(held.batch.records) + len(held.batch.rejected)
        self.held_chars += sum(len(r.text) for r in plan.batch.records)
        if (
            len(held.to_encode) < MERGE_SHARE * self.batch_size
            and len(held.meta_updates) < self.batch_size
            and records < MERGE_BATCHES * self.batch_size
            and self.held_chars < MERGE_CHARS
        ):
            return None
        return self._release()

    def _release(self) -> BatchPlan | None:
        """The batches held (`_merge`), no longer held."""
        held, self.held, self.held_chars = self.held, None, 0
        return held

    def _send(self, plan: BatchPlan, texts: list[str], split: Split | None) -> None:
        """Send `plan` to encode, then settle what is due."""
        try:
            future = self._encode(plan, texts) if texts or split is None else None
        except _FATAL:
            raise
        except Exception as exc:  # noqa: BLE001  (one batch: report, go on)
            self.pending_ids.difference_update(r.external_id for r in plan.batch.records)
            self._fail(plan, exc)
            return
        self.pending.append((plan, future, split))
        while len(self.pending) > self.ahead:
            self._settle_oldest()

    @fewer_collections()  # the cycle collector held back (indexer/core/gc_policy.py)
    def index(self, reads: Iterator[Batch], strict: bool) -> dict:
        """Add and settle every batch `reads` yields (read on a thread ahead), delete what the
        files no longer hold (`on_missing: delete`), publish the indexes; their info."""
        base_version = self.store.data_version()  # what the index may be updated from
        self.store.vectors.set_provenance(self.encoder.provenance)
        with prefetched(timed_iter("read", reads), _READ_AHEAD, "reader") as batches:
            for batch in batches:
                self.add(batch, strict)
        del reads, batches  # every file is read: free the run's ids before the index step
        if self.imported is not None:  # every file read: the vector rows no document took
            self.add(Batch(rejected=self.imported.unmatched()), strict)
        self.drain()
        with timed("commit"):
            removed = self.delete_missing()
        with timed("publish"):
            info = self.steps.write(
                self.store, self.config, self.total.added, removed, base_version
            )
            # files whose chunks this run changed or deleted, all of them, unless a kept
            # version's base rescores from them (readers read no other stored embedding)
            keep = named_row_files(self.store.path)
            emptied = self.store.vectors.collect_files(keep)["emptied"]
            self.collected_files["emptied"] += emptied
        return info

    def _encode(self, plan: BatchPlan, texts: list[str]) -> Any:
        """A future of the batch's chunks: a cluster's (`steps.submit`), or the local
        encode thread's."""
        if self.steps.submit:
            return self.steps.encode(plan.describe(), texts, self.config)
        assert self.worker is not None
        encode = in_context(self.steps.encode)
        return self.worker.submit(encode, texts, self.config, self.encoder, self.encode_progress)

    def drain(self) -> None:
        """Send the batches held (`_merge`), then settle every batch still encoding."""
        if (held := self._release()) is not None:
            self._send(held, held.texts, None)
        while self.pending:
            self._settle_oldest()

    def _note_seen(self, batch: Batch) -> None:
        if self.seen is None:
            return
        self.seen.update(r.external_id for r in batch.records)
        self.seen.update(r.external_id for r in batch.rejected if r.external_id)
        no_id = next((r for r in batch.rejected if r.external_id is None), None)
        if self.delete_skipped is None and no_id is not None:
            self.delete_skipped = f"{no_id.source} row {no_id.row} has no readable id"

    def _settle_oldest(self) -> None:
        plan, future, split = self.pending.popleft()
        self.pending_ids.difference_update(r.external_id for r in plan.batch.records)
        self._settle(plan, future, split)

    def _settle(self, plan: BatchPlan, future: Any, split: Split | None) -> None:
        """Commit `plan` once `future` gives its chunks; a failure is reported and the run goes
        on (batches held together, `_merge`, are first tried one by one)."""
        try:
            chunks = future.result() if future is not None else None
            if split is not None:
                chunks = split.join(plan, chunks)
            with timed("commit"):
                self.total.merge(self.steps.commit(plan, chunks, self.store, self.run_id))
            if self.imported is not None and split is not None:
                self.imported.imported += len(split.taken)
            self.run_bar.update(len(plan.batch.records))
            room = max(0, _MAX_REJECTIONS - len(self.rejected_rows))
            self.rejected_rows.extend(plan.batch.rejected[:room])
        except _FATAL:
            raise
        except Exception as exc:  # noqa: BLE001  (the flow's commit retried: report, go on)
            self._fail(plan, exc)

    def _one_by_one(self, parts: list[BatchPlan]) -> None:
        """The batches of a merge that failed, each encoded and committed alone: only those
        that fail again are reported."""
        log.warning("%d batches held together failed; trying them one by one", len(parts))
        for part in parts:
            try:
                future = self._encode(part, part.texts)
            except _FATAL:
                raise
            except Exception as exc:  # noqa: BLE001  (one batch: report, go on)
                self._fail(part, exc)
                continue
            self._settle(part, future, None)

    def _fail(self, plan: BatchPlan, exc: Exception) -> None:
        if plan.parts:
            self._one_by_one(plan.parts)
            return
        log.error("batch %s failed: %s", plan.describe(), exc)
        self.failed_sources.update(_sources_of(plan.batch))
        self.failed.append({"batch": plan.describe(), "error": repr(exc)[:500]})

    def delete_missing(self) -> list[int]:
        """All files read: with on_missing delete, remove what no file holds any more.

        Returns:
            The chunk ids this run removed (changed documents' old chunks, deleted ones').
        """
        self.run_bar.close()
        removed = list(self.total.removed)
        if self.seen and self.delete_skipped:
            log.warning(
                "on_missing: delete skipped: %s, so the documents it held cannot "
                "be told apart from deleted ones; fix the input and run again",
                self.delete_skipped,
            )
        elif self.seen:
            self.deleted, gone = self.steps.delete_missing(self.store, self.collection, self.seen)
            removed += gone
        elif self.seen is not None:
            log.warning(
                "on_missing: delete skipped: the files held no documents, and "
                "that would empty collection %s",
                self.collection,
            )
        return removed

    def finish(self, files: list[Path], index_info: dict, sources: RunFiles) -> dict:
        """Record the files read whole (`record_sources`), take the rejections of those
        skipped as this run's; the run's summary."""
        self.record_sources(sources)
        for name, skipped in sources.unchanged.items():
            room = _MAX_REJECTIONS - len(self.rejected_rows)
            carried = self.store.sources.carry_rejections(
                self.collection, skipped, name, self.run_id, room
            )
            self.rejected_rows.extend(Rejected(*row) for row in carried)
        return self.summary(files, index_info, sources)

    def record_sources(self, sources: RunFiles) -> None:
        """Record the files this run read whole; a run that changed stored documents keeps
        only its own files' records (`indexer.store.sources`)."""
        done = sources.to_record(self.failed_sources)
        if not sources.enabled or not (done or self.total.changed):
            return
        kept = [f.state.path for f in [*sources.unchanged.values(), *done]]
        try:  # a shortcut for the next run: never worth failing this one for
            self.store.sources.record(
                self.collection, done, self.run_id, keep=kept if self.total.changed else None
            )
        except StoreError as exc:
            log.warning("files read whole were not recorded (the next run reads them): %s", exc)
            self.sources_error = str(exc)[:300]

    def so_far(self) -> dict:
        """What a failed run records: the counts, the failed batches, the stages' seconds."""
        return self.total.summary() | {
            "failed_batches": self.failed,
            "stages": self.clock.summary(),
        }

    def summary(self, files: list[Path], index_info: dict, sources: RunFiles) -> dict:
        skipped = self.seen and self.delete_skipped
        counts = self.total.summary()
        # a file skipped whole counts as read: its documents unchanged, its rejections again
        for unchanged in sources.unchanged.values():
            counts["skipped_unchanged"] += unchanged.records
            counts["rejected"] += unchanged.rejected
            counts["read"] += unchanged.records + unchanged.rejected
        return counts | {
            "unchanged_files": len(sources.unchanged),
            **({"files_not_recorded": self.sources_error} if self.sources_error else {}),
            "stages": self.clock.summary(),
            "read": counts["read"] + self.refused_records,
            "deleted": len(self.deleted),
            "failed_batches": self.failed,
            "refused_batches": self.refused,
            "collection": self.collection,
            "files": [str(p) for p in files],
            "index": index_info,
            "run_id": self.run_id,
            **({"delete_skipped": self.delete_skipped} if skipped else {}),
            **({"vectors": self.imported.summary()} if self.imported else {}),
            "rejections": [
                {"source": r.source, "row": r.row, "id": r.external_id, "reason": r.reason}
                for r in self.rejected_rows[:_MAX_REJECTIONS]
            ],
        }


def _sources_of(batch: Batch) -> set[str]:
    return {r.source for r in batch.records} | {r.source for r in batch.rejected}


def run_delete(config: Config, collection: str, external_ids: list[str]) -> dict:
    """Delete documents from the store, then publish indexes without them.

    Args:
        config: the configuration.
        collection: the collection holding the documents.
        external_ids: the documents' ids.
    Returns:
        {"collection", "deleted", "not_found", "chunks_removed", "index", "run_id"}.
    """
    with Store(Path(config.store.path)) as store, store.runs.recorded_run("delete") as run:
        base = store.data_version()
        deleted, removed = store.documents.delete(collection, external_ids=external_ids)
        index_info = publish_indexes(store, config, [], removed, base)
        gone = set(deleted)
        summary = {
            "collection": collection,
            "deleted": deleted,
            "not_found": sorted({i for i in external_ids if i not in gone}),
            "chunks_removed": len(removed),
            "index": index_info,
            "run_id": run.id,
        }
        run.summary = summary
    return summary
