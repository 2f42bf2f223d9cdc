"""First-pass codes for a mapped IVF base: scan time and recall at equal bytes a vector.

A base larger than the memory budget is served from its file's pages (`auto.mapped_spec`):
plain IVF lists (fast-scan blocks are read whole into each process) then float32 rescoring
vectors. This compares plain layouts of the same code size, e.g. 4-bit `PQ192x4np` against
8-bit `PQ96x8np` (96 bytes a 384-d vector each): one query at a time on one thread (as a
serving process runs it), and recall@10 with the rescoring stage against exact search for
held-out vectors (the last `--queries` rows read, never added).

    .venv/bin/python benchmarks/mapped_codes.py --store STORE --vectors 1000000 \\
        --out benchmarks/results/mapped_codes_1m.json

Without `--store` the vectors are random unit vectors (speed only; recall is meaningless).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import duckdb
import faiss
import numpy as np
from machine import machine, write_json

K, K_FACTOR = 10, 16


def read_vectors(store: Path | None, count: int, dim: int) -> np.ndarray:
    """`count` unit vectors: every 10th chunk's embedding of `store`'s live DuckDB, or random."""
    if store is None:
        rng = np.random.default_rng(0)
        out = rng.standard_normal((count, dim), dtype=np.float32)
        faiss.normalize_L2(out)
        return out
    # a bound on DuckDB's memory: the sort of 1M 384-d rows otherwise takes most of the RAM
    limit = {"memory_limit": "2GB"}
    con = duckdb.connect(str(store / "store.duckdb"), read_only=True, config=limit)
    table = con.execute(
        f"SELECT embedding FROM vectors WHERE chunk_id % 10 = 3 ORDER BY chunk_id LIMIT {count}"
    ).fetch_arrow_table()
    con.close()
    column = table.column(0).combine_chunks()
    width = column.type.list_size
    return np.ascontiguousarray(column.flatten().to_numpy().reshape(-1, width), np.float32)


def measure(
    spec: str, base: np.ndarray, queries: np.ndarray, truth, probes, k_factors=(K_FACTOR,)
) -> dict:
    index = faiss.index_factory(base.shape[1], spec + ",RFlat", faiss.METRIC_INNER_PRODUCT)
    started = time.perf_counter()
    rng = np.random.default_rng(1)
    index.train(base[rng.choice(len(base), min(len(base), 39 * 4096), replace=False)])
    trained = time.perf_counter() - started
    index.add(base)
    built = time.perf_counter() - started
    ivf = faiss.extract_index_ivf(index.base_index)
    row = {"spec": spec + ",RFlat", "train_s": round(trained, 1), "build_s": round(built, 1)}
    for nprobe in probes:
        for k_factor in k_factors:
            ivf.nprobe = nprobe
            params = faiss.IndexRefineSearchParameters(k_factor=k_factor)  # type: ignore[call-arg]
            _, found = index.search(queries, K, params=params)
            recall = np.mean([len(set(f) & set(t)) / K for f, t in zip(found, truth)])
            first_pass, whole = [], []
            for q in queries[:200]:
                start = time.perf_counter()
                ivf.search(q[None, :], K * k_factor)
                first_pass.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                index.search(q[None, :], K, params=params)
                whole.append((time.perf_counter() - start) * 1000)
            name = f"nprobe_{nprobe}" + ("" if k_factor == K_FACTOR else f"_k{k_factor}")
            row[name] = {
                "recall@10": round(float(recall), 4),
                "first_pass_ms_p50": round(float(np.median(first_pass)), 3),
                "with_rescoring_ms_p50": round(float(np.median(whole)), 3),
            }
            print(spec, nprobe, k_factor, row[name], flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, help="a store whose live DuckDB holds vectors")
    parser.add_argument("--vectors", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=384, help="random vectors only")
    parser.add_argument("--lists", type=int, default=4096)
    parser.add_argument("--codes", nargs="+", default=["PQ192x4np", "PQ96x8np", "PQ48x8np"])
    parser.add_argument("--probes", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--k-factors", type=int, nargs="+", default=[K_FACTOR])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    faiss.omp_set_num_threads(1)
    vectors = read_vectors(args.store, args.vectors + args.queries, args.dim)
    base, queries = vectors[: -args.queries], vectors[-args.queries :]
    _, truth = faiss.knn(queries, base, K, metric=faiss.METRIC_INNER_PRODUCT)
    rows = [
        measure(f"IVF{args.lists},{codes}", base, queries, truth, args.probes, args.k_factors)
        for codes in args.codes
    ]
    result = {
        "machine": machine(),
        "store": str(args.store) if args.store else "random unit vectors",
        "vectors": len(base),
        "queries": len(queries),
        "k_factors": args.k_factors,
        "rows": rows,
    }
    print(result)
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
