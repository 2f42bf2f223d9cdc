"""The store annotation pass on a cluster: the writer sends partitions (a range of document ids
and their texts) to the workers, each worker runs the heads (loaded once per process) and sends
back its labels and entities as Arrow columns (`AnnotatedPartition`), and the writer commits
the partitions in doc-id order, each once, exactly as `indexer.annotate.store_pass` does.

Does not connect to a cluster: the caller passes `submit` (e.g. `distributed.Client.submit`,
which reruns a partition lost with a worker elsewhere).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from indexer.annotate.annotator import Annotator, load_heads
from indexer.annotate.store_pass import pending_work
from indexer.config import Config
from indexer.core.faults import crash_point
from indexer.core.progress import Progress, ProgressArg
from indexer.errors import ModelError
from indexer.indexing.partitions import Work, WorkTally, text_bytes, worker_name
from indexer.records.annotations import RESULT_TYPES, Annotation
from indexer.store import Store

MIN_ROWS, MAX_ROWS = 64, 4096  # documents per annotate partition
PER_SLOT = 4  # partitions per worker thread, at least, when the documents allow


_loaded: dict[tuple, Annotator] = {}  # per worker process: heads loaded once
_lock = threading.Lock()


def _worker_annotator(head_args: tuple[str, ...], config: Config) -> Annotator:
    key = (head_args, config.model_dump_json())
    with _lock:
        if key not in _loaded:
            _loaded[key] = Annotator.for_config(load_heads(list(head_args)), config)
        return _loaded[key]


def load_heads_on_worker(head_args: Sequence[str], config: Config) -> dict[str, str]:
    """Load the heads on this process (a worker, before its first partition) and return their
    versions.

    Args:
        head_args: the heads, as the writer was given them.
        config: the configuration.
    Returns:
        Head name -> version.
    """
    return _worker_annotator(tuple(head_args), config).versions()


@dataclass
class AnnotatedPartition:
    """A partition's results as Arrow tables, one per result type (`Label.field`,
    `Entity.field`): a `pos` column (position into the partition's texts) plus the result's
    fields."""

    pid: str
    tables: dict[str, pa.Table]
    versions: dict[str, str]  # the worker's heads
    work: Work

    def annotations(self, n: int) -> list[Annotation]:
        """One Annotation per text of the partition (`n` texts), in order."""
        out = [Annotation() for _ in range(n)]
        for rt in RESULT_TYPES:
            for row in self.tables[rt.field].to_pylist():
                getattr(out[row.pop("pos")], rt.field).append(rt(**row))
        return out

    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tables.values())


def _tables(annotations: list[Annotation]) -> dict[str, pa.Table]:
    tables = {}
    for rt in RESULT_TYPES:
        names = [f.name for f in dataclasses.fields(rt)]
        pos: list[int] = []
        columns: dict[str, list] = {name: [] for name in names}
        for i, a in enumerate(annotations):
            for x in getattr(a, rt.field):
                pos.append(i)
                for name in names:
                    columns[name].append(getattr(x, name))
        tables[rt.field] = pa.table({"pos": pa.array(pos, pa.int32()), **columns})
    return tables


def annotate_partition(
    pid: str, texts: list[str], head_args: Sequence[str], config: Config
) -> AnnotatedPartition:
    """Run the heads over one partition's texts on this process (a cluster worker); the
    heads and their encoder are loaded once per process.

    Args:
        pid: the partition's stable id (e.g. `news docs 1-1024`).
        texts: the documents' texts, in doc-id order.
        head_args: the heads, as the writer was given them (same paths on every worker).
        config: the configuration.
    Returns:
        The AnnotatedPartition.
    """
    cpu = time.process_time()
    annotator = _worker_annotator(tuple(head_args), config)
    found = annotator.annotate(texts)
    crash_point("partition.before_return")
    return AnnotatedPartition(
        pid,
        _tables(found),
        annotator.versions(),
        Work(worker_name(), len(texts), sum(len(t) for t in texts), time.process_time() - cpu),
    )


def partition_rows(todo: int, slots: int) -> int:
    """Documents per partition: at least `PER_SLOT` partitions per worker thread, each of
    `MIN_ROWS` to `MAX_ROWS` documents."""
    return max(MIN_ROWS, min(MAX_ROWS, math.ceil(todo / max(1, slots * PER_SLOT))))


class _PartitionWriter:
    """Commits annotated partitions in order, one transaction each, checking that each came
    back from the partition it was sent for and from the writer's heads."""

    def __init__(self, store: Store, versions: dict, bar: Progress):
        self.store, self.versions, self.bar = store, versions, bar
        self.tally = WorkTally()
        self.labels = self.entities = 0

    def settle(self, pid: str, docs: list, sent: int, future) -> None:
        part = future.result()
        if part.pid != pid:
            raise ModelError(f"partition {pid}: the worker sent back partition {part.pid}")
        if part.versions != self.versions:
            raise ModelError(
                f"worker {part.work.worker} ran heads {part.versions} on partition {pid}, the "
                f"writer has {self.versions}; put the same head directories at the same paths "
                "on every worker"
            )
        batch = part.annotations(len(docs))
        self.store.annotations.write(docs, batch, self.versions)
        self.tally.add(part.work, sent, part.nbytes())
        self.labels += sum(len(a.labels) for a in batch)
        self.entities += sum(len(a.entities) for a in batch)
        self.bar.update(len(docs))


def annotate_store_on_cluster(
    store: Store,
    annotator: Annotator,
    head_args: Sequence[str],
    config: Config,
    submit: Callable,
    slots: int,
    prepare: Callable[[], dict[str, dict]],
    collection: str | None = None,
    progress: ProgressArg = False,
) -> dict:
    """`indexer.annotate.store_pass.annotate_store` with the heads run on cluster workers.

    Partitions are ranges of the pending doc ids; up to two per worker thread run ahead of
    the writer, which commits them in order, one transaction each. A re-run after a crash
    finds the committed documents annotated and sends only the rest.

    Args:
        store: the open store (this process is its only writer).
        annotator: the heads loaded here (their versions and labels are recorded).
        head_args: the heads as given, for the workers to load.
        config: the configuration.
        submit: `submit(fn, *args, key=...)` returning a future with `.result()`.
        slots: worker threads in the cluster.
        prepare: loads the heads on every worker at once, before the first partition
            (worker -> head versions; e.g. `Client.run(load_heads_on_worker, ...)`), so that
            no worker starts late and loses its share.
        collection: only this collection (None: all).
        progress: progress on stderr.
    Returns:
        `annotate_store`'s summary plus `cluster` (work per worker, bytes per document).
    """
    versions, todo, total = pending_work(store, annotator, collection)
    for worker, found in sorted(prepare().items()):
        if found != versions:
            raise ModelError(
                f"worker {worker} loaded heads {found}, the writer has {versions}; put the "
                "same head directories at the same paths on every worker"
            )
    writer = _PartitionWriter(store, versions, Progress(len(todo), "annotating", "doc", progress))
    run = uuid.uuid4().hex[:8]
    pending: deque = deque()
    for docs in store.annotations.iter_doc_texts(todo, partition_rows(len(todo), slots)):
        pid = f"{collection or 'all'} docs {docs[0][0]}-{docs[-1][0]}"
        texts = [t for _, t, _ in docs]
        future = submit(
            annotate_partition, pid, texts, list(head_args), config, key=f"annotate {pid} {run}"
        )
        pending.append((pid, docs, text_bytes(texts), future))
        while len(pending) > 2 * slots:
            writer.settle(*pending.popleft())
    while pending:
        writer.settle(*pending.popleft())
    writer.bar.close()
    tally, n_labels, n_entities = writer.tally, writer.labels, writer.entities
    return {
        "documents": total,
        "annotated": len(todo),
        "skipped": total - len(todo),
        "labels": n_labels,
        "entities": n_entities,
        "heads": versions,
        "dtype": annotator.dtype_name,
        "cluster": tally.summary(),
    }
