"""What a query's rescoring reads cost at the two depths a search asks for: a dense search
ranks k = 10 documents (k_factor candidates each, then one for each further chunk: ~350 rows
at k_factor 32), the dense side of a hybrid search ranks `search.candidates` = 100 for the
fusion (~3,500 rows). In one process on a store with a mapped, rescored base, new held-out
queries alternate the two depths; with `--drop` the rescoring file's pages are dropped from the
page cache before each query (`POSIX_FADV_DONTNEED`), as on a machine that reclaimed them.
Prints the p50 of the dense search, of asking for the rows (`posix_fadvise(WILLNEED)` per row)
and of reading and scoring them, per depth.

    python benchmarks/rescore_depth_io.py --store DIR/store --config DIR/config.yaml \
        --queries DIR/tune_queries.txt [--drop] [--count 12] [--out FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import held_out, machine, store_options, write_json

from indexer.index import rescore
from indexer.query.searcher import Searcher
from indexer.store import Store
from search.cli.common import build_config

PHASES: dict[str, float] = {}


def timed(owner, name: str, label: str) -> None:
    """Wrap `owner.name` so its wall time adds to PHASES[label]."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            PHASES[label] = PHASES.get(label, 0.0) + (time.perf_counter() - start) * 1e3

    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    store_options(parser, skip=800, count=12)  # --count: queries a depth
    parser.add_argument("--drop", action="store_true", help="drop the rescored rows' pages first")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config = build_config(str(args.config), str(args.store), None, None)
    queries = held_out(args, 2 * args.count)
    timed(rescore.MappedRefine, "prefetch", "ask")
    timed(rescore.MappedRefine, "scores", "read_and_score")
    rows: dict[int, list] = {10: [], 100: []}
    with Store(config.store.path, read_only=True) as store:
        searcher = Searcher(config, store)
        vectors = searcher.encode_queries(queries)
        searcher.dense_ranked(vectors[:1], 10)  # the first search's own costs, not counted
        parts = searcher.index._rescored_here if searcher.index else None
        if parts is None or parts.file is None:
            raise SystemExit(f"{args.store}: no mapped base rescored from its file here")
        for i in range(len(queries)):
            depth = (10, 100)[(i + i // 2) % 2]  # ABBA
            if args.drop:
                os.posix_fadvise(parts.file.fd, 0, 0, os.POSIX_FADV_DONTNEED)
            PHASES.clear()
            start = time.perf_counter()
            searcher.dense_ranked(vectors[i : i + 1], depth)
            rows[depth].append({"search_ms": (time.perf_counter() - start) * 1e3, **PHASES})
    result = {
        "command": " ".join(sys.argv),
        "machine": machine(),
        "dropped": args.drop,
        "depths": {
            str(depth): {
                key: round(statistics.median(r.get(key, 0.0) for r in found), 1)
                for key in ("search_ms", "ask", "read_and_score")
            }
            for depth, found in rows.items()
        },
    }
    print(json.dumps(result["depths"]))
    write_json(args.out, result)


if __name__ == "__main__":
    main()
