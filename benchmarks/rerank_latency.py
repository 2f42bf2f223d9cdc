"""Latency of a reranked query and the reranking's share of it: the library path a `bertindex
search` runs once loaded (`Searcher.search`), and `bertindex serve`'s `POST /search` (in
process, FastAPI's test client), each at several `--rerank-depth`s against the same query
without reranking.

    python benchmarks/rerank_latency.py --store S --collection-folder ../shared/data/scifact \
        --head H --depths 20,50,100 -n 10 --out benchmarks/results/rerank_latency.json

Prints one JSON object; the machine (CPU, cores, load) is recorded beside the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import machine, write_json


def _p50(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="a store holding the set's corpus")
    parser.add_argument("--collection-folder", required=True, help="BEIR folder (its queries)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--head", required=True, help="the pair head (`bertindex train rerank`)")
    parser.add_argument("--depths", default="20,50,100")
    parser.add_argument("-n", type=int, default=10, help="queries per setting")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from indexer.config import load_config
    from indexer.evaluation.beir import load_beir_queries
    from indexer.query.searcher import Searcher
    from indexer.store import Store
    from search.server import create_app

    config_path = "config.yaml" if Path("config.yaml").is_file() else None
    cfg = load_config(config_path).with_overrides(
        **{"store.path": args.store, "search.rerank": args.head}
    )
    queries, _ = load_beir_queries(Path(args.collection_folder), args.split)
    texts = list(queries.values())[: args.n]
    depths = [int(d) for d in args.depths.split(",")]
    out = {
        "store": args.store,
        "head": args.head,
        "queries": len(texts),
        "k": 10,
        "machine": machine(),
        "library": {},
        "server": {},
    }
    with Store(cfg.store.path, read_only=True) as store:
        searcher = Searcher(cfg, store)
        started = time.perf_counter()
        searcher.warm()  # the query encoder, keyword index and the reranker
        out["warm_seconds"] = round(time.perf_counter() - started, 2)
        out["rerank_max_length"] = searcher.reranker(args.head).max_length

        def timed(**options) -> list[float]:
            seconds = []
            for text in texts:
                t0 = time.perf_counter()
                searcher.search(text, 10, **options)
                seconds.append(time.perf_counter() - t0)
            return seconds

        plain = timed(rerank=False)
        out["library"]["hybrid_p50_ms"] = _p50(plain)
        for depth in depths:
            reranked = timed(rerank=args.head, rerank_depth=depth)
            out["library"][f"depth_{depth}"] = {
                "p50_ms": _p50(reranked),
                "rerank_share": round(
                    1 - statistics.median(plain) / statistics.median(reranked), 3
                ),
            }
        client = TestClient(create_app(searcher))

        def served(**body) -> list[float]:
            return [
                client.post("/search", json={"query": t, "k": 10, **body}).json()["took_ms"] / 1000
                for t in texts
            ]

        plain = served(rerank=False)
        out["server"]["hybrid_p50_ms"] = _p50(plain)
        for depth in depths:
            reranked = served(rerank=True, rerank_depth=depth)
            out["server"][f"depth_{depth}"] = {
                "p50_ms": _p50(reranked),
                "rerank_share": round(
                    1 - statistics.median(plain) / statistics.median(reranked), 3
                ),
            }
    print(json.dumps(out, indent=1))
    write_json(Path(args.out) if args.out else None, out)


if __name__ == "__main__":
    main()
