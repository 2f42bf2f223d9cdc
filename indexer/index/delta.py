"""The delta of an index version: an exact flat index over the vectors added since its base,
searched beside the base (less its deleted ids) and the two top-k merged by score.

A rebuild writes the base once and every version published after it maps that same file; a
version holds only what changed since (`indexer.index.version_files`), so publishing costs what
changed rather than the whole index.
"""

from __future__ import annotations

import faiss
import numpy as np

from indexer.errors import VectorIndexError

# the delta grows to at most this share of the base's vectors, and this many bytes of float32
# vectors, before a rebuild: each process holds it privately and scans all of it on every
# query, ~60 ns a 384-dim vector on one core (benchmarks/index_delta.py: 10,000 took 0.6 ms
# beside the base's 0.2 ms at 200k vectors), so 16 MiB keeps that to about a millisecond
DELTA_REBUILD = 0.05
DELTA_MAX_BYTES = 16 * 2**20


def new_delta(dim: int, metric: int) -> faiss.IndexIDMap2:
    """An empty delta: exact search over chunk ids, in the base's metric."""
    flat = faiss.IndexFlatL2(dim) if metric == faiss.METRIC_L2 else faiss.IndexFlatIP(dim)
    return faiss.IndexIDMap2(flat)  # FAISS's Python wrapper holds `flat` for it


def stored_ids(index: faiss.Index) -> np.ndarray:
    """The ids a FAISS index stores: its IDMap's, or those in its inverted lists."""
    if hasattr(index, "id_map"):
        return faiss.vector_to_array(index.id_map).astype(np.int64)
    ivf = faiss.extract_index_ivf(index)
    invlists = ivf.invlists
    if invlists is None:
        raise VectorIndexError("this index has neither an IDMap nor inverted lists")
    parts = [
        faiss.rev_swig_ptr(invlists.get_ids(i), invlists.list_size(i)).copy()
        for i in range(ivf.nlist)
        if invlists.list_size(i)
    ]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def search_delta(
    delta: faiss.Index, queries: np.ndarray, k: int, allowed: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k over the delta, restricted to `allowed` ids (which the delta holds)."""
    if allowed is None:
        return delta.search(queries, max(1, min(k, delta.ntotal)))
    ids = np.ascontiguousarray(allowed, dtype=np.int64)
    vectors = delta.reconstruct_batch(ids)
    top = max(1, min(k, len(ids)))
    scores, pos = faiss.knn(queries, vectors, top, metric=delta.metric_type)
    return scores, np.where(pos >= 0, ids[np.maximum(pos, 0)], -1)


def merge_top(parts: list[tuple[np.ndarray, np.ndarray]], k: int, metric: int):
    """The best k of several (scores, ids) result sets per query, as FAISS orders them
    (highest inner product first, smallest L2 distance first); missing results (-1) last."""
    scores = np.concatenate([p[0] for p in parts], axis=1)
    ids = np.concatenate([p[1] for p in parts], axis=1)
    key = scores if metric == faiss.METRIC_L2 else -scores
    key = np.where(ids < 0, np.inf, key)
    order = np.argsort(key, axis=1, kind="stable")[:, :k]
    scores, ids = np.take_along_axis(scores, order, 1), np.take_along_axis(ids, order, 1)
    if ids.shape[1] < k:  # fewer results than asked, as FAISS pads them
        pad = k - ids.shape[1]
        fill = np.inf if metric == faiss.METRIC_L2 else -np.inf
        scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=fill)
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
    return scores.astype(np.float32), ids
