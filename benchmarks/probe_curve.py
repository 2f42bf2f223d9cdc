"""Recall@10 and search time against nprobe on a published store, for held-out queries.

`auto` tunes nprobe on stored vectors used as queries (`indexer.index.auto.tune_batches`). On
the scale benchmark's corpus (tweets with shuffled or dropped words: many near-copies) a
stored vector's nearest neighbours are its copies, which grows with N: at 10M the tuning
sample said 0.956 where held-out tweets reached 0.8725. This measures what each nprobe gives
for the held-out tweets of `benchmarks/scale.py` (exact top 10 documents over the store's
vectors as truth, dense searches through a `Searcher` in this process, page cache warm after
a first pass), so the probes a recall target needs can be read off.

    .venv/bin/python benchmarks/probe_curve.py --work DIR --size 10000000 \\
        --probes 129 192 256 384 --out benchmarks/results/probe_curve_10m.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import scale
from machine import machine, write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="scale.py's --work")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--probes", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from indexer.config import load_config
    from indexer.query.searcher import Searcher

    folder = args.work / f"n{args.size}"
    _, queries = scale.tweets()
    queries = queries[: args.queries]
    tokenizer, model = scale.load_encoder(str(args.work / "encoder-0-layer"))
    started = time.perf_counter()
    truth = scale.exact_top10(folder / "store", scale.encode(tokenizer, model, queries))
    exact_s = time.perf_counter() - started
    rows = []
    with Searcher.open(load_config(folder / "config.yaml")) as searcher:
        searcher.warm()
        tuning = searcher.index.tuning
        for nprobe in args.probes:
            tuning["value"] = nprobe  # the tuned value this version would search with
            for q in queries:  # the lists' pages into the page cache
                searcher.search(q, 10, mode="dense")
            times, hits = [], []
            for q, t in zip(queries, truth):
                start = time.perf_counter()
                found = searcher.search(q, 10, mode="dense")
                times.append((time.perf_counter() - start) * 1000)
                hits.append(len({h.id for h in found} & set(t)) / 10)
            rows.append(
                {
                    "nprobe": nprobe,
                    "recall@10": round(float(np.mean(hits)), 4),
                    "search_p50_ms": round(statistics.median(times), 2),
                    "search_p90_ms": round(float(np.percentile(times, 90)), 2),
                }
            )
            print(rows[-1], flush=True)
    result = {
        "machine": machine(),
        "store": str(folder / "store"),
        "queries": len(queries),
        "exact_truth_s": round(exact_s, 1),
        "tuned": {k: tuning.get(k) for k in ("smallest", "headroom", "recall@10", "sample")},
        "rows": rows,
    }
    print(result)
    write_json(args.out, result)


if __name__ == "__main__":
    main()
