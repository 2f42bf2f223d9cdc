"""Row types the store takes and returns: named dataclasses in place of positional tuples.
Plain data; no SQL."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


@dataclass
class ChunkRows:
    """Chunks of one batch, ready to insert: parallel arrays plus (n, dim) vectors."""

    doc_ids: list[int]
    ordinals: list[int]
    starts: list[int]
    ends: list[int]
    n_tokens: list[int]
    vectors: np.ndarray | WorkerFiles  # (n, dim) float32, or the files cluster workers wrote


@dataclass(frozen=True)
class WorkerFile:
    """Vectors a cluster worker wrote itself, as an `.npy` file under the store's
    `vectors/incoming/` (`indexer.store.vector_files`): what `ChunkRows.vectors` holds when
    the writer is to record the file rather than receive the vectors."""

    path: str
    rows: int
    dim: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.dim)

    def __len__(self) -> int:
        return self.rows


@dataclass(frozen=True)
class WorkerFiles:
    """A batch's vectors as the files its partitions' workers wrote, in order: what
    `ChunkRows.vectors` holds when the writer records files rather than receives vectors."""

    files: tuple[WorkerFile, ...]
    dim: int

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.dim)

    def __len__(self) -> int:
        return self.rows


@dataclass(frozen=True)
class Hit:
    """A search result's document: the chunk that matched (-1: the whole document) and its span."""

    chunk_id: int
    doc_id: int
    collection: str
    external_id: str
    title: str | None
    text: str
    metadata: dict
    start_char: int
    end_char: int


class StoredDoc(NamedTuple):
    """What decides whether a record is new, changed or unchanged: a stored document's id, its
    content hash and its metadata (JSON text, None when it has none). A tuple: a re-run's plan
    makes one for every stored row it reads (a frozen dataclass cost ~4x as much to make)."""

    doc_id: int
    content_hash: str
    metadata: str | None


@dataclass(frozen=True)
class DocText:
    """A document's searchable text, as the keyword index takes it."""

    doc_id: int
    title: str | None
    text: str


@dataclass(frozen=True)
class HashDiff:
    """Stored documents against a manifest of (doc id, content hash): doc ids (sorted int64)
    that are new, changed, or gone from the store."""

    documents: int  # stored documents
    new: np.ndarray
    changed: np.ndarray
    gone: np.ndarray

    @property
    def empty(self) -> bool:
        return not (len(self.new) or len(self.changed) or len(self.gone))


@dataclass(frozen=True)
class DocRef:
    """A document by the identity its source gave it (doc ids differ between stores)."""

    collection: str
    external_id: str


@dataclass(frozen=True)
class DocDigest:
    """A document's identity with what decides re-encoding and its metadata (JSON text)."""

    collection: str
    external_id: str
    content_hash: str
    metadata: str | None


@dataclass(frozen=True)
class ChunkLayout:
    """One stored chunk with its document's identity and its character span."""

    chunk_id: int
    collection: str
    external_id: str
    ordinal: int
    start_char: int
    end_char: int


@dataclass(frozen=True)
class SnapshotFacts:
    """What doctor compares between a snapshot and its index."""

    data_version: int
    chunks: int


@dataclass(frozen=True)
class IntegrityCounts:
    """The store's own invariants, counted (all 0 in a healthy store)."""

    duplicate_ids: int  # (collection, external id) pairs stored more than once
    orphan_chunks: int  # chunks whose document is gone
    stray_vectors: int  # vectors whose chunk is gone
