"""Prefect flow `index_corpus`: read -> encode -> store -> index, batch by batch."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NONE

import flows  # noqa: F401  (Prefect settings first)
from indexer.config import Config
from indexer.encoder import load_encoder
from indexer.keyword_index import sync_keyword_index
from indexer.pipeline import BatchResult, index_batch, sync_vector_index
from indexer.readers import FieldMap, expand_paths, read_batches
from indexer.store import Store


@task(cache_policy=NONE)
def load_model(config: Config):
    return load_encoder(config.model)


@task(cache_policy=NONE)
def encode_and_store(batch, store, encoder, config, collection, run_id, progress) -> BatchResult:
    return index_batch(batch, store, encoder, config, collection, run_id, progress=progress)


@task(cache_policy=NONE, retries=2, retry_delay_seconds=1)
def write_index(store, config, added, removed) -> dict:
    return sync_vector_index(store, config, added, removed) | {
        "keyword": sync_keyword_index(store)}


@flow(name="index_corpus", log_prints=False)
def index_corpus(
    paths: list[str],
    config: Config,
    collection: str = "default",
    fmt: str = "auto",
    fields: FieldMap = FieldMap(),
    batch_size: int = 2048,
    progress: bool = False,
) -> dict:
    """Index corpus files into the configured store and return the run summary.

    Args:
        paths: files or directories (JSONL, Parquet, CSV, BEIR corpus).
        config: validated configuration.
        collection: collection name; external ids are unique within it.
        fmt: file format or `auto`.
        fields: id/text/title/metadata column mapping.
    """
    return run_index(paths, config, collection, fmt, fields, batch_size, progress,
                     encode=encode_and_store, load=load_model, write=write_index)


def run_index(paths, config, collection="default", fmt="auto", fields=FieldMap(),
              batch_size=2048, progress=False, encode=None, load=None, write=None) -> dict:
    """The flow's story, also callable without Prefect (tasks default to plain functions)."""
    encode = encode or encode_and_store.fn
    load = load or load_model.fn
    write = write or write_index.fn
    files = expand_paths(paths)
    started = datetime.now(timezone.utc).replace(tzinfo=None)
    run_id = uuid.uuid4().hex[:12]
    encoder = load(config)
    total = BatchResult()
    rejected_rows = []
    with Store(Path(config.store.path)) as store:
        try:
            for path in files:
                for batch in read_batches(path, fmt, fields, batch_size):
                    result = encode(batch, store, encoder, config, collection, run_id, progress)
                    total.merge(result)
                    rejected_rows.extend(batch.rejected)
            index_info = write(store, config, total.added, total.removed)
        except BaseException as exc:
            store.record_run(run_id, "index", started, f"failed: {exc!r}"[:500], total.summary())
            raise
        summary = total.summary() | {
            "collection": collection,
            "files": [str(p) for p in files],
            "index": index_info,
            "run_id": run_id,
            "rejections": [
                {"source": r.source, "row": r.row, "id": r.external_id, "reason": r.reason}
                for r in rejected_rows[:100]
            ],
        }
        store.record_run(run_id, "index", started, "completed", summary)
    return summary
