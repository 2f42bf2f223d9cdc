"""Consistency check of a store and its published index: no duplicate ids, FAISS holds exactly
the stored chunk ids, the snapshot searches read agrees with the live store. Also returns the
content (documents, chunk layout, vectors keyed by external id) so two stores can be compared,
e.g. a store that survived killed runs against one built in a single clean run, under the
tolerance rules of `indexer.ops.tolerance` (vectors by cosine; everything else exactly).

Reads only; the store must not have a writer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from indexer.config import Config
from indexer.errors import StoreError
from indexer.index.vector import VectorIndex
from indexer.ops.tolerance import FP32, Tolerance, far_vectors, for_dtype
from indexer.store import Store


@dataclass
class StoreContents:
    documents: dict[tuple[str, str], tuple[str, str | None]]  # (collection, id) -> (hash, metadata)
    chunks: dict[tuple[str, str, int], tuple[int, int]]  # (collection, id, ordinal) -> span
    vectors: dict[tuple[str, str, int], np.ndarray]
    problems: list[str] = field(default_factory=list)
    tolerance: Tolerance = FP32  # the encoder dtype's (`tolerance.for_dtype`)

    def differences(self, other: StoreContents, tol: Tolerance | None = None) -> list[str]:
        """What differs from `other` (empty: same documents, chunks and vectors).

        Documents and chunks compare exactly, vectors by cosine under `tol` (default: the looser
        of the two stores' tolerances).
        """
        if tol is None:
            tol = min(self.tolerance, other.tolerance, key=lambda t: t.min_cosine)
        out = []
        for name in ("documents", "chunks"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                only_a = len(set(mine) - set(theirs))
                only_b = len(set(theirs) - set(mine))
                changed = sum(1 for k in set(mine) & set(theirs) if mine[k] != theirs[k])
                out.append(f"{name}: {only_a} only here, {only_b} only there, {changed} differ")
        far = far_vectors(self.vectors, other.vectors, tol)
        if far:
            out.append(f"vectors: {len(far)} below cosine {tol.min_cosine}, e.g. {far[0]}")
        return out


def check_store(config: Config) -> StoreContents:
    """Read the configured store and its published index; `problems` lists broken invariants."""
    path = Path(config.store.path)
    problems: list[str] = []
    with Store(path, read_only=True, snapshot=False) as store:
        counts = store.checks.integrity_counts()
        if counts.duplicate_ids:
            problems.append(f"{counts.duplicate_ids} duplicate (collection, id) pairs")
        if counts.orphan_chunks:
            problems.append(f"{counts.orphan_chunks} chunks without a document")
        docs = {
            (d.collection, d.external_id): (d.content_hash, d.metadata)
            for d in store.checks.document_digests()
        }
        layout = store.checks.chunk_layout()
        chunks = {
            (c.collection, c.external_id, c.ordinal): (c.start_char, c.end_char) for c in layout
        }
        key_of = {c.chunk_id: (c.collection, c.external_id, c.ordinal) for c in layout}
        vectors: dict = {}
        for ids, vecs in store.vectors.iter_batches():
            for i, v in zip(ids.tolist(), vecs):
                if i not in key_of:
                    problems.append(f"vector {i} without a chunk")
                    continue
                vectors[key_of[i]] = v
        if len(vectors) != len(chunks):
            problems.append(f"{len(chunks)} chunks but {len(vectors)} vectors")
        data_version = store.data_version()
        chunk_ids = np.sort(np.fromiter(key_of, np.int64, len(key_of)))
        provenance = store.vectors.provenance()
    if provenance is not None:
        index = VectorIndex.load(path, config.index, provenance, ("weights_hash", "dim"))
        if index is None:
            problems.append("no published index")
        else:
            ids = np.sort(index.ids())
            if index.ntotal != len(chunk_ids) or not np.array_equal(ids, chunk_ids):
                problems.append(
                    f"FAISS holds {index.ntotal} ids, the store {len(chunk_ids)} "
                    "chunks, or other ids"
                )
            if index.data_version != data_version:
                problems.append(
                    f"index reflects data_version {index.data_version}, the store "
                    f"is at {data_version}"
                )
            problems.extend(_snapshot_problems(path, data_version, len(docs), len(chunks)))
    return StoreContents(docs, chunks, vectors, problems, for_dtype(config.model.dtype))


def _snapshot_problems(path: Path, data_version: int, documents: int, chunks: int) -> list[str]:
    """The published snapshot (the views over its segments) opens and holds the live store's
    data version, documents and chunks."""
    try:
        with Store(path, read_only=True) as snap:
            if snap.version is None:
                return []
            if snap.data_version() != data_version:
                return ["the published snapshot is behind the store"]
            held = (snap.counts.documents(), snap.counts.chunks())
    except StoreError as exc:
        return [f"the published snapshot cannot be read: {exc}"]
    if held != (documents, chunks):
        return [
            f"the published snapshot holds {held[0]} documents and {held[1]} chunks, the store "
            f"{documents} and {chunks}"
        ]
    return []
