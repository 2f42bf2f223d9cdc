"""Helpers for tests that drive the store directly, without a model: a record, a batch of
documents written with random vectors, and a snapshot published the way `VectorIndex.save`
publishes one (a version folder renamed into place, CURRENT switched, old versions and unused
segments removed) but without a FAISS file."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from indexer.encode.encoder import Provenance
from indexer.index.vector import remove_old_versions
from indexer.ingest.readers import Record
from indexer.records.versions import index_root, list_versions, write_pointer
from indexer.store import ChunkRows, Store, collect_segments, content_hash

DIM = 4
PROVENANCE = Provenance("tiny", "w0", "mean", True, 16, DIM, "float32")


def record(external_id: str, text: str, **metadata) -> Record:
    return Record(external_id, text, None, metadata, source="test.jsonl", row=1)


def chunks_for(doc_ids: list[int], seed: int = 0, dim: int = DIM) -> ChunkRows:
    """One chunk per document spanning 0..3, with a random (n, dim) vector each."""
    vectors = np.random.default_rng(seed).standard_normal((len(doc_ids), dim)).astype(np.float32)
    n = len(doc_ids)
    return ChunkRows(list(doc_ids), [0] * n, [0] * n, [3] * n, [2] * n, vectors)


def add(
    store: Store, collection: str, records: list[Record], seed: int = 0, dim: int = DIM
) -> tuple[list[int], list[int], ChunkRows]:
    """Write `records` as new documents; returns (doc ids, chunk ids, the chunks written)."""
    doc_ids = store.documents.next_ids("doc_ids", len(records))
    rows = [(d, r, content_hash(r)) for d, r in zip(doc_ids, records)]
    chunks = chunks_for(doc_ids, seed, dim)
    added, removed = store.documents.write_batch(collection, rows, [], [], chunks, [], "run1")
    assert removed == []
    return doc_ids, added, chunks


@contextlib.contextmanager
def store_with_docs(path: Path, n: int) -> Iterator[Store]:
    """A writable store at `path` holding `n` documents `e0`, `e1`, ... of collection `docs`
    (one chunk each, random vectors)."""
    with Store(path) as s:
        s.vectors.set_provenance(PROVENANCE)
        add(s, "docs", [record(f"e{i}", f"text {i}", lang="en", n=i) for i in range(n)])
        yield s


def publish(store: Store) -> str:
    """Publish the store's snapshot as a new index version (no FAISS file); returns it."""
    root = index_root(store.path)
    root.mkdir(exist_ok=True)
    for stale in root.glob(".v*.tmp"):  # left by a killed publish
        shutil.rmtree(stale)
    versions = list_versions(store.path)
    version = f"v{(versions[-1] + 1) if versions else 1}"
    tmp = root / f".{version}.tmp"
    tmp.mkdir()
    store.write_snapshot(tmp)
    os.replace(tmp, root / version)
    write_pointer(store.path, version)
    remove_old_versions(store.path)
    collect_segments(store.path)
    return version
