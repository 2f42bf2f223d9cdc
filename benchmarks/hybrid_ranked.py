"""A hybrid search's dense side with all `search.candidates` documents ranked at the index's
full rescoring depth against only the k asked for (the rest from the first pass, each
rescored): the fused top k of each, on held-out queries in one process, alternated. Prints
how often the two agree (same documents; same order) and the p50 of each.

`rank_documents(q, candidates)[:k]` ranks all of them (what a search of k did before), and
`rank_documents(q, k)` ranks k: the fusion sees the same number of dense documents either way.

    python benchmarks/hybrid_ranked.py --store DIR/store --config DIR/config.yaml \
        --queries DIR/tune_queries.txt [--k 10] [--count 200] [--out FILE]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import hybrid_run, machine, write_json

from indexer.query.searcher import Searcher
from indexer.store import Store


def main() -> None:
    args, config, queries, depth = hybrid_run(__doc__.splitlines()[0], 800, 200)
    walls: dict[str, list[float]] = {"all": [], "k": []}
    same_docs = same_order = 0
    with Store(config.store.path, read_only=True) as store:
        searcher = Searcher(config, store)
        vectors = searcher.encode_queries(queries)
        searcher.rank_documents(queries[:1], args.k, mode="hybrid", vectors=vectors[:1])
        for i, query in enumerate(queries):
            found = {}
            for name in ("all", "k") if i % 2 == 0 else ("k", "all"):
                asked = depth if name == "all" else args.k
                start = time.perf_counter()
                ranked = searcher.rank_documents(
                    [query], asked, mode="hybrid", vectors=vectors[i : i + 1]
                )[0][: args.k]
                walls[name].append((time.perf_counter() - start) * 1e3)
                found[name] = [m.doc_id for m in ranked]
            same_docs += set(found["all"]) == set(found["k"])
            same_order += found["all"] == found["k"]
    result = {
        "command": " ".join(sys.argv),
        "machine": machine(),
        "queries": len(queries),
        "k": args.k,
        "candidates": depth,
        "same_documents": same_docs,
        "same_order": same_order,
        "p50_ms": {name: round(statistics.median(w), 1) for name, w in walls.items()},
    }
    print(json.dumps({k: v for k, v in result.items() if k not in ("command", "machine")}))
    write_json(args.out, result)


if __name__ == "__main__":
    main()
