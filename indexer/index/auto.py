"""`index.spec: auto`: choose a FAISS index from collection size and a memory budget, then tune
its search parameter (nprobe / efSearch) on held queries until recall@10 reaches a target.
Also what a spec costs in memory, in all and what a mapped load keeps private, and how many
vectors train it (specs are read by `indexer.records.index_spec`).

Pure choices and measurements over arrays; does not read the store or write files (the
tuning record is saved beside the index by `VectorIndex.save`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

import faiss
import numpy as np

from indexer.config import IndexConfig
from indexer.errors import VectorIndexError
from indexer.records.index_spec import parse_spec

log = logging.getLogger(__name__)


def has_gpu() -> bool:
    return hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0


def is_gpu(index: faiss.Index) -> bool:
    return "Gpu" in type(index).__name__


def resolve_spec(
    spec: str, n_vectors: int, config: IndexConfig | None = None, dim: int | None = None
) -> str:
    """The FAISS factory string for `index.spec`; `auto` picks by collection size and memory
    budget (`indexer.index.auto.choose_spec`; the index section's defaults without `config`).

    Args:
        spec: `auto` or a FAISS factory string.
        n_vectors: vectors the index will hold.
        config: the index section.
        dim: the vectors' dimension (needed for `auto`).
    Returns:
        The factory string.
    Raises:
        VectorIndexError: `spec` is not a form `indexer.records.index_spec` reads.
    """
    if spec != "auto":
        parse_spec(spec)
        return spec
    if dim is None:
        raise ValueError("resolve_spec('auto', ...) needs the vectors' dimension (dim=)")
    return choose_spec(n_vectors, dim, config or IndexConfig())


def choose_spec(n_vectors: int, dim: int, config: IndexConfig) -> str:
    """The FAISS factory string `auto` stands for.

    Exact inner-product search (`Flat`) up to `index.flat_limit` vectors while they fit in
    `index.memory_budget_mb`. Above, an IVF index with about 4·√n lists (≥ 39 training
    points per list) whose first pass scans 4-bit product-quantised codes with FAISS's
    SIMD fast-scan (`PQ{dim/2}x4fs`, dim/4 bytes a vector) and rescores `refine_factor`
    candidates per result, the first of these that fits the budget:

    - `…,Refine(SQfp16)`: rescored with the vectors in half precision (README "Index
      scale": 4–5× faster single queries than HNSW at the same recall on a million vectors,
      measured with float32 ones). Half-precision codes, not the float32 vectors (`RFlat`,
      until 2026-12-06): the same recall, 0.9418 against 0.9422 at nprobe 256 and 0.8066
      against 0.8070 at 64, in 1.01 GB of base instead of 1.78 on disk and in the page cache,
      and no slower (single-thread p50 on the served, mapped path 1.60 / 2.50 ms warm
      against 2.20 / 3.56, cold 4.10 / 5.18 against 4.52 / 5.82; 1M vectors of the scale
      corpus, 500 held-out, k_factor 32, AMD EPYC, `benchmarks/refine_codes.py`). The
      store keeps every vector in float32 already: a second float32 copy in the base
      doubled the vectors on disk (15.5 GB at 10M);
    - `…,Refine(SQ8)`: rescored with int8 vectors (¼ the memory of float32; 0.018 less
      recall than half precision at nprobe 256 in the same benchmark, so only under a budget);
    - larger than the budget, served from the file's pages (`VectorIndex.load` maps it):
      the same fast-scan codes (`PQ{dim/2}x4fs`), their lists in a file beside the base
      (`indexer.index.block_lists`), with the half-precision rescoring codes, all mapped, when what
      a mapped load keeps private (`resident_bytes`: ids and centroids) fits the budget; a
      search reads the lists it probes and the few candidates it rescores. At equal nprobe
      their first pass is 2.4x faster than 8-bit codes in plain lists for 0.02 less recall
      (1M vectors of the scale corpus, nprobe 256 of 4096: 2.0 ms and 0.911 against 5.0 ms
      and 0.932, `benchmarks/mapped_codes.py`), and those (`mapped_spec`) keep as much
      private, so they come after; half the bytes, `PQ{dim/4}x4fs`, stop at recall 0.66,
      so they are not a choice here;
    - no rescoring, `PQ{m}x4fs` codes, most precise first (recall may fall short of the
      target: tuning warns).

    Fewer than 39·16 vectors cannot train 4-bit codes: `IVF{lists},Flat`, then `SQ8`, then
    `IVF{lists},Flat` mapped.

    Args:
        n_vectors: vectors the index will hold.
        dim: their dimension.
        config: the index section (flat limit, memory budget).
    Raises:
        VectorIndexError: even the smallest codes do not fit the memory budget.
    """
    budget = math.inf if config.memory_budget_mb is None else config.memory_budget_mb * 2**20
    if n_vectors <= config.flat_limit and estimate_bytes("Flat", n_vectors, dim) <= budget:
        return "Flat"
    lists = _list_count(n_vectors)
    sizes = _pq_sizes(dim)
    if n_vectors < PQ_MIN_VECTORS or not sizes:
        in_memory, mapped, lossy = [f"IVF{lists},Flat", f"IVF{lists},SQ8"], f"IVF{lists},Flat", []
        fast_mapped = []
    else:
        fast = f"IVF{lists},PQ{sizes[0]}x4fs"
        in_memory = [f"{fast},{REFINE}", f"{fast},Refine(SQ8)"]
        fast_mapped = [f"{fast},{REFINE}"]
        mapped = mapped_spec(n_vectors, dim)
        lossy = [f"IVF{lists},PQ{m}x4fs" for m in sizes]
    # (candidate, its cost against the budget), in order of preference
    ranked = [(c, estimate_bytes(c, n_vectors, dim)) for c in in_memory]
    ranked += [(c, resident_bytes(c, n_vectors, dim)) for c in fast_mapped]
    ranked += [(mapped, resident_bytes(mapped, n_vectors, dim))]
    ranked += [(c, estimate_bytes(c, n_vectors, dim)) for c in lossy]
    for candidate, cost in ranked:
        if cost <= budget:
            return candidate
    smallest, need = min(ranked, key=lambda pair: pair[1])
    raise VectorIndexError(
        f"index.memory_budget_mb={config.memory_budget_mb} is too small for {n_vectors} vectors "
        f"of dim {dim}: the smallest choice ({smallest}) needs ~{need / 2**20:.0f} MB; raise the "
        "budget or set index.spec to a FAISS factory string"
    )


def mapped_spec(n_vectors: int, dim: int) -> str:
    """The spec `auto` serves from its mapped file when the in-memory ones exceed the budget:
    IVF lists of product-quantised codes in the plain layout, which a mapped load leaves in the file
    (fast-scan blocks are read whole into each process), then half-precision rescoring codes
    (`REFINE`), also mapped. The codes are 8-bit `PQ{dim/4}x8`, the same bytes as the in-memory
    choice's `PQ{dim/2}x4fs`: without fast-scan, FAISS scans 8-bit codes with byte-indexed tables
    and 4-bit ones through a generic bit reader, and at equal bytes both give the same recall after
    rescoring (`benchmarks/mapped_codes.py`, 1M vectors of the scale corpus, nprobe 128 of 4096
    lists: recall@10 0.914 both, first pass 3.4 ms against 24.2 ms). Fewer than `PQ8_MIN_VECTORS`
    vectors (or a dimension not divisible by 4) keep 4-bit codes. `np`: no polysemous training
    (unused by inner-product search; ~10x the codes' training).

    Args:
        n_vectors: vectors the index will hold (at least PQ_MIN_VECTORS).
        dim: their dimension (`_pq_sizes(dim)` is not empty).
    Returns:
        e.g. `IVF4096,PQ96x8np,Refine(SQfp16)` for a million vectors of 384 dimensions.
    """
    lists, half = _list_count(n_vectors), _pq_sizes(dim)[0]
    if n_vectors >= PQ8_MIN_VECTORS and half % 2 == 0 and half // 2 >= 8:
        return f"IVF{lists},PQ{half // 2}x8np,{REFINE}"
    return f"IVF{lists},PQ{half}x4np,{REFINE}"


REFINE = "Refine(SQfp16)"  # the rescoring stage `auto` builds (`choose_spec`)


def _list_count(n_vectors: int) -> int:
    """IVF lists for `n_vectors`: about 4·√n, a power of two, ≥ 39 vectors a list."""
    lists = 1 << round(math.log2(4 * math.sqrt(max(n_vectors, 1))))
    return max(1, min(lists, n_vectors // 39))


PQ_MIN_VECTORS = 39 * 16  # FAISS's minimum to train 16 centroids per 4-bit sub-quantiser
PQ8_MIN_VECTORS = 39 * 256  # and 256 per 8-bit one
ID_MAP_BYTES = 56  # IndexIDMap2: 8-byte id + reverse unordered_map entry
SERVED_ID_BYTES = 8  # a base is read as a plain IDMap (`version_files.plain_id_map`): the id


def estimate_bytes(spec: str, n_vectors: int, dim: int) -> float:
    """Approximate RAM of an index (`indexer.records.index_spec` forms), with or without a
    rescoring stage (`RFlat`, `Refine(SQfp16)`, `Refine(SQ8)`).

    Per vector: its codes (`Flat` 4·dim, `SQ8` dim, `PQm` m, `PQmxb[fs]` m·b/8 bytes), the
    rescoring codes, and an int64 id in the IVF lists, or for `IDMap2`-wrapped indexes the
    id array plus its reverse hash map (~56 bytes); HNSW adds its graph, 2·m int32 links
    on level 0 plus ~1 on upper levels, a level and an offset (8·m + 16 bytes). IVF adds
    its centroids (and their HNSW graph for an `IVFn_HNSWm` quantizer).

    Args:
        spec: a FAISS factory string.
        n_vectors: vectors the index holds.
        dim: their dimension.
    Returns:
        Bytes.
    """
    parsed = parse_spec(spec)
    inner = parsed.code_dim(dim)
    per_vector = parsed.codes.bytes_per_vector(inner)
    if parsed.refine is not None:
        per_vector += parsed.refine.bytes_per_vector(dim)
    if parsed.needs_id_map:
        per_vector += ID_MAP_BYTES
    lists = parsed.nlist or 0
    if lists and parsed.refine is None:
        per_vector += 8
    if parsed.hnsw_m is not None:
        per_vector += _graph_bytes(parsed.hnsw_m)
    centroids = lists * inner * 4
    if parsed.quantizer_m is not None:
        centroids += lists * _graph_bytes(parsed.quantizer_m)
    return n_vectors * per_vector + centroids


def resident_bytes(spec: str, n_vectors: int, dim: int) -> float:
    """Approximate private RAM of each process that maps the index (`VectorIndex.load`), the
    rest staying in the file's shared pages (`estimate_bytes` counts both).

    Mapped: flat, scalar-quantised and plain PQ codes (a flat index, plain IVF lists with
    their ids, a rescoring stage), fast-scan lists (written to a file beside the base and
    mapped: `indexer.index.block_lists`). Private: an HNSW
    graph and the codes under it (FAISS writes to their pages while searching), the IDMap's
    ids (8 bytes a vector: bases are read as plain IDMaps, without IDMap2's reverse map), the
    IVF centroids (and their HNSW graph), which every query reads.

    Args:
        spec: a FAISS factory string.
        n_vectors: vectors the index holds.
        dim: their dimension.
    Returns:
        Bytes.
    """
    parsed = parse_spec(spec)
    inner = parsed.code_dim(dim)
    per_vector: float = SERVED_ID_BYTES if parsed.needs_id_map else 0
    if parsed.hnsw_m is not None:
        per_vector += parsed.codes.bytes_per_vector(inner) + _graph_bytes(parsed.hnsw_m)
    centroids = (parsed.nlist or 0) * inner * 4
    if parsed.quantizer_m is not None:
        centroids += (parsed.nlist or 0) * _graph_bytes(parsed.quantizer_m)
    return n_vectors * per_vector + centroids


def _graph_bytes(m: int) -> int:
    return 8 * m + 16


def _pq_sizes(dim: int) -> list[int]:
    """PQ sub-quantiser counts dividing `dim`, most precise first, at least 8."""
    return [
        m for m in (dim // 2, dim // 4, dim // 8, dim // 16, dim // 32) if m >= 8 and dim % m == 0
    ]


def tunable(spec: str) -> tuple[str, list[int]] | None:
    """(search parameter, values to try, doubling) of an approximate spec; None for exact.

    Args:
        spec: a FAISS factory string.
    Returns:
        ("nprobe", 1, 2, 4 … nlist) for IVF, ("efSearch", 16 … 4096) for HNSW, else None.
    """
    parsed = parse_spec(spec)
    if parsed.search_param == "nprobe":
        lists = parsed.nlist
        if lists is None:
            raise ValueError(f"{spec}: an IVF spec without its list count")
        return "nprobe", [v for v in (1 << i for i in range(24)) if v < lists] + [lists]
    if parsed.search_param == "efSearch":
        return "efSearch", [16 << i for i in range(9)]  # 16 … 4096
    return None


TRAIN_LIMIT = 256 * 256  # other trained codes (PQ, SQ): FAISS trains PQ on at most this many
# IVF: at most this many training points unless FAISS's 39 a list needs more (k-means on
# 2^20 points × 16384 lists took ~30 min on two cores at 10M; 39 a list: ~640k points)
IVF_TRAIN_CAP = 1 << 19
FAISS_MIN_PER_LIST = 39


def training_rows(count: int, spec: str, per_list: int = 64, seed: int = 0) -> np.ndarray | None:
    """Sorted positions (seeded draw) of the vectors to train `spec` on; None: all `count`.

    k-means cost grows with lists × training points; 64 points a list keeps 1M vectors with
    4096 lists to minutes on two cores. Above IVF_TRAIN_CAP points (16384 lists and more: 10M
    vectors) the sample stops at the cap or FAISS's 39-a-list minimum, whichever is larger:
    tuning then sets nprobe for the target recall on the index as trained.

    Args:
        count: vectors available.
        spec: a FAISS factory string.
        per_list: IVF: training points per list (at most `per_list` × lists); any other
            spec: at most TRAIN_LIMIT.
        seed: the draw's seed.
    Returns:
        Sorted row positions, or None for all of them.
    """
    nlist = parse_spec(spec).nlist
    limit = TRAIN_LIMIT
    if nlist is not None:
        limit = min(per_list * nlist, max(IVF_TRAIN_CAP, FAISS_MIN_PER_LIST * nlist))
    if count <= limit:
        return None
    return np.sort(np.random.default_rng(seed).choice(count, limit, replace=False))


Batches = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]


def gather_rows(
    batches: Batches, rows: np.ndarray | None, dim: int
) -> tuple[np.ndarray, np.ndarray]:
    """(ids, vectors) at sorted positions `rows` (None: all) of the (ids, vectors) batches,
    in one pass, holding only those rows."""
    if rows is None:
        parts = list(batches())
        if not parts:
            return np.zeros(0, np.int64), np.zeros((0, dim), np.float32)
        return (
            np.concatenate([np.asarray(i, np.int64) for i, _ in parts]),
            np.ascontiguousarray(np.concatenate([v for _, v in parts]), dtype=np.float32),
        )
    ids = np.empty(len(rows), np.int64)
    out = np.empty((len(rows), dim), np.float32)
    start = 0
    for batch_ids, vectors in batches():
        lo, hi = np.searchsorted(rows, [start, start + len(batch_ids)])
        ids[lo:hi] = np.asarray(batch_ids)[rows[lo:hi] - start]
        out[lo:hi] = vectors[rows[lo:hi] - start]
        start += len(batch_ids)
    return ids, out


def exact_neighbours(queries: np.ndarray, batches: Batches, k: int) -> np.ndarray:
    """Ids (q, k) of each query's k nearest vectors by inner product (-1 past the end),
    best first, over all (ids, vectors) batches, holding one batch at a time."""
    best_d = np.zeros((len(queries), 0), np.float32)
    best_i = np.zeros((len(queries), 0), np.int64)
    for ids, vectors in batches():
        top = min(k, len(ids))
        if top == 0:
            continue
        d, pos = faiss.knn(
            queries,
            np.ascontiguousarray(vectors, dtype=np.float32),
            top,
            metric=faiss.METRIC_INNER_PRODUCT,
        )
        found = np.where(pos >= 0, np.asarray(ids, np.int64)[np.maximum(pos, 0)], -1)
        d, found = np.concatenate([best_d, d], 1), np.concatenate([best_i, found], 1)
        order = np.argsort(-d, axis=1, kind="stable")[:, :k]
        best_d, best_i = np.take_along_axis(d, order, 1), np.take_along_axis(found, order, 1)
    if best_i.shape[1] < k:
        pad = np.full((len(queries), k - best_i.shape[1]), -1, np.int64)
        best_i = np.concatenate([best_i, pad], 1)
    return best_i


def search_params(param: str, value: int, selector=None, k_factor: int | None = None):
    """FAISS search parameters setting `param` (nprobe or efSearch) to `value`.

    `k_factor`: the index has a rescoring stage (`IndexRefine`) that rescores k·k_factor
    candidates; the selector then goes to the first pass, the only one reading it (and,
    under an IDMap, must select the internal ids: `faiss.IDSelectorTranslated`).
    """
    # faiss's stubs list neither the keyword constructors its Python layer adds nor
    # SearchParametersHNSW, nor the attributes a Python caller sets on a SWIG object
    if param == "nprobe":
        params = faiss.SearchParametersIVF(nprobe=int(value))  # type: ignore[call-arg]
    else:
        params = faiss.SearchParametersHNSW(efSearch=int(value))  # type: ignore[attr-defined]
    if selector is not None:
        params.sel = selector
    if k_factor is None:
        return params
    outer = faiss.IndexRefineSearchParameters(  # type: ignore[call-arg]
        k_factor=float(k_factor), base_index_params=params
    )
    outer.keep = (params, selector)  # type: ignore[attr-defined]  # C++ holds raw pointers to both
    return outer


def tune(
    index: faiss.Index,
    spec: str,
    vectors: np.ndarray,
    ids: np.ndarray,
    target: float = 0.95,
    sample: int = 1000,
    seed: int = 0,
    k_factor: int | None = None,
    headroom: float = 1.0,
    queries: np.ndarray | None = None,
) -> dict:
    """`tune_batches` over vectors held in memory (`vectors` (n, dim), `ids` (n,))."""
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    ids = np.asarray(ids, dtype=np.int64)
    batches = lambda: [(ids, vectors)]  # noqa: E731
    return tune_batches(
        index, spec, batches, len(ids), target, sample, seed, k_factor, headroom, queries
    )


def tune_batches(
    index: faiss.Index | Any,
    spec: str,
    batches: Batches,
    count: int,
    target: float = 0.95,
    sample: int = 1000,
    seed: int = 0,
    k_factor: int | None = None,
    headroom: float = 1.0,
    queries: np.ndarray | None = None,
) -> dict:
    """The smallest nprobe/efSearch whose recall@10 against exact search reaches `target`.

    Queries are `sample` of the indexed vectors (seeded draw), or `queries` when given
    (example queries encoded as served: `index.tune_queries`). A held vector's own id is left
    out of both result lists, so recall counts its 10 nearest *other* vectors; the truth comes
    from exact inner-product search over all the vectors, a batch at a time. Doubles the
    parameter until the target is reached, then bisects down to the smallest value that
    still reaches it.

    Args:
        index: a filled FAISS index of the `batches`' vectors, or alike (`store_rows.Rescored`).
        spec: its factory string (decides the parameter).
        batches: called for each pass, yields the same (ids (n,) int64, vectors (n, dim)
            float32) batches every time (e.g. `store.vectors.iter_batches`).
        count: the vectors they hold in all.
        k_factor: candidates rescored per result, for an index with a rescoring stage.
        headroom: `value` is this multiple of the smallest value that reached the target
            (rounded up, at most the largest value): held database vectors sit closer to their
            neighbours than real queries do (`benchmarks/index_scale.py`). Not with `queries`.
        queries: (m, dim) float32 example queries to tune with instead of held vectors.
    Returns:
        {"param", "value", "recall@10" (at `value`), "target", "reached", "sample",
        "seconds", "curve", "smallest" (the value that reached the target), "headroom"}, and
        "k_factor" when given.
    """
    import time

    started = time.perf_counter()
    found = tunable(spec)
    if found is None:
        raise ValueError(f"{spec} is an exact index: no search parameter to tune")
    param, values = found
    own, queries = _tuning_queries(batches, count, sample, seed, index.d, queries)
    if own.max(initial=-1) < 0:  # real queries need no headroom for sitting farther out
        headroom = 1.0
    k = min(11, count)
    exact = exact_neighbours(queries, batches, k)
    truth = [set(_top10_others(r, o)) for r, o in zip(exact, own)]
    recall = _RecallCurve(index, queries, k, truth, own, param, k_factor)
    curve = recall.curve
    smallest, reached = smallest_reaching(recall, values, target)
    if not reached:
        log.warning(
            "index %s reaches recall@10 %.3f at %s=%d, below the target %.2f: the "
            "memory budget forces coarse codes; raise index.memory_budget_mb or lower "
            "index.target_recall",
            spec,
            curve[smallest],
            param,
            smallest,
            target,
        )
    best = (
        min(values[-1], int(np.ceil(smallest * max(headroom, 1.0) - 1e-9))) if reached else smallest
    )
    return {
        "param": param,
        "value": int(best),
        "recall@10": round(recall(best), 4),
        "target": target,
        "reached": reached,
        "sample": len(own),
        "queries": "tune_queries" if own.max(initial=-1) < 0 else "database vectors",
        "seconds": round(time.perf_counter() - started, 3),
        "curve": {str(v): round(r, 4) for v, r in sorted(curve.items())},
        "smallest": int(smallest),
        "headroom": headroom,
    } | ({} if k_factor is None else {"k_factor": k_factor})


def _tuning_queries(
    batches: Batches, count: int, sample: int, seed: int, dim: int, given: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """(own ids, query vectors): `sample` held database vectors (seeded draw), or the `given`
    example queries with no own id (-1)."""
    if given is not None:
        return np.full(len(given), -1, np.int64), np.ascontiguousarray(given, dtype=np.float32)
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(count, min(sample, count), replace=False))
    return gather_rows(batches, rows, dim)


class _RecallCurve:
    """recall@10 of `index` at a value of its search parameter, measured once per value (the
    queries' own ids left out of both lists); `curve` keeps every value measured."""

    def __init__(
        self,
        index,
        queries: np.ndarray,
        k: int,
        truth: list[set],
        own,
        param: str,
        k_factor: int | None,
    ):
        self.index, self.queries, self.k, self.truth, self.own = index, queries, k, truth, own
        self.param, self.k_factor = param, k_factor
        self.curve: dict[int, float] = {}

    def __call__(self, value: int) -> float:
        if value not in self.curve:
            params = search_params(self.param, value, k_factor=self.k_factor)
            _, found = self.index.search(self.queries, self.k, params=params)
            hits = [
                len(t & set(_top10_others(f, o))) / max(len(t), 1)
                for f, t, o in zip(found, self.truth, self.own)
            ]
            self.curve[value] = float(np.mean(hits))
        return self.curve[value]


def retarget(tuning: dict, target: float) -> int:
    """The search parameter for `target` (`index.target_recall` at search time) from a
    recorded tuning: its value when `target` is the one tuned for; else the smallest value on
    its recorded curve reaching `target`, times the tuning's headroom (a lower target takes
    effect at the next search, without a rebuild); its value when none on the curve does (a
    higher target than the curve reaches needs `bertindex reindex`)."""
    value = int(tuning["value"])
    curve = tuning.get("curve") or {}
    if not curve or abs(float(tuning.get("target", target)) - target) < 1e-9:
        return value
    reaching = [int(v) for v, r in curve.items() if r >= target]
    if not reaching:
        return value
    headroom = max(float(tuning.get("headroom", 1.0)), 1.0)
    return max(1, int(np.ceil(min(reaching) * headroom - 1e-9)))


def smallest_reaching(
    recall: Callable[[int], float], values: list[int], target: float
) -> tuple[int, bool]:
    """The smallest parameter value whose `recall(value)` reaches `target`, and whether any did.

    Walks `values` (ascending, e.g. doubling) until one reaches the target, then bisects
    the integers between it and the value before; recall is assumed to grow with the value.
    None reaching it: the last value, False.
    """
    low, high = 0, None
    for value in values:
        if recall(value) >= target:
            high = value
            break
        low = value
    if high is None:
        return values[-1], False
    while high - low > 1:
        mid = (low + high) // 2
        if recall(mid) >= target:
            high = mid
        else:
            low = mid
    return high, True


def _top10_others(row: np.ndarray, own_id: int) -> list[int]:
    return [int(i) for i in row if i >= 0 and i != own_id][:10]


def build_on_gpu(index: faiss.Index, sample: np.ndarray | None, batches: Batches) -> faiss.Index:
    """Train (on `sample`) and fill (from the (ids, vectors) `batches`) an IVF index on every
    visible GPU, then bring it back to the CPU.

    Searching stays on the CPU: filtered search needs FAISS's IDSelector, which GPU indexes
    do not take, and a single query gains nothing from the device.
    """
    gpu = faiss.index_cpu_to_all_gpus(index)
    if not gpu.is_trained:
        if sample is None:
            raise ValueError("an untrained index needs a training sample")
        gpu.train(sample)
    for ids, vectors in batches():
        gpu.add_with_ids(
            np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64)
        )
    return faiss.index_gpu_to_cpu(gpu)
