"""Recall and time of a store's served `…,RFlat` base by nprobe and rescoring depth (k_factor).

Opens the store as `bertindex search` does (its published, mapped index), encodes the first
`--queries` lines of a query file as served, computes their exact top 10 over the base's own
full vectors (the mapped rescoring stage, read in slices), then for each (nprobe, k_factor)
runs the first pass and the rescoring one query at a time on one thread and reports recall@10
against exact and the mean milliseconds a query. Deleted ids and the delta are left out of
both sides: this measures the base alone.

    .venv/bin/python benchmarks/rescore_depth.py --config DIR/config.yaml \\
        --queries-file DIR/tune_queries.txt --out benchmarks/results/rescore_depth_10m.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import faiss
import numpy as np
from machine import machine, write_json

from indexer.config import load_config
from indexer.index.auto import search_params
from indexer.index.rescore import search_mapped
from indexer.query.searcher import Searcher

K = 10


def exact_top(parts, queries: np.ndarray, step: int = 500_000) -> np.ndarray:
    """Exact top-K positions over the mapped rescoring vectors, a slice at a time."""
    best_s = np.full((len(queries), K), -np.inf, np.float32)
    best_i = np.full((len(queries), K), -1, np.int64)
    for start in range(0, len(parts.ids), step):
        block = np.ascontiguousarray(parts.vectors[start : start + step])
        d, i = faiss.knn(queries, block, K, metric=faiss.METRIC_INNER_PRODUCT)
        scores = np.concatenate([best_s, d], 1)
        rows = np.concatenate([best_i, i + start], 1)
        order = np.argsort(-scores, 1)[:, :K]
        best_s = np.take_along_axis(scores, order, 1)
        best_i = np.take_along_axis(rows, order, 1)
    return parts.ids[best_i]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--queries-file", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--probes", type=int, nargs="+", default=[96, 128, 192, 256])
    parser.add_argument("--k-factors", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    texts = [t.strip() for t in args.queries_file.read_text().splitlines() if t.strip()]
    with Searcher.open(load_config(args.config)) as searcher:
        index = searcher.index
        parts = index._rescored_here if index is not None else None
        if parts is None:
            raise SystemExit("the store's index is not a mapped …,RFlat base")
        queries = searcher.encode_queries(texts[: args.queries]).astype(np.float32)
        started = time.perf_counter()
        truth = exact_top(parts, queries)
        exact_s = time.perf_counter() - started
        faiss.omp_set_num_threads(1)  # as a serving process runs a query
        rows = []
        for nprobe in args.probes:
            for k_factor in args.k_factors:
                first = search_params("nprobe", nprobe, None, k_factor).base_index_params
                started = time.perf_counter()
                found = [
                    search_mapped(parts, q[None, :], K, k_factor, first)[1][0] for q in queries
                ]
                ms = (time.perf_counter() - started) * 1000 / len(queries)
                recall = np.mean([len(set(f) & set(t)) / K for f, t in zip(found, truth)])
                row = {"nprobe": nprobe, "k_factor": k_factor, "recall@10": round(float(recall), 4)}
                rows.append(row | {"ms_a_query": round(ms, 2)})
                print(rows[-1], flush=True)
        result = {
            "machine": machine(),
            "spec": index.spec,
            "vectors": len(parts.ids),
            "queries": len(queries),
            "exact_s": round(exact_s, 1),
            "rows": rows,
        }
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
