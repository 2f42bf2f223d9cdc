"""What a batch saves a scale store's first pass: the served base's first pass over held-out
tweets in batches of 1, 2, 4 … 64 queries on one thread (FAISS scans a probed list once for
all the batch's queries that probe it), in this process, with the searcher's own parameters
(nprobe, candidates a query), with FAISS's default fast-scan implementation and the one that
splits a query's lists over threads (`first_pass.SPLIT_PROBES`). `indexer.index.first_pass`
merges concurrent queries' passes on the strength of it.

    .venv/bin/python benchmarks/first_pass_batches.py --config DIR/n10000000/config.yaml \\
        --out benchmarks/results/first_pass_batches_10M_intel_s23.json
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import scale
from machine import machine, write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="a scale store's config")
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--wide", type=int, default=350, help="candidates a query (10 × 32 + 30)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import faiss

    from indexer.config import load_config
    from indexer.index import first_pass
    from indexer.query.searcher import Searcher

    faiss.omp_set_num_threads(1)
    rows = []
    with Searcher.open(load_config(args.config)) as searcher:
        searcher.warm()
        texts = scale.tweets()[1][: args.queries]
        queries = np.vstack([searcher.encode_queries([t])[0] for t in texts]).astype(np.float32)
        index = searcher.index
        first = index._rescored_here.first
        nprobe = int(index._mapped_pass(None)[0].nprobe)
        params = faiss.SearchParametersIVF(nprobe=nprobe)
        ivf = first_pass.fast_scan(first)
        first_pass.run(first, queries[:64], args.wide, params, None)  # pages in
        for implem in (0, first_pass.SPLIT_PROBES):
            ivf.implem = implem
            for size in (1, 2, 4, 8, 16, 32, 64):
                started = time.perf_counter()
                for at in range(0, len(queries), size):
                    first_pass.run(first, queries[at : at + size], args.wide, params, None)
                ms = (time.perf_counter() - started) * 1000 / len(queries)
                rows.append({"implem": implem, "batch": size, "ms_a_query": round(ms, 2)})
                print(rows[-1], flush=True)
    write_json(
        args.out,
        {
            "machine": machine(),
            "config": str(args.config),
            "nprobe": nprobe,
            "wide": args.wide,
            "queries": len(queries),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
