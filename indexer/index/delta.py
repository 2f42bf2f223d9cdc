"""The delta of an index version: the vectors added since its base, searched beside the base
(less its deleted ids) and the two top-k merged by score.

Two kinds. A base with IVF lists (every `auto` index above `flat_limit`) gets a *probed* delta:
an empty copy of the base as trained (its coarse centroids and codebooks, saved beside the
base at the rebuild: `index/bases/<name>.trained.faiss`) that the added vectors fill, so a
query probes the same few lists in it as in the base and its cost stays flat as it grows; it
may reach DELTA_REBUILD (5 %) of the base. Other bases (Flat, HNSW, an index built on a GPU or
before trained copies were kept) get an exact flat delta, scanned whole by every query, hence
also bounded by DELTA_MAX_BYTES.

A rebuild writes the base once and every version published after it maps that same file; a
version holds only what changed since (`indexer.index.version_files`), so publishing costs what
changed rather than the whole index.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from indexer.core.fsio import fsync_dir, fsync_file
from indexer.errors import VectorIndexError
from indexer.index.auto import search_params
from indexer.index.first_pass import ivf_of
from indexer.index.rescore import ids_by_position

log = logging.getLogger(__name__)

# the delta grows to at most this share of the base's vectors before a rebuild; a flat one
# also to this many bytes of float32 vectors: each process holds it privately and scans all of
# it on every query, ~60 ns a 384-dim vector on one core (benchmarks/index_delta.py: 10,000
# took 0.6 ms beside the base's 0.2 ms at 200k vectors), so 16 MiB keeps that to about a
# millisecond. A probed delta's query cost is that of the base's (nprobe lists each).
DELTA_REBUILD = 0.05
DELTA_MAX_BYTES = 16 * 2**20
TRAINED_SUFFIX = ".trained.faiss"  # beside a base: its empty trained copy (probed deltas)


def new_delta(dim: int, metric: int) -> faiss.IndexIDMap2:
    """An empty delta: exact search over chunk ids, in the base's metric."""
    flat = faiss.IndexFlatL2(dim) if metric == faiss.METRIC_L2 else faiss.IndexFlatIP(dim)
    return faiss.IndexIDMap2(flat)  # FAISS's Python wrapper holds `flat` for it


def id_map_over(inner: faiss.Index, ids: np.ndarray, like: faiss.Index) -> faiss.Index:
    """A plain IDMap over `inner` (`like`'s size and metric) with `ids` by position, valid
    while `inner` is: FAISS wraps only an empty index, so an empty one of the same metric is
    wrapped, then the wrapper pointed at `inner` (which it neither owns nor frees)."""
    plain = faiss.IndexIDMap(faiss.IndexFlat(like.d, like.metric_type))
    plain.own_fields = False
    plain.index = inner
    plain.is_trained = like.is_trained
    faiss.copy_array_to_vector(ids, plain.id_map)
    plain.ntotal = like.ntotal
    return plain


def trained_copy(index: faiss.Index) -> np.ndarray | None:
    """`index` (trained, still empty) serialised, when it has IVF lists a delta can reuse:
    the probed delta's template. None for indexes without lists (Flat, HNSW)."""
    if not has_lists(index):
        return None
    return faiss.serialize_index(index)


def has_lists(index: faiss.Index) -> bool:
    """Whether `index` (or the index under its IDMap / rescoring stage) has IVF lists."""
    return ivf_of(index) is not None


def probed_delta(trained: np.ndarray) -> faiss.Index:
    """An empty probed delta from a base's trained copy (`trained_copy`)."""
    return faiss.deserialize_index(trained)


def write_template(trained: np.ndarray, path: Path) -> Path:
    """Write a base's trained copy to `path` atomically (temp name, fsync, rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    trained.tofile(tmp)
    fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path


def read_template(path: Path, base: Path) -> np.ndarray | None:
    """A base's trained copy from `path`; derived from the `base` file and written to `path`
    when missing (a base written before templates were kept: its store gets probed deltas
    without a rebuild). None (the delta stays flat, with a warning) when neither works."""
    try:
        if not path.is_file():
            write_template(derive_template(base), path)
        return np.fromfile(path, dtype=np.uint8)
    except (OSError, RuntimeError) as exc:
        log.warning("%s unreadable and not derivable (%s): the delta is exact flat", path, exc)
        return None


def derive_template(base: Path) -> np.ndarray:
    """The trained, empty copy of the IVF index in `base`, byte for byte what `trained_copy`
    gave before the build added its vectors: the file mapped without its lists' data, the
    lists replaced by empty ones of the same layout (block lists for fast-scan codes), a
    rescoring stage replaced by an empty one of its kind (the scalar quantiser's trained
    ranges copied), an IDMap2 rebuilt empty around them (the base's file holds a plain IDMap:
    `version_files.plain_id_map`)."""
    flags = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_SKIP_IVF_DATA
    loaded = faiss.read_index(str(base), flags)
    ivf: Any = faiss.downcast_index(faiss.extract_index_ivf(loaded))  # the stubs lack IVF members
    if isinstance(ivf, faiss.IndexIVFFastScan):
        packer = ivf.get_CodePacker()
        packer.this.disown()  # the block lists own and free it
        lists = faiss.BlockInvertedLists(ivf.nlist, packer)  # type: ignore[attr-defined]  # unstubbed
    else:
        lists = faiss.ArrayInvertedLists(ivf.nlist, ivf.code_size)
    lists.this.disown()  # the IVF owns and frees it
    ivf.replace_invlists(lists, True)
    ivf.ntotal = 0
    top: Any = faiss.downcast_index(loaded)
    wrapped = isinstance(top, faiss.IndexIDMap)  # IDMap2, or a base written as a plain IDMap
    inner = faiss.downcast_index(top.index) if wrapped else top
    out: faiss.Index = ivf
    if isinstance(inner, faiss.IndexRefine):
        old: Any = faiss.downcast_index(inner.refine_index)
        fresh: Any
        if isinstance(old, faiss.IndexFlat):
            fresh = faiss.IndexFlat(old.d, old.metric_type)
        else:
            fresh = faiss.IndexScalarQuantizer(old.d, old.sq.qtype, old.metric_type)
            faiss.copy_array_to_vector(faiss.vector_to_array(old.sq.trained), fresh.sq.trained)
            fresh.is_trained = True
        out = faiss.IndexRefine(ivf, fresh)
        out.k_factor = inner.k_factor
    if wrapped:  # an IDMap2, as built: a delta removes and reconstructs by id
        out = faiss.IndexIDMap2(out)
    return faiss.serialize_index(out)  # `loaded`, which owns `ivf`, is alive until here


def batch_selector(allowed) -> tuple[faiss.IDSelector, list]:
    """An IDSelectorBatch of `allowed` ids, and what must outlive the search using it (the
    C++ side points into the id array)."""
    ids = np.ascontiguousarray(allowed, dtype=np.int64)
    selector = faiss.IDSelectorBatch(ids)
    return selector, [ids, selector]


def probed_params(delta: faiss.Index, nprobe: int, k_factor: int | None, allowed):
    """A probed delta's search parameters: the base's nprobe and rescoring; restricted to
    `allowed`, every list (the delta is small) with their selector, translated under an IDMap
    over a rescoring stage as for the base (`VectorIndex._search_params`)."""
    selector: faiss.IDSelector | None = None
    keep: list = []
    if allowed is not None:
        selector, keep = batch_selector(allowed)
        nprobe = faiss.extract_index_ivf(delta).nlist
        if k_factor is not None and hasattr(delta, "id_map"):
            selector = faiss.IDSelectorTranslated(delta.id_map, selector)
            keep.append(selector)
    params = search_params("nprobe", nprobe, selector, k_factor)
    params.keep_alive = keep
    return params


def remove_from(delta: faiss.Index, ids: np.ndarray, trained: np.ndarray | None) -> faiss.Index:
    """`delta` without `ids`; a delta that cannot remove (an IDMap over a rescoring stage) is
    rebuilt from its other vectors (at most DELTA_REBUILD of the base: the cost of what
    changed). Returns the delta to keep (the same object, or the rebuilt one)."""
    try:
        delta.remove_ids(faiss.IDSelectorBatch(ids))
        return delta
    except RuntimeError:
        if trained is None:
            raise
    keep = np.setdiff1d(stored_ids(delta), ids)
    vectors = delta.reconstruct_batch(keep) if len(keep) else None
    fresh = probed_delta(trained)
    if vectors is not None:
        fresh.add_with_ids(np.ascontiguousarray(vectors, np.float32), keep)
    return fresh


def tombstoned(index: faiss.Index) -> bool:
    """Whether deletes from `index` are recorded rather than removed: an IDMap over HNSW or
    over a rescoring stage (IndexRefine), neither of which implements remove_ids."""
    inner = getattr(index, "index", None)
    if inner is None or not hasattr(index, "id_map"):
        return False
    return isinstance(faiss.downcast_index(inner), (faiss.IndexHNSW, faiss.IndexRefine))


def stored_ids(index: faiss.Index) -> np.ndarray:
    """The ids a FAISS index stores: its IDMap's, or those in its inverted lists."""
    if hasattr(index, "id_map"):  # (where a base's reader left them: `ids_by_position`)
        return np.array(ids_by_position(index), np.int64)
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
    delta: faiss.Index, queries: np.ndarray, k: int, allowed: np.ndarray | None, params=None
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k over the delta, restricted to `allowed` ids (which the delta holds): exact over a
    flat delta, with `params` (the base's nprobe and rescoring, the selector of `allowed`) over
    a probed one."""
    if params is not None:
        return delta.search(queries, max(1, min(k, delta.ntotal)), params=params)
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
