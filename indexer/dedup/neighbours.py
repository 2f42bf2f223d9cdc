"""Candidate pairs of near-duplicate documents from stored vectors (normalised, so inner product
is cosine), each pair's cosine recomputed exactly from the stored float32 vectors.

`all_pairs`: a whole collection, through a FAISS index built here (exact `Flat` up to
FLAT_LIMIT documents, `IVF…,SQ8` above: 1 byte a dimension, candidates then rescored from the
float32 vectors in one more streamed pass) and k nearest neighbours of every document; an `accept`
check (the word check) drops candidates query batch by query batch, so memory holds the accepted
pairs, not k per document. `new_pairs`: only documents not grouped yet, against the published search
index (restricted to the collection's grouped documents) and against each other: the work grows with
the new documents, not with the collection.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import faiss
import numpy as np

log = logging.getLogger(__name__)

FLAT_LIMIT = 50_000  # documents searched exactly; above, an IVF index with 8-bit codes
NPROBE = 8  # IVF lists visited per document (copies sit in the same list or the next)
SQ8_SLACK = 0.02  # 8-bit codes misplace a cosine by less than this: candidates then rechecked
TRAIN_SAMPLE = 65536  # vectors sampled to train the IVF lists (bounded memory)
MAX_LISTS = 4096
KMEANS_ITERATIONS = 10  # lists only route the search: coarse centroids are enough
QUERY_BATCH = 4096
PAIR_CHUNK = 65536  # candidate pairs rescored at a time

# called once per pass: yields the same (doc ids, chunk ids, vectors) items each time
VectorBatches = Callable[[], Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]]


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


def _gather(batches: VectorBatches, wanted: np.ndarray) -> np.ndarray:
    """The vectors of `wanted` chunk ids (ascending), picked out of one streamed pass."""
    out = None
    for _, chunk_ids, vectors in batches():
        hit = np.isin(chunk_ids, wanted)
        if out is None:
            out = np.zeros((len(wanted), vectors.shape[1]), np.float32)
        if hit.any():
            out[np.searchsorted(wanted, chunk_ids[hit])] = vectors[hit]
    return out if out is not None else np.zeros((0, 0), np.float32)


def _exact_pairs(
    a: np.ndarray, b: np.ndarray, vectors_of: Callable[[np.ndarray], np.ndarray]
) -> np.ndarray:
    """Exact cosines of chunk pairs (a[i], b[i]), the vectors of both ends looked up once."""
    if not len(a):
        return np.zeros(0, np.float32)
    ends = np.unique(np.concatenate([a, b]))
    vectors = vectors_of(ends)  # rows in ascending chunk id order
    ia, ib = np.searchsorted(ends, a), np.searchsorted(ends, b)
    out = np.empty(len(a), np.float32)
    for s in range(0, len(a), PAIR_CHUNK):  # (PAIR_CHUNK, dim) rows at a time, not all pairs
        out[s : s + PAIR_CHUNK] = np.einsum(
            "ij,ij->i", vectors[ia[s : s + PAIR_CHUNK]], vectors[ib[s : s + PAIR_CHUNK]]
        )
    return out


def _ivf_index(dim: int, n: int, sample: np.ndarray) -> faiss.IndexIVF:
    nlist = int(min(MAX_LISTS, max(64, 4 * math.sqrt(n))))
    nlist = min(nlist, max(1, len(sample) // 16))  # at least 16 training vectors a list
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFScalarQuantizer(
        quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
    )
    index.cp.niter = KMEANS_ITERATIONS
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    index.nprobe = min(NPROBE, nlist)
    return index


def _add_sized(index: faiss.IndexIVF, batches: VectorBatches) -> None:
    """Add every vector (with its chunk id) to a trained IVF index, each list's memory sized
    once: a first pass assigns the lists (16 bytes a vector), the second adds with those
    assignments. Lists grown vector batch by vector batch double their capacity, up to twice
    the 8-bit codes' memory (384 MB at 1M 384-dim vectors)."""
    found_ids, found_lists = [], []
    for _, chunk_ids, vectors in batches():
        found_ids.append(chunk_ids)
        found_lists.append(index.quantizer.assign(vectors, 1).ravel().astype(np.int64))
    ids, lists = np.concatenate(found_ids), np.concatenate(found_lists)
    del found_ids, found_lists
    order = np.argsort(ids)
    ids, lists = ids[order], lists[order]
    if index.invlists is None:
        raise ValueError("an IVF index without its inverted lists")
    invlists = faiss.downcast_InvertedLists(index.invlists)
    for list_no, size in enumerate(np.bincount(lists, minlength=index.nlist).tolist()):
        invlists.resize(list_no, size)  # the capacity stays when the size goes back to 0
        invlists.resize(list_no, 0)
    for _, chunk_ids, vectors in batches():
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        chunk_ids = np.ascontiguousarray(chunk_ids, dtype=np.int64)
        assigned = np.ascontiguousarray(lists[np.searchsorted(ids, chunk_ids)])
        index.add_core(
            len(vectors),
            faiss.swig_ptr(vectors),
            faiss.swig_ptr(chunk_ids),
            faiss.swig_ptr(assigned),
        )


def all_pairs(
    batches: VectorBatches,
    n: int,
    dim: int,
    threshold: float,
    k: int,
    chunk_doc: tuple[np.ndarray, np.ndarray],
    seed: int = 0,
    accept: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> Pairs:
    """Every pair of a collection's documents with cosine >= threshold among each document's
    k nearest neighbours.

    Args:
        batches: called once per pass; yields (doc ids, chunk ids, vectors) items.
        n: documents in the collection (to size the index).
        dim: vector width.
        threshold: cosine, in (0, 1].
        k: neighbours looked at per document.
        chunk_doc: (first chunk ids ascending, their doc ids).
        seed: for the IVF training sample.
        accept: the pair check beyond the cosine (the word check): given the doc ids of one
            query batch's candidates, a bool mask of those to keep. Applied batch by batch, so
            only the accepted candidates are held and rescored, never all k x n of them.
    Returns:
        Pairs; `searched` is n.
    """
    if n < 2:
        return Pairs.empty(n)
    index: faiss.Index
    if n <= FLAT_LIMIT:
        index = faiss.IndexIDMap(faiss.IndexFlatIP(dim))
        slack = 0.0
        for _, chunk_ids, vectors in batches():
            index.add_with_ids(vectors, chunk_ids)
    else:
        rng = np.random.default_rng(seed)
        want = min(n, TRAIN_SAMPLE)
        parts = [v[rng.random(len(v)) < want / n] for _, _, v in batches()]
        ivf = _ivf_index(dim, n, np.concatenate(parts))
        del parts  # the training sample (up to 100 MB) is not kept for the search
        slack = SQ8_SLACK
        _add_sized(ivf, batches)
        index = ivf
        del ivf  # one name holds it, so that `del index` below frees it
    kk = min(k + 1, n)
    keys, docs = chunk_doc
    out_a, out_b, out_s = [], [], []
    for _, chunk_ids, vectors in batches():
        for start in range(0, len(chunk_ids), QUERY_BATCH):
            own = chunk_ids[start : start + QUERY_BATCH]
            scores, found = index.search(vectors[start : start + QUERY_BATCH], kk)
            hit = (found >= 0) & (found != own[:, None]) & (scores >= threshold - slack)
            rows, cols = np.nonzero(hit)
            a, b, s = own[rows], found[rows, cols], scores[rows, cols]
            if accept is not None and len(a):
                keep = accept(docs[np.searchsorted(keys, a)], docs[np.searchsorted(keys, b)])
                a, b, s = a[keep], b[keep], s[keep]
            out_a.append(a)
            out_b.append(b)
            out_s.append(s)
    del index
    a, b, s = _dedupe(np.concatenate(out_a), np.concatenate(out_b), np.concatenate(out_s))
    if slack:  # 8-bit scores: recompute candidates from the stored float32 vectors
        s = _exact_pairs(a, b, lambda ends: _gather(batches, ends))
        keep = s >= threshold
        a, b, s = a[keep], b[keep], s[keep]
    return Pairs(docs[np.searchsorted(keys, a)], docs[np.searchsorted(keys, b)], s, searched=n)


def new_pairs(
    new_chunks: np.ndarray,
    seen_chunks: np.ndarray,
    search_index,
    threshold: float,
    k: int,
    chunk_doc: tuple[np.ndarray, np.ndarray],
    fetch: Callable[[np.ndarray], np.ndarray],
) -> Pairs:
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
    queries = fetch(new_chunks)  # (n_new, dim), one round trip
    out_a, out_b = [], []
    if search_index is not None and len(seen_chunks):
        kk = min(k, len(seen_chunks))
        for start in range(0, len(new_chunks), QUERY_BATCH):
            own = new_chunks[start : start + QUERY_BATCH]
            _, found = search_index.search(queries[start : start + QUERY_BATCH], kk, seen_chunks)
            rows, cols = np.nonzero(found >= 0)
            out_a.append(own[rows])
            out_b.append(found[rows, cols])
    if len(new_chunks) > 1:  # the new documents among themselves, exactly
        local = faiss.IndexIDMap(faiss.IndexFlatIP(queries.shape[1]))
        local.add_with_ids(queries, new_chunks)
        kk = min(k + 1, len(new_chunks))
        for start in range(0, len(new_chunks), QUERY_BATCH):
            own = new_chunks[start : start + QUERY_BATCH]
            _, found = local.search(queries[start : start + QUERY_BATCH], kk)
            rows, cols = np.nonzero((found >= 0) & (found != own[:, None]))
            out_a.append(own[rows])
            out_b.append(found[rows, cols])
    if not out_a:
        return Pairs.empty(len(new_chunks))
    a, b, _ = _dedupe(
        np.concatenate(out_a),
        np.concatenate(out_b),
        np.zeros(sum(len(x) for x in out_a), np.float32),
    )

    def vectors_of(ends: np.ndarray) -> np.ndarray:
        is_new = np.isin(ends, new_chunks)
        out = np.zeros((len(ends), queries.shape[1]), np.float32)
        out[is_new] = queries[np.searchsorted(new_chunks, ends[is_new])]
        if (~is_new).any():
            out[~is_new] = fetch(ends[~is_new])
        return out

    s = _exact_pairs(a, b, vectors_of)  # cosines from the stored float32 vectors
    keep = s >= threshold
    keys, docs = chunk_doc
    return Pairs(
        docs[np.searchsorted(keys, a[keep])],
        docs[np.searchsorted(keys, b[keep])],
        s[keep],
        searched=len(new_chunks),
    )
