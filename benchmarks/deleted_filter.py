"""A mapped `…,RFlat` base with deleted ids: a selector in the first pass against dropping the
deleted ids from a wider candidate list (what `VectorIndex.search` does), on a store's served
index, alternating rounds of queries, one thread; with the overlap of their top 10.

    .venv/bin/python benchmarks/deleted_filter.py --config DIR/config.yaml \\
        --queries-file DIR/tune_queries.txt --out benchmarks/results/deleted_filter_10m.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import faiss
import numpy as np
from machine import machine, write_json

from indexer.config import load_config
from indexer.index.rescore import search_mapped
from indexer.query.searcher import Searcher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--queries-file", type=Path, required=True)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    faiss.omp_set_num_threads(1)
    texts = [t.strip() for t in args.queries_file.read_text().splitlines() if t.strip()]
    with Searcher.open(load_config(args.config)) as searcher:
        index = searcher.index
        if index is None or index._rescored_here is None or not len(index.deleted):
            raise SystemExit("the store's index is not a mapped …,RFlat base with deleted ids")
        vectors = searcher.encode_queries(texts[: args.queries + 100])
        warm, timed = vectors[:100], vectors[100:]

        def selector(v):
            params = index._search_params(None, deleted=True)
            k_factor = int(params.k_factor)
            return search_mapped(index._rescored_here, v, 10, k_factor, params.base_index_params)

        def dropped(v):
            return index._search_base(v, 10, None)

        for v in warm:
            selector(v[None, :])
            dropped(v[None, :])
        ms: dict[str, list[float]] = {"selector": [], "dropped_after": []}
        pairs = [("selector", selector), ("dropped_after", dropped)]
        for round_ in range(args.rounds):
            for name, fn in pairs if round_ % 2 == 0 else pairs[::-1]:
                started = time.perf_counter()
                for v in timed:
                    fn(v[None, :])
                ms[name].append(round((time.perf_counter() - started) * 1000 / len(timed), 2))
        overlap = np.mean(
            [
                len(set(selector(v[None, :])[1][0]) & set(dropped(v[None, :])[1][0])) / 10
                for v in timed[:100]
            ]
        )
        result = {
            "machine": machine(),
            "spec": index.spec,
            "base_vectors": int(index.index.ntotal),
            "deleted": len(index.deleted),
            "queries": len(timed),
            "ms_a_query": ms,
            "overlap@10": round(float(overlap), 4),
        }
        print(result)
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
