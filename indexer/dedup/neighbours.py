"""Candidate pairs of near-duplicate documents from stored vectors (normalised, so inner product
is cosine), each pair's cosine recomputed exactly from the stored float32 vectors.

`all_pairs`: a whole collection, through a FAISS index built here (exact `Flat` up to
FLAT_LIMIT documents, `IVF…,SQ8` above: 1 byte a dimension) and k nearest neighbours of every
document. `new_pairs`: only documents not grouped yet, against the published search index
(restricted to the collection's grouped documents) and against each other: the work grows
with the new documents, not with the collection.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import faiss
import numpy as np

log = logging.getLogger(__name__)

FLAT_LIMIT = 50_000  # documents searched exactly; above, an IVF index with 8-bit codes
NPROBE = 16  # IVF lists visited per document
SQ8_SLACK = 0.02  # 8-bit codes misplace a cosine by less than this: candidates then rechecked
TRAIN_PER_LIST = 40  # vectors sampled per IVF list to train it
QUERY_BATCH = 4096


@dataclass
class Pairs:
    """Candidate pairs (doc ids a < b) and their exact cosine, plus how many vectors were
    searched for them (the work done)."""

    a: np.ndarray
    b: np.ndarray
    score: np.ndarray
    searched: int

    @classmethod
    def empty(cls, searched: int = 0) -> Pairs:
        z = np.zeros(0, np.int64)
        return cls(z, z.copy(), np.zeros(0, np.float32), searched)


def _dedupe(a: np.ndarray, b: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, ...]:
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keep = lo != hi
    lo, hi, s = lo[keep], hi[keep], s[keep]
    if not len(lo):
        return lo, hi, s
    _, first = np.unique(np.stack([lo, hi], axis=1), axis=0, return_index=True)
    return lo[first], hi[first], s[first]


def _exact(queries: np.ndarray, q_rows: np.ndarray, neighbour_chunks: np.ndarray,
           fetch: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Exact cosines of (query row, neighbour chunk) pairs, the neighbours' vectors fetched."""
    if not len(q_rows):
        return np.zeros(0, np.float32)
    unique = np.unique(neighbour_chunks)
    vectors = fetch(unique)  # ascending chunk ids
    pos = np.searchsorted(unique, neighbour_chunks)
    return np.einsum("ij,ij->i", queries[q_rows], vectors[pos]).astype(np.float32)


def _ivf_index(dim: int, n: int, sample: np.ndarray) -> faiss.Index:
    nlist = int(min(16384, max(64, 4 * math.sqrt(n))))
    nlist = min(nlist, max(1, len(sample) // 4))
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFScalarQuantizer(quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit,
                                          faiss.METRIC_INNER_PRODUCT)
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    index.nprobe = min(NPROBE, nlist)
    index.referenced_quantizer = quantizer  # the Python object lives as long as the index
    return index


def all_pairs(batches: Callable[[], object], n: int, dim: int, threshold: float, k: int,
              chunk_doc: tuple[np.ndarray, np.ndarray],
              fetch: Callable[[np.ndarray], np.ndarray], seed: int = 0) -> Pairs:
    """Every pair of a collection's documents with cosine >= threshold among each document's
    k nearest neighbours.

    Args:
        batches: called once per pass; yields (doc ids, chunk ids, vectors) items.
        n: documents in the collection (to size the index).
        dim: vector width.
        threshold: cosine, in (0, 1].
        k: neighbours looked at per document.
        chunk_doc: (first chunk ids ascending, their doc ids).
        fetch: stored vectors of ascending chunk ids (to recheck 8-bit scores exactly).
        seed: for the IVF training sample.
    Returns:
        Pairs; `searched` is n.
    """
    if n < 2:
        return Pairs.empty(n)
    if n <= FLAT_LIMIT:
        index = faiss.IndexIDMap(faiss.IndexFlatIP(dim))
        slack = 0.0
    else:
        rng = np.random.default_rng(seed)
        want = min(n, 256 * 1024, TRAIN_PER_LIST * int(4 * math.sqrt(n)))
        parts = [v[rng.random(len(v)) < want / n] for _, _, v in batches()]
        ivf = _ivf_index(dim, n, np.concatenate(parts))
        index = faiss.IndexIDMap(ivf)
        slack = SQ8_SLACK
    for _, chunk_ids, vectors in batches():
        index.add_with_ids(vectors, chunk_ids)
    kk = min(k + 1, n)
    keys, docs = chunk_doc
    out_a, out_b, out_s = [], [], []
    for _, chunk_ids, vectors in batches():
        for start in range(0, len(chunk_ids), QUERY_BATCH):
            q = vectors[start:start + QUERY_BATCH]
            own = chunk_ids[start:start + QUERY_BATCH]
            scores, found = index.search(q, kk)
            hit = (found >= 0) & (found != own[:, None]) & (scores >= threshold - slack)
            rows, cols = np.nonzero(hit)
            neighbour = found[rows, cols]
            exact = (scores[rows, cols] if slack == 0.0
                     else _exact(q, rows, neighbour, fetch))
            keep = exact >= threshold
            out_a.append(own[rows[keep]])
            out_b.append(neighbour[keep])
            out_s.append(exact[keep])
    a, b, s = _dedupe(np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_s))
    to_doc = lambda c: docs[np.searchsorted(keys, c)]
    return Pairs(to_doc(a), to_doc(b), s, searched=n)


def new_pairs(new_chunks: np.ndarray, seen_chunks: np.ndarray, search_index, threshold: float,
              k: int, chunk_doc: tuple[np.ndarray, np.ndarray],
              fetch: Callable[[np.ndarray], np.ndarray]) -> Pairs:
    """Pairs of not-yet-grouped documents with each other and with grouped ones.

    Args:
        new_chunks: first chunk ids (ascending) of the documents to place.
        seen_chunks: first chunk ids (ascending) of the collection's grouped documents.
        search_index: the published `VectorIndex` (holds every stored chunk), or None when
            nothing is grouped yet.
        threshold, k, chunk_doc, fetch: as `all_pairs`.
    Returns:
        Pairs; `searched` is the number of new documents (each searched once, in each index).
    """
    if not len(new_chunks):
        return Pairs.empty()
    keys, docs = chunk_doc
    dim = None
    local = None  # the new documents' own exact index, built once the width is known
    out_a, out_b, out_s = [], [], []
    for start in range(0, len(new_chunks), QUERY_BATCH):
        own = new_chunks[start:start + QUERY_BATCH]
        q = fetch(own)
        if dim is None:
            dim = q.shape[1]
            if len(new_chunks) > 1:
                local = faiss.IndexIDMap(faiss.IndexFlatIP(dim))
        if local is not None:
            local.add_with_ids(q, own)
        if search_index is not None and len(seen_chunks):
            _, found = search_index.search(q, min(k, len(seen_chunks)), seen_chunks)
            rows, cols = np.nonzero(found >= 0)
            neighbour = found[rows, cols]
            exact = _exact(q, rows, neighbour, fetch)
            keep = exact >= threshold
            out_a.append(own[rows[keep]])
            out_b.append(neighbour[keep])
            out_s.append(exact[keep])
    if local is not None:  # the new documents among themselves, exactly
        kk = min(k + 1, len(new_chunks))
        for start in range(0, len(new_chunks), QUERY_BATCH):
            own = new_chunks[start:start + QUERY_BATCH]
            q = fetch(own)
            scores, found = local.search(q, kk)
            hit = (found >= 0) & (found != own[:, None]) & (scores >= threshold)
            rows, cols = np.nonzero(hit)
            out_a.append(own[rows])
            out_b.append(found[rows, cols])
            out_s.append(scores[rows, cols])
    if not out_a:
        return Pairs.empty(len(new_chunks))
    a, b, s = _dedupe(np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_s))
    to_doc = lambda c: docs[np.searchsorted(keys, c)]
    return Pairs(to_doc(a), to_doc(b), s, searched=len(new_chunks))
