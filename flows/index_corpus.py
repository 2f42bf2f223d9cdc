"""Prefect flow `index_corpus`: read -> plan (new / changed / unchanged) -> encode -> commit ->
index, batch by batch, with one writer.

Encoding is a pure task: with `runner: dask` it runs on Dask workers (a few batches ahead of the
writer) while this process alone writes to the store. Commits and index writes touch I/O and
retry; a batch that still fails is reported in the summary and the others go on.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NONE

import flows  # noqa: F401  (Prefect settings first)
from indexer.config import Config, SourceConfig
from indexer.encode.encoder import load_encoder
from indexer.errors import ConfigError, ModelError, ProvenanceMismatch
from indexer.faults import crash_point
from indexer.index.keyword import sync_keyword_index
from indexer.ingest.paths import expand_within
from indexer.ingest.pipeline import (
    BatchPlan,
    BatchResult,
    commit_batch,
    encode_texts_for_index,
    plan_batch,
    sync_vector_index,
)
from indexer.ingest.readers import Batch, FieldMap, IdRegistry, read_batches
from indexer.store import ChunkRows, Store

log = logging.getLogger(__name__)

# Errors that concern the whole run, not one batch: they stop it.
_FATAL = (ProvenanceMismatch, ModelError, ConfigError)


@task(cache_policy=NONE)
def load_model(config: Config):
    return load_encoder(config.model)


@task(cache_policy=NONE)
def encode_batch(texts: list[str], config: Config, encoder=None, progress: bool = False) -> ChunkRows:
    """Window and encode one batch's texts (no I/O; on a Dask worker with `runner: dask`,
    which loads the configured encoder once per worker process)."""
    return encode_texts_for_index(texts, config, encoder, progress=progress)


@task(cache_policy=NONE, retries=2, retry_delay_seconds=1)
def commit(plan: BatchPlan, chunks: ChunkRows, store: Store, run_id: str) -> BatchResult:
    return commit_batch(plan, chunks, store, run_id)


@task(cache_policy=NONE, retries=2, retry_delay_seconds=1)
def delete_missing(store: Store, collection: str, seen: set[str]) -> tuple[list[str], list[int]]:
    """`on_missing: delete`: remove the collection's documents that no file holds any more."""
    return store.delete_documents(collection, keep=sorted(seen))


@task(cache_policy=NONE, retries=2, retry_delay_seconds=1)
def write_index(store, config, added, removed, base_version=None) -> dict:
    return sync_vector_index(store, config, added, removed, base_version) | {
        "keyword": sync_keyword_index(store)}


@dataclass
class Steps:
    """The flow's steps: Prefect tasks inside the flow, their plain functions outside it.

    `submit` true: `encode` is a task submitted to the flow's task runner (Dask); its futures
    are resolved in order by the writer.
    """

    load: Callable = load_model.fn
    encode: Callable = encode_batch.fn
    commit: Callable = commit.fn
    delete_missing: Callable = delete_missing.fn
    write: Callable = write_index.fn
    submit: bool = False
    in_flight: int = 0


@flow(name="index_corpus", log_prints=False)
def index_corpus(
    paths: list[str],
    config: Config,
    collection: str = "default",
    fmt: str = "auto",
    fields: FieldMap | None = None,
    batch_size: int = 2048,
    progress: bool = False,
    on_missing: str = "keep",
    strict: bool = False,
) -> dict:
    """Index corpus files into the configured store and return the run summary.

    Args:
        paths: files or directories (JSONL, Parquet, CSV, BEIR corpus).
        config: validated configuration (`runner: dask` encodes on the Dask cluster).
        collection: collection name; external ids are unique within it.
        fmt: file format or `auto`.
        fields: id/text/title/metadata column mapping (None: id, text, title, the rest as metadata).
        on_missing: `delete` removes the collection's documents that no file holds any more.
        strict: a batch with any rejected record commits only its rejections (listed under
            `refused_batches`); the CLI then exits 1.
    """
    distributed = config.runner == "dask"
    steps = Steps(load=load_model, encode=encode_batch.submit if distributed else encode_batch,
                  commit=commit, delete_missing=delete_missing, write=write_index,
                  submit=distributed, in_flight=config.dask.in_flight if distributed else 0)
    return run_index(paths, config, collection, fmt, fields, batch_size, progress,
                     on_missing=on_missing, strict=strict, steps=steps)


def flow_for(config: Config):
    """`index_corpus` with the task runner `config.runner` asks for."""
    if config.runner == "local":
        return index_corpus
    try:
        from prefect_dask import DaskTaskRunner
    except ImportError:
        raise ConfigError("runner: dask needs the distributed extra: "
                          "pip install 'bertindex[distributed]'") from None
    if config.dask.address:
        runner = DaskTaskRunner(address=config.dask.address)
    else:
        runner = DaskTaskRunner(cluster_kwargs={"processes": True})
    return index_corpus.with_options(task_runner=runner)


def index_source(config: Config, source: SourceConfig, progress: bool = False) -> dict:
    """Index one configured source (`sources:` in config.yaml) with the configured runner."""
    fields = FieldMap(id_field=source.fields.id, text_field=source.fields.text,
                      title_field=source.fields.title,
                      metadata_fields=tuple(source.fields.metadata)
                      if source.fields.metadata is not None else None)
    return flow_for(config)(source.paths, config, source.collection, source.format, fields,
                            source.batch_size, progress, source.on_missing, source.strict)


def run_index(paths, config, collection="default", fmt="auto", fields: FieldMap | None = None,
              batch_size=2048, progress=False, *, on_missing="keep", strict=False,
              steps: Steps | None = None) -> dict:
    """The flow's story, also callable without Prefect (steps default to plain functions).

    Ids are unique within the run: the first record read with an id wins, later ones (same
    file or another) are rejected. With `config.roots.data`, files must resolve inside it.
    `strict`: a batch with any rejection commits only its rejections (no documents).

    Returns:
        The run summary: counts, `deleted`, `failed_batches`, `refused_batches`, the index
        info, the run id.
    """
    steps = steps or Steps()
    fields = fields or FieldMap()
    files, refused_files = expand_within(paths, config.roots.data)
    id_registry = IdRegistry()
    started = datetime.now(timezone.utc).replace(tzinfo=None)
    run_id = uuid.uuid4().hex[:12]
    encoder = steps.load(config)
    total = BatchResult()
    rejected_rows, failed, deleted, refused = [], [], [], []
    refused_records = 0
    delete_skipped: str | None = None
    seen: set[str] | None = set() if on_missing == "delete" else None
    with Store(Path(config.store.path)) as store:
        store.start_run(run_id, "index", started)
        base_version = store.data_version()
        try:
            store.set_provenance(encoder.provenance)
            pending: deque[tuple[BatchPlan, Any]] = deque()
            pending_ids: set[str] = set()

            def settle_oldest() -> None:
                plan, future = pending.popleft()
                pending_ids.difference_update(r.external_id for r in plan.batch.records)
                try:
                    chunks = future.result() if steps.submit else future
                    total.merge(steps.commit(plan, chunks, store, run_id))
                    rejected_rows.extend(plan.batch.rejected[:max(0, 100 - len(rejected_rows))])
                except _FATAL:
                    raise
                except Exception as exc:  # noqa: BLE001  (retried by the task: report, go on)
                    log.error("batch %s failed: %s", plan.describe(), exc)
                    failed.append({"batch": plan.describe(), "error": repr(exc)[:500]})

            def batches():
                if refused_files:  # files outside roots.data: recorded, never read
                    yield Batch(rejected=list(refused_files))
                for path in files:
                    yield from read_batches(path, fmt, fields, batch_size, ids=id_registry,
                                            max_chars=config.long_documents.max_chars)

            for batch in batches():
                if seen is not None:
                    seen.update(r.external_id for r in batch.records)
                    seen.update(r.external_id for r in batch.rejected if r.external_id)
                    no_id = next((r for r in batch.rejected if r.external_id is None), None)
                    if delete_skipped is None and no_id is not None:
                        delete_skipped = f"{no_id.source} row {no_id.row} has no readable id"
                if strict and batch.rejected:  # commit the rejections, not the documents
                    refused.append({"batch": BatchPlan(batch, collection, [], [], [], 0,
                                                       []).describe(),
                                    "records": len(batch.records),
                                    "rejected": len(batch.rejected),
                                    "first_reason": batch.rejected[0].reason})
                    refused_records += len(batch.records)
                    batch = Batch(rejected=batch.rejected)
                ids = [r.external_id for r in batch.records]
                if pending_ids.intersection(ids):  # same id in a batch not yet written
                    while pending:
                        settle_oldest()
                plan = plan_batch(batch, store, collection)
                try:
                    if steps.submit:
                        future = steps.encode(plan.texts, config, None, False)
                    else:
                        future = steps.encode(plan.texts, config, encoder, progress)
                except _FATAL:
                    raise
                except Exception as exc:  # noqa: BLE001  (one batch: report, go on)
                    log.error("batch %s failed: %s", plan.describe(), exc)
                    failed.append({"batch": plan.describe(), "error": repr(exc)[:500]})
                    continue
                pending.append((plan, future))
                pending_ids.update(ids)
                while len(pending) > steps.in_flight:
                    settle_oldest()
            while pending:
                settle_oldest()
            id_registry = None  # every file is read: free the run's ids before the index step
            removed = list(total.removed)
            if seen and delete_skipped:
                log.warning("on_missing: delete skipped: %s, so the documents it held cannot "
                            "be told apart from deleted ones; fix the input and run again",
                            delete_skipped)
            elif seen:
                deleted, gone = steps.delete_missing(store, collection, seen)
                removed += gone
            elif seen is not None:
                log.warning("on_missing: delete skipped: the files held no documents, and "
                            "that would empty collection %s", collection)
            index_info = steps.write(store, config, total.added, removed, base_version)
        except BaseException as exc:
            store.record_run(run_id, "index", started, f"failed: {exc!r}"[:500],
                             total.summary() | {"failed_batches": failed})
            raise
        summary = total.summary() | {
            "read": total.read + refused_records,
            "deleted": len(deleted),
            "failed_batches": failed,
            "refused_batches": refused,
            "collection": collection,
            "files": [str(p) for p in files],
            "index": index_info,
            "run_id": run_id,
            **({"delete_skipped": delete_skipped} if seen and delete_skipped else {}),
            "rejections": [
                {"source": r.source, "row": r.row, "id": r.external_id, "reason": r.reason}
                for r in rejected_rows[:100]
            ],
        }
        crash_point("run.before_record")
        store.record_run(run_id, "index", started,
                         "completed" if not failed and not refused else "completed_with_failures",
                         summary)
    return summary


def run_delete(config: Config, collection: str, external_ids: list[str]) -> dict:
    """Delete documents from the store, then publish indexes without them (no Prefect).

    Returns:
        {"collection", "deleted", "not_found", "chunks_removed", "index"}.
    """
    started = datetime.now(timezone.utc).replace(tzinfo=None)
    run_id = uuid.uuid4().hex[:12]
    with Store(Path(config.store.path)) as store:
        store.start_run(run_id, "delete", started)
        base = store.data_version()
        deleted, removed = store.delete_documents(collection, external_ids=external_ids)
        index_info = write_index.fn(store, config, [], removed, base)
        gone = set(deleted)
        summary = {"collection": collection, "deleted": deleted,
                   "not_found": sorted({i for i in external_ids if i not in gone}),
                   "chunks_removed": len(removed), "index": index_info, "run_id": run_id}
        store.record_run(run_id, "delete", started, "completed", summary)
    return summary

