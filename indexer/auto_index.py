"""`index.spec: auto`: choose a FAISS index from collection size and a memory budget, then tune
its search parameter (nprobe / efSearch) on held queries until recall@10 reaches a target.

Pure choices and measurements over arrays; does not read the store or write files (the
tuning record is saved beside the index by `VectorIndex.save`).
"""

from __future__ import annotations

import logging
import math

import faiss
import numpy as np

from indexer.config import IndexConfig
from indexer.errors import IndexError_

log = logging.getLogger(__name__)


def choose_spec(n_vectors: int, dim: int, config: IndexConfig) -> str:
    """The FAISS factory string `auto` stands for.

    Exact inner-product search (`Flat`) up to `index.flat_limit` vectors while they fit in
    `index.memory_budget_mb`; above, an IVF index with about 4·√n lists (≥ 39 training points
    per list) storing vectors in full (`Flat`), as 8-bit scalars (`SQ8`, ¼ the memory) or as
    product-quantised codes (`PQm`): the most precise that fits the budget.

    Args:
        n_vectors: vectors the index will hold.
        dim: their dimension.
        config: the index section (flat limit, memory budget).
    Raises:
        IndexError_: even the smallest PQ codes do not fit the memory budget.
    """
    budget = math.inf if config.memory_budget_mb is None else config.memory_budget_mb * 2**20
    if n_vectors <= config.flat_limit and estimate_bytes("Flat", n_vectors, dim) <= budget:
        return "Flat"
    lists = 1 << round(math.log2(4 * math.sqrt(max(n_vectors, 1))))
    lists = max(1, min(lists, n_vectors // 39))
    candidate = "Flat"
    for codes in ["Flat", "SQ8"] + [f"PQ{m}" for m in _pq_sizes(dim)]:
        candidate = f"IVF{lists},{codes}"
        if estimate_bytes(candidate, n_vectors, dim) <= budget:
            return candidate
    need = estimate_bytes(candidate, n_vectors, dim) / 2**20
    raise IndexError_(
        f"index.memory_budget_mb={config.memory_budget_mb} is too small for {n_vectors} vectors "
        f"of dim {dim}: the smallest choice ({candidate}) needs ~{need:.0f} MB; raise the budget "
        "or set index.spec to a FAISS factory string"
    )


def estimate_bytes(spec: str, n_vectors: int, dim: int) -> float:
    """Approximate RAM of a `Flat`, `IVFn,Flat|SQ8|PQm` index: codes, int64 ids, centroids."""
    parts = spec.split(",")
    codes = parts[-1]
    if codes == "SQ8":
        per_vector = dim
    elif codes.startswith("PQ"):
        per_vector = int(codes[2:].split("x")[0])
    else:
        per_vector = 4 * dim
    lists = int(parts[0][3:]) if parts[0].startswith("IVF") and parts[0][3:].isdigit() else 0
    return n_vectors * (per_vector + 8) + lists * dim * 4


def _pq_sizes(dim: int) -> list[int]:
    """PQ sub-quantiser counts dividing `dim`, most precise first, at least 8."""
    return [m for m in (dim // 2, dim // 4, dim // 8, dim // 16, dim // 32)
            if m >= 8 and dim % m == 0]


def tunable(spec: str) -> tuple[str, list[int]] | None:
    """(search parameter, values to try, doubling) of an approximate spec; None for exact."""
    head = spec.split(",")[0]
    if head.startswith("IVF"):
        lists = int("".join(ch for ch in head[3:] if ch.isdigit()) or 1)
        return "nprobe", [v for v in (1 << i for i in range(24)) if v < lists] + [lists]
    if "HNSW" in spec:
        return "efSearch", [16, 32, 64, 128, 256, 512, 1024, 2048]
    return None


def training_sample(vectors: np.ndarray, spec: str, per_list: int = 64, seed: int = 0
                    ) -> np.ndarray:
    """At most `per_list` × lists vectors (seeded draw) to train an IVF quantizer on.

    k-means cost grows with lists × training points; 64 points a list keeps 1M vectors with
    4096 lists to minutes on two cores while staying above FAISS's 39-a-list minimum.
    """
    head = spec.split(",")[0]
    if not head.startswith("IVF") or not head[3:].isdigit():
        return vectors
    limit = per_list * int(head[3:])
    if len(vectors) <= limit:
        return vectors
    rows = np.sort(np.random.default_rng(seed).choice(len(vectors), limit, replace=False))
    return np.ascontiguousarray(vectors[rows])


def search_params(param: str, value: int, selector=None):
    """FAISS search parameters setting `param` (nprobe or efSearch) to `value`."""
    if param == "nprobe":
        params = faiss.SearchParametersIVF(nprobe=int(value))
    else:
        params = faiss.SearchParametersHNSW(efSearch=int(value))
    if selector is not None:
        params.sel = selector
    return params


def tune(index: faiss.Index, spec: str, vectors: np.ndarray, ids: np.ndarray,
         target: float = 0.95, sample: int = 1000, seed: int = 0) -> dict:
    """The smallest nprobe/efSearch whose recall@10 against exact search reaches `target`.

    Queries are `sample` of the indexed vectors (seeded draw). Each query's own id is left out
    of both result lists, so recall counts its 10 nearest *other* vectors; the truth comes
    from exact inner-product search over all `vectors`. Doubles the parameter until the
    target is reached, then bisects down to the smallest value that still reaches it.

    Args:
        index: a filled FAISS index (ids = `ids`).
        spec: its factory string (decides the parameter).
        vectors: (n, dim) float32, the vectors in the index.
        ids: (n,) int64, their ids.
    Returns:
        {"param", "value", "recall@10", "target", "reached", "sample", "seconds", "curve"}.
    """
    import time

    started = time.perf_counter()
    param, values = tunable(spec)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(vectors), min(sample, len(vectors)), replace=False))
    queries = np.ascontiguousarray(vectors[rows])
    own = np.asarray(ids)[rows]
    k = min(11, len(vectors))
    _, exact_pos = faiss.knn(queries, vectors, k, metric=faiss.METRIC_INNER_PRODUCT)
    truth = [set(_top10_others(np.asarray(ids)[r[r >= 0]], o)) for r, o in zip(exact_pos, own)]
    curve: dict[int, float] = {}

    def recall(value: int) -> float:
        if value not in curve:
            _, found = index.search(queries, k, params=search_params(param, value))
            curve[value] = float(np.mean([
                len(t & set(_top10_others(f, o))) / max(len(t), 1)
                for f, t, o in zip(found, truth, own)
            ]))
        return curve[value]

    low, high = 0, None
    for value in values:
        if recall(value) >= target:
            high = value
            break
        low = value
    if high is None:
        best = values[-1]
        log.warning("index %s reaches recall@10 %.3f at %s=%d, below the target %.2f: the "
                    "memory budget forces coarse codes; raise index.memory_budget_mb or lower "
                    "index.target_recall", spec, curve[best], param, best, target)
    else:
        while high - low > 1:
            mid = (low + high) // 2
            if recall(mid) >= target:
                high = mid
            else:
                low = mid
        best = high
    return {
        "param": param, "value": int(best), "recall@10": round(curve[best], 4),
        "target": target, "reached": curve[best] >= target, "sample": len(rows),
        "seconds": round(time.perf_counter() - started, 3),
        "curve": {str(v): round(r, 4) for v, r in sorted(curve.items())},
    }


def _top10_others(row: np.ndarray, own_id: int) -> list[int]:
    return [int(i) for i in row if i >= 0 and i != own_id][:10]


def build_on_gpu(index: faiss.Index, spec: str, vectors: np.ndarray, ids: np.ndarray
                 ) -> faiss.Index:
    """Train and fill an IVF index on every visible GPU, then bring it back to the CPU.

    Searching stays on the CPU: filtered search needs FAISS's IDSelector, which GPU indexes
    do not take, and a single query gains nothing from the device.
    """
    gpu = faiss.index_cpu_to_all_gpus(index)
    if not gpu.is_trained:
        gpu.train(training_sample(vectors, spec))
    gpu.add_with_ids(vectors, ids)
    return faiss.index_gpu_to_cpu(gpu)
