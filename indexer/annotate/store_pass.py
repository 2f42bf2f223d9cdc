"""The annotation pass over a store: every document that misses one of an annotator's heads at
its version is read, labelled and written back, a batch per transaction (`annotate_store`);
`annotate_and_publish` runs it as a recorded `annotate` run and publishes a snapshot so that
searches see the labels. Does not load heads (`indexer.annotate.annotator`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from pathlib import Path

from indexer.annotate.annotator import Annotator
from indexer.config import Config
from indexer.core.progress import Progress, ProgressArg
from indexer.indexing.steps import sync_vector_index
from indexer.store import Store


def annotate_store(
    store: Store,
    annotator: Annotator,
    collection: str | None = None,
    batch_rows: int = 4096,
    progress: ProgressArg = False,
) -> dict:
    """Annotate every document that misses one of the annotator's heads at its version.

    Already annotated documents (same head version, same text) are skipped, so a second run
    with the same heads does nothing. Each batch of `batch_rows` documents is one transaction.

    Returns:
        {"documents", "annotated", "skipped", "labels", "entities", "heads", "dtype"}.
    """
    versions, todo, total = pending_work(store, annotator, collection)
    buffered: deque = deque()

    def texts():
        for docs in store.annotations.iter_doc_texts(todo, batch_rows):
            buffered.append(docs)
            yield [t for _, t, _ in docs]

    n_labels = n_entities = 0
    bar = Progress(len(todo), "annotating", "doc", progress)
    for batch in annotator.annotate_chunks(texts()):
        docs = buffered.popleft()
        store.annotations.write(docs, batch, versions)
        n_labels += sum(len(a.labels) for a in batch)
        n_entities += sum(len(a.entities) for a in batch)
        bar.update(len(docs))
    bar.close()
    return {
        "documents": total,
        "annotated": len(todo),
        "skipped": total - len(todo),
        "labels": n_labels,
        "entities": n_entities,
        "heads": versions,
        "dtype": annotator.dtype_name,
    }


def pending_work(
    store: Store, annotator: Annotator, collection: str | None = None
) -> tuple[dict[str, str], list[int], int]:
    """Record the annotator's heads, drop orphaned annotations, and list what is missing.

    Returns:
        (head versions, doc ids that miss a head at its version, documents in scope).
    """
    versions = annotator.versions()
    # the review loop validates imported labels against these
    store.reviews.record_heads(
        [(h.name, h.kind.name, h.labels, str(h.path), h.version) for h in annotator.heads]
    )
    store.annotations.remove_orphans()
    return (
        versions,
        store.annotations.pending_doc_ids(versions, collection),
        store.counts.documents(collection),
    )


def annotate_and_publish(
    annotator: Annotator,
    config: Config,
    collection: str | None = None,
    progress: ProgressArg = False,
    *,
    annotate: Callable | None = None,
) -> dict:
    """Annotate what is missing in the configured store as one `annotate` run, then publish a
    snapshot with the new labels.

    Args:
        annotator: the loaded heads.
        config: the configuration (`store.path`, the index settings for the snapshot).
        collection: only this collection (None: all).
        progress: progress on stderr.
        annotate: the pass, `annotate(store, annotator, collection, progress=...)` (None:
            `annotate_store`; `indexer.annotate.cluster` runs it on cluster workers).
    Returns:
        `annotate_store`'s summary plus `index` (what was published).
    """
    with Store(Path(config.store.path)) as store, store.runs.recorded_run("annotate") as run:
        base = store.data_version()
        summary = (annotate or annotate_store)(store, annotator, collection, progress=progress)
        run.summary = summary
        summary["index"] = sync_vector_index(store, config, [], [], base)
    return summary
