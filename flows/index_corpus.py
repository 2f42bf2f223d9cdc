"""Prefect flow `index_corpus`: read -> encode -> write -> index, as the library's
`indexer.indexing.run.run_index` with its run-level steps as Prefect tasks (load the model,
delete missing documents, publish the indexes).

The steps run once a batch (encode, commit) are plain calls, not tasks (a 10M run has ~9,800
of them): without their task runs and the API server's bookkeeping of them a run gives 1.05x
the docs/s at 1M, 1.14x at 100k (`benchmarks/index_ab.py`, docs/design.md); a run's batches
and failures are in its summary.

With `runner: dask` each batch's texts go to the Dask workers as partitions
(`flows.cluster`), a few batches ahead of the writer, while this process alone writes to the
store. What touches I/O (a batch's commit, deleting missing documents, publishing) retries
after a failure that may clear (`flows.retry`); a batch that still fails is reported in the
summary and the others go on.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

from prefect import flow, task
from prefect.cache_policies import NONE
from prefect.utilities.annotations import quote

import flows  # noqa: F401  (Prefect settings first)
from flows.cluster import cluster_client, run_index_on_cluster
from flows.retry import retried, transient
from flows.streams import keep_dedup_current
from indexer.config import Config
from indexer.config.flows import SourceConfig
from indexer.core.progress import ProgressArg
from indexer.errors import ConfigError
from indexer.indexing.run import Steps, delete_missing, load_model, publish_indexes, run_index
from indexer.indexing.steps import BatchPlan, BatchResult, commit_batch
from indexer.ingest.readers import FieldMap
from indexer.store import ChunkRows, Store


@task(name="load_model", cache_policy=NONE)
def load_model_task(config: Config):
    return load_model(config)


@retried
def commit(plan: BatchPlan, chunks: ChunkRows, store: Store, run_id: str) -> BatchResult:
    """Commit one batch (a plain call, retried: the module)."""
    return commit_batch(plan, chunks, store, run_id)


@task(
    name="delete_missing",
    cache_policy=NONE,
    retries=2,
    retry_delay_seconds=1,
    retry_condition_fn=transient,
)
def delete_missing_task(
    store: Store, collection: str, seen: set[str]
) -> tuple[list[str], list[int]]:
    return delete_missing(store, collection, seen)


@task(cache_policy=NONE, retries=2, retry_delay_seconds=1, retry_condition_fn=transient)
def write_index(
    store: Store, config: Config, added, removed, base_version=None, build=None
) -> dict:
    return publish_indexes(store, config, added, removed, base_version, build)


@flow(name="index_corpus", log_prints=False)
def index_corpus(
    paths: list[str],
    config: Config,
    collection: str = "default",
    fmt: str = "auto",
    fields: FieldMap | None = None,
    batch_size: int = 2048,
    progress: ProgressArg = False,
    on_missing: str = "keep",
    strict: bool = False,
    vectors: str | None = None,
) -> dict:
    """Index corpus files into the configured store and return the run summary
    (`indexer.indexing.run.run_index` has the arguments); `runner: dask` encodes on the
    Dask cluster and adds `cluster` (work per worker, bytes per document). With a vector
    file the run stays in this process: the writer stores the vectors it is given."""
    steps = Steps(
        load=quoted(load_model_task),
        commit=commit,
        delete_missing=quoted(delete_missing_task),
        write=quoted(write_index),
    )
    if config.runner == "dask" and vectors is None:
        with cluster_client(config) as client:
            summary = run_index_on_cluster(
                client,
                paths,
                config,
                collection,
                fmt,
                fields,
                batch_size,
                progress,
                on_missing=on_missing,
                strict=strict,
                io=steps,
            )
    else:
        summary = run_index(
            paths,
            config,
            collection,
            fmt,
            fields,
            batch_size,
            progress,
            on_missing=on_missing,
            strict=strict,
            steps=steps,
            vectors=vectors,
        )
    summary["dedup"] = keep_dedup_current(config)
    return summary


def quoted(step: Callable) -> Callable:
    """`step` (a task) called with its arguments quoted: Prefect otherwise walks every
    argument for upstream futures, each record of a batch plan and each id of a run's seen
    set (a 2,048-document batch: ~170 ms a commit). The index steps are passed no futures."""

    def call(*args, **kwargs):
        return step(*map(quote, args), **{key: quote(value) for key, value in kwargs.items()})

    return call


def flow_for(config: Config):
    """`index_corpus`, after checking that `runner: dask` can reach Dask: the flow itself
    sends partitions to the cluster (`flows.cluster.cluster_client`, with `dask.security`),
    so no Prefect task runner and no Prefect on the workers."""
    if config.runner == "dask" and importlib.util.find_spec("distributed") is None:
        raise ConfigError(
            "runner: dask needs the distributed extra: pip install 'bertindex[distributed]'"
        )
    return index_corpus


def index_source(config: Config, source: SourceConfig, progress: ProgressArg = False) -> dict:
    """Index one configured source (`sources:` in config.yaml) with the configured runner."""
    fields = FieldMap(
        id_field=source.fields.id,
        text_field=source.fields.text,
        title_field=source.fields.title,
        metadata_fields=tuple(source.fields.metadata)
        if source.fields.metadata is not None
        else None,
    )
    return flow_for(config)(
        source.paths,
        config,
        source.collection,
        source.format,
        fields,
        source.batch_size,
        progress,
        source.on_missing,
        source.strict,
    )
