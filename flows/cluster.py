"""The Dask cluster behind `runner: dask`: a client of the scheduler at `dask.address` (or of
a LocalCluster of worker processes on this machine), the index steps that send each batch's
texts to the workers as partitions, and the annotate pass on the workers.

The workers run library functions only (`indexer.indexing.partitions.encode_partition`,
`indexer.annotate.cluster.annotate_partition`): no Prefect, no store tables, no corpus files;
where they see the store's folder (`dask.vectors`) they write their partitions' vectors there
as files the writer records. This
process reads, plans and is the only writer; a partition lost with a worker is rerun by the
scheduler on another one and gives the same arrays. TLS comes from `dask.security`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from indexer.annotate.cluster import annotate_store_on_cluster, load_heads_on_worker
from indexer.config import Config
from indexer.core.stages import timed
from indexer.errors import ConfigError
from indexer.index.shards import build_in_shards, unmergeable
from indexer.index.vector import VectorIndex
from indexer.indexing.partitions import (
    EncodedPartition,
    WorkTally,
    check_workers,
    encode_partition,
    join,
    load_on_worker,
    split,
    text_bytes,
    vectors_folder,
)
from indexer.indexing.run import Steps, load_model, run_index
from indexer.indexing.steps import BatchPlan, encode_texts_for_index
from indexer.store import ChunkRows

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 30  # to reach the scheduler, and for a first worker to join it


@contextmanager
def cluster_client(config: Config) -> Iterator:
    """A `distributed.Client` for `config.dask` (closed on exit): the scheduler at
    `dask.address` (over TLS with `dask.security`), or a LocalCluster of one single-threaded
    worker process per core, bound to 127.0.0.1.

    Raises:
        ConfigError: the distributed extra is missing, or no scheduler or worker answers.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ConfigError(
            "runner: dask needs the distributed extra: pip install 'bertindex[distributed]'"
        ) from None
    address = config.dask.address
    security = config.dask.security.security_kwargs()  # TLS (docs/guides/dask.md)
    if security:
        from distributed.security import Security

        security = {"security": Security(**security)}
    if address is None:  # on loopback only: nothing else on the network may submit work
        with (
            LocalCluster(
                processes=True,
                threads_per_worker=1,
                host="127.0.0.1",
                dashboard_address=None,
                **security,
            ) as lc,
            Client(lc, set_as_default=False, **security) as client,
        ):
            yield client
        return
    try:
        client = Client(address, timeout=CONNECT_TIMEOUT_S, set_as_default=False, **security)
    except OSError as exc:
        raise ConfigError(
            f"dask.address {address}: no Dask scheduler answers ({exc}); start "
            f"one (`dask scheduler`) or fix the address"
        ) from None
    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
    except TimeoutError:
        client.close()
        raise ConfigError(
            f"dask.address {address}: the scheduler has no worker after "
            f"{CONNECT_TIMEOUT_S} s; start `dask worker {address} --nthreads 1` "
            "on each machine"
        ) from None
    try:
        yield client
    finally:
        client.close()


@contextmanager
def maybe_cluster(config: Config) -> Iterator:
    """`cluster_client(config)` with `runner: dask`, else None (the local runner)."""
    if config.runner != "dask":
        yield None
        return
    with cluster_client(config) as client:
        yield client


def worker_threads(client) -> int:
    """Threads over all the cluster's workers now (at least 1)."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return max(1, sum(w["nthreads"] for w in workers.values()))


class _Ready:
    """A future that is already done."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


@dataclass
class _BatchFuture:
    """One batch's partitions in flight: their ids, futures, first text and bytes sent."""

    pids: list[str]
    futures: list
    starts: list[int]
    sent: list[int]

    def result(self) -> _BatchFuture:
        return self  # resolved partition by partition in `ClusterIndex.chunks`


@dataclass
class ClusterIndex:
    """The index run's encode step on the cluster (`indexer.indexing.run.Steps.encode` with
    `submit`): each batch's texts go out as partitions, two per worker thread when the batch
    allows; `chunks` joins them back in order for the batch's one commit.

    Args:
        client: the `distributed.Client`.
        config: the run's configuration.
    """

    client: object
    config: Config
    tally: WorkTally = field(default_factory=WorkTally)
    run: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    encoder: object = None

    def __post_init__(self):
        self.slots = worker_threads(self.client)
        self.index_build: dict = {"on": "writer", "reason": "not rebuilt"}
        self.vectors_to: str | None = None  # the store's folder when workers write vectors

    @property
    def in_flight(self) -> int:
        """Batches ahead of the writer: `dask.in_flight`, at least one per worker thread."""
        return max(self.config.dask.in_flight, self.slots)

    def load(self, config: Config):
        """The writer's encoder, and the workers' loaded at once (each must match it)."""
        self.encoder = load_model(config)
        check_workers(self.client.run(load_on_worker, config), self.encoder.provenance)
        self.vectors_to = vectors_folder(config.store.path, config.dask.vectors, self.client.run)
        return self.encoder

    def encode(self, pid: str, texts: list[str], config: Config):
        if not texts:  # every document unchanged: nothing to send
            return _Ready(encode_texts_for_index([], config, self.encoder))
        ranges = split(len(texts), self.slots)
        pids = [f"{pid} [{start}:{end}]" for start, end in ranges]  # stable: file, rows, part
        futures = [
            self.client.submit(
                encode_partition,
                sub,
                texts[start:end],
                config,
                self.vectors_to,
                key=f"encode {sub} {self.run}",
            )
            for sub, (start, end) in zip(pids, ranges)
        ]
        return _BatchFuture(
            pids, futures, [s for s, _ in ranges], [text_bytes(texts[s:e]) for s, e in ranges]
        )

    def build(
        self, spec: str, provenance, config, batches, count: int, spill=None, tune_queries=None
    ) -> VectorIndex:
        """A rebuilt vector index: IVF specs in shards on the workers (trained here once,
        merged here), the others here (`indexer.index.shards.unmergeable` says why)."""
        reason = unmergeable(spec)
        if reason is not None:
            self.index_build = {"on": "writer", "reason": reason}
            return VectorIndex.build_from_batches(
                spec, provenance, config, batches, count, spill=spill, tune_queries=tune_queries
            )
        template = None  # sent to every worker once, not with every shard

        def submit(fn, trained, ids, vectors):
            nonlocal template
            if template is None:
                template = self.client.scatter(trained, broadcast=True)
            self.index_build["shards"] += 1
            return self.client.submit(
                fn, template, ids, vectors, key=f"shard {self.index_build['shards']} {self.run}"
            )

        self.index_build = {"on": "workers", "shards": 0}
        return build_in_shards(
            spec,
            provenance,
            config,
            batches,
            count,
            submit,
            in_flight=2 * self.slots,
            tune_queries=tune_queries,
        )

    def chunks(self, plan: BatchPlan, encoded) -> ChunkRows:
        """The batch's ChunkRows from its partitions (waits for them, checks each).

        Raises:
            ModelError: a worker's encoder differs from the writer's.
        """
        if isinstance(encoded, ChunkRows):
            return encoded
        parts: list[EncodedPartition] = []
        for pid, future, sent in zip(encoded.pids, encoded.futures, encoded.sent):
            part = future.result().check(pid, self.encoder.provenance)
            parts.append(part)
            self.tally.add(part.work, sent, part.nbytes())
        return join(parts, encoded.starts, self.encoder.dim)


def run_index_on_cluster(
    client,
    paths: list[str],
    config: Config,
    collection: str = "default",
    fmt: str = "auto",
    fields=None,
    batch_size: int = 2048,
    progress=False,
    *,
    on_missing: str = "keep",
    strict: bool = False,
    io: Steps | None = None,
) -> dict:
    """`indexer.indexing.run.run_index` with every batch encoded on the cluster's workers.

    Args:
        client: the `distributed.Client` (`cluster_client`).
        paths, config, collection, fmt, fields, batch_size, progress, on_missing, strict:
            as `run_index`.
        io: the writer's steps (commit, delete_missing, write), e.g. the flow's Prefect tasks
            that retry; None: the plain functions.
    Returns:
        `run_index`'s summary plus `cluster`: work per worker (partitions, documents,
        characters, CPU seconds, share), bytes per document sent and received, how the
        vectors came (`vectors`: "files" the workers wrote, or "sent"), where a
        rebuilt vector index was built (`index`: workers and shard count, or writer and why),
        and the writer's seconds waiting for partitions and committing them (`writer`).
    """
    io = io or Steps()
    cluster = ClusterIndex(client, config)

    writer = {"wait_s": 0.0, "commit_s": 0.0}  # waiting for partitions, committing them

    def commit(plan: BatchPlan, encoded, store, run_id: str):
        start = time.perf_counter()
        with timed("encode"):  # the workers encode: the writer's wait for them
            chunks = cluster.chunks(plan, encoded)
        done = time.perf_counter()
        try:
            return io.commit(plan, chunks, store, run_id)
        finally:
            writer["wait_s"] += done - start
            writer["commit_s"] += time.perf_counter() - done

    def write(store, config, added, removed, base_version=None):
        return io.write(store, config, added, removed, base_version, cluster.build)

    steps = Steps(
        load=cluster.load,
        encode=cluster.encode,
        commit=commit,
        delete_missing=io.delete_missing,
        write=write,
        submit=True,
        in_flight=cluster.in_flight,
    )
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
    )
    return summary | {
        "cluster": cluster.tally.summary()
        | {
            "vectors": "files" if cluster.vectors_to else "sent",
            "index": cluster.index_build,
            "writer": {k: round(v, 3) for k, v in writer.items()},
        }
    }


def annotate_pass(client, head_args: list[str], config: Config):
    """The store annotation pass on the cluster, as `annotate_and_publish(annotate=...)` takes
    it: `pass(store, annotator, collection, progress=...)`."""
    slots = worker_threads(client)

    def prepare() -> dict:
        return client.run(load_heads_on_worker, head_args, config)

    def run(store, annotator, collection=None, progress=False) -> dict:
        return annotate_store_on_cluster(
            store, annotator, head_args, config, client.submit, slots, prepare, collection, progress
        )

    return run
