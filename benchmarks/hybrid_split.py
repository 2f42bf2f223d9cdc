"""Where a hybrid query's time goes on a scale store: its dense side (the documents the fusion
takes, k ranked at full rescoring depth), its keyword side (BM25, the same depth) and the whole
ranking with the sides at the same time (`indexer.query.sides`, as searches run) and one after
the other (`in_turn`), each timed in one process on held-out queries after one warm-up query,
in alternating order, with the CPU time beside the wall (a side waiting on disk shows wall
without CPU). With --encode the two whole rankings encode their query too (a search does, and
its keyword side then runs beside the encoding as well).

    python benchmarks/hybrid_split.py --store DIR/store --config DIR/config.yaml \\
        --queries DIR/tune_queries.txt --out FILE
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import hybrid_run, summary, write_json

from indexer.query import searcher as searcher_module
from indexer.query.searcher import Searcher
from indexer.store import Store


def main() -> None:
    args, config, queries, depth = hybrid_run(__doc__.splitlines()[0], 600, 100, encode=True)
    walls: dict[str, list[float]] = {"dense": [], "keyword": [], "hybrid": [], "in_turn": []}
    cpu: dict[str, list[float]] = {name: [] for name in walls}
    with Store(config.store.path, read_only=True) as store:
        searcher = Searcher(config, store)
        vectors = searcher.encode_queries(queries)
        searcher.rank_documents(queries[:1], args.k, mode="hybrid", vectors=vectors[:1])
        together = searcher_module.both

        def hybrid(i: int, split: bool) -> None:
            searcher_module.both = together if split else (lambda a, b: (a(), b()))
            given = None if args.encode else vectors[i : i + 1]  # None: encoded in the search
            searcher.rank_documents([queries[i]], args.k, mode="hybrid", vectors=given)
            searcher_module.both = together

        sides = {
            "dense": lambda i: searcher.dense_ranked(vectors[i : i + 1], depth, ranked=args.k),
            "keyword": lambda i: searcher.keyword_ranked([queries[i]], depth),
            "hybrid": lambda i: hybrid(i, True),
            "in_turn": lambda i: hybrid(i, False),
        }
        for i in range(len(queries)):  # each query's sides in turn: its pages as cached for all
            order = list(sides.items())
            for name, run in order if i % 2 == 0 else order[:2] + order[:1:-1]:
                wall, used = time.perf_counter(), time.process_time()
                run(i)
                walls[name].append((time.perf_counter() - wall) * 1e3)
                cpu[name].append((time.process_time() - used) * 1e3)
    result = summary(
        queries=len(queries),
        k=args.k,
        depth=depth,
        p50_ms={name: round(statistics.median(w), 1) for name, w in walls.items()},
        cpu_p50_ms={name: round(statistics.median(c), 1) for name, c in cpu.items()},
    )
    print(json.dumps({k: v for k, v in result.items() if k not in ("command", "machine")}))
    write_json(args.out, result)


if __name__ == "__main__":
    main()
