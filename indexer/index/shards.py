"""IVF indexes built in shards: the index is trained once on a sample (the writer), sent to
the workers as bytes, each worker adds its vectors with their global ids into a shard, and the
shards' inverted lists are merged into the one published index (`merge_from`, as FAISS's
`contrib/ondisk.py` merges lists). The trained quantizer is the one a one-process build trains
on the same sample, so the merged index gives the same ids and scores at nprobe = nlist.

Specs that cannot be merged (`unmergeable`: HNSW graphs, fast-scan PQ, rescoring stages, flat
indexes) are built on the writer. Does not talk to a cluster (the caller passes `submit`) and
does not read the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import faiss
import numpy as np

from indexer.config import IndexConfig
from indexer.errors import VectorIndexError
from indexer.index.auto import Batches, gather_rows, training_rows, tunable, tune_batches
from indexer.index.vector import VectorIndex
from indexer.records.index_spec import parse_spec
from indexer.records.provenance import Provenance


def unmergeable(spec: str) -> str | None:
    """Why `spec`'s index cannot be built in shards and merged; None when it can.

    Args:
        spec: a FAISS factory string (`indexer.records.index_spec`).
    Returns:
        None, or the reason (the index is then built on the writer).
    """
    parsed = parse_spec(spec)
    if parsed.nlist is None:
        return f"{spec} has no inverted lists (not IVF): nothing to merge, built on the writer"
    if parsed.codes.fast_scan:
        return f"{spec} stores fast-scan PQ blocks, which merge_from does not merge"
    if parsed.refine is not None or parsed.id_map:
        return (
            f"{spec} wraps its lists (IDMap or a rescoring stage), which merge_from does not merge"
        )
    return None


def train_shard_template(spec: str, dim: int, sample: np.ndarray) -> np.ndarray:
    """An empty, trained index of `spec`, serialised (uint8 bytes) for the workers.

    Args:
        spec: an IVF factory string (`unmergeable(spec)` is None).
        dim: the vectors' width.
        sample: (n, dim) float32 training vectors.
    Returns:
        `faiss.serialize_index` of the trained, empty index.
    """
    index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    return faiss.serialize_index(index)


def add_to_shard(template: np.ndarray, ids: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """A shard: the trained template holding `vectors` under their global `ids` (on a
    worker; a pure function of its inputs, so a lost shard is rebuilt elsewhere the same).

    Args:
        template: `train_shard_template`'s bytes.
        ids: (n,) int64 chunk ids.
        vectors: (n, dim) float32.
    Returns:
        The shard, serialised.
    """
    index = faiss.deserialize_index(template)
    index.add_with_ids(
        np.ascontiguousarray(vectors, dtype=np.float32), np.ascontiguousarray(ids, dtype=np.int64)
    )
    return faiss.serialize_index(index)


def merge_shards(template: np.ndarray, shards: Iterable[np.ndarray]) -> faiss.Index:
    """The template with every shard's inverted lists appended, in shard order.

    Args:
        template: `train_shard_template`'s bytes.
        shards: `add_to_shard` results (read one at a time when given lazily).
    Returns:
        The merged FAISS index.
    """
    index = faiss.deserialize_index(template)
    for data in shards:
        _append(index, data)
    return index


def _append(index: faiss.Index, shard: np.ndarray) -> None:
    """Move a serialised shard's inverted lists into `index` (ids kept as they are)."""
    lists = faiss.extract_index_ivf(index)
    other = faiss.deserialize_index(shard)  # held: the extracted lists point into it
    lists.merge_from(faiss.extract_index_ivf(other), 0)
    index.ntotal = lists.ntotal  # a pre-transform wrapper counts for itself


def build_in_shards(
    spec: str,
    provenance: Provenance,
    config: IndexConfig,
    batches: Batches,
    count: int,
    submit: Callable,
    in_flight: int = 4,
    tune_queries: np.ndarray | None = None,
) -> VectorIndex:
    """`VectorIndex.build_from_batches` with the adding done by `submit`ted shard tasks, one
    per batch of vectors, and the shards merged here; same training sample, same result.

    Args:
        spec: an IVF factory string that `unmergeable` accepts.
        provenance: what produced the vectors.
        config: the index section.
        batches: (ids, vectors) batches, as for `build_from_batches`; each becomes a shard.
        count: vectors the batches hold.
        submit: `submit(fn, *args)` returning a future with `.result()`.
        in_flight: shards built at once (each holds its batch's vectors until merged).
    Returns:
        The merged VectorIndex.
    Raises:
        VectorIndexError: the spec cannot be merged, or there are no vectors to train on.
    """
    reason = unmergeable(spec)
    if reason is not None:
        raise VectorIndexError(f"index.spec {reason}")
    if count == 0:
        raise VectorIndexError(f"index.spec '{spec}' must be trained, and there are no vectors")
    rows = training_rows(count, spec, 64 if config.spec == "auto" else 256)
    template = train_shard_template(
        spec, provenance.dim, gather_rows(batches, rows, provenance.dim)[1]
    )
    index = faiss.deserialize_index(template)
    pending = []
    for ids, vectors in batches():
        pending.append(submit(add_to_shard, template, ids, vectors))
        while len(pending) > in_flight:
            _append(index, pending.pop(0).result())
    for future in pending:
        _append(index, future.result())
    out = VectorIndex(index, spec, provenance, config)
    if config.spec == "auto" and tunable(spec) is not None:
        out.tuning = tune_batches(
            out.index,
            spec,
            batches,
            count,
            config.target_recall,
            config.tune_sample,
            k_factor=out._k_factor(),
            headroom=config.tune_headroom,
            queries=tune_queries,
        )
    return out
