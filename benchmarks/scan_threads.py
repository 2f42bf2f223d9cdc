"""One query's scan on one thread against the cores idle when it starts (`index.scan_threads` 1
against 0), on a scale store in this process: dense searches of held-out tweets one at a time
through a `Searcher`, a pause between them as a client's round trip leaves, the two settings
alternated by round. Reports each setting's search p50/p90, the process's CPU time a query,
and how many top-10s equal the one-thread scan's. Each OpenMP wait policy (unset: libgomp spins
after a parallel region; PASSIVE, as `bertindex serve` sets it) runs in its own child process,
since the library reads it when it loads.

    .venv/bin/python benchmarks/scan_threads.py --config DIR/n10000000/config.yaml \\
        --out benchmarks/results/scan_threads_10M_intel_s23.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from machine import machine, write_json

CHILD = r"""
import json, statistics, sys, time
sys.path[:0] = [sys.argv[3], str(__import__("pathlib").Path(sys.argv[3]).parent)]
import numpy as np
import scale
from indexer.config import load_config
from indexer.query.searcher import Searcher
count, rounds = int(sys.argv[2]), int(sys.argv[4])
queries = scale.tweets()[1][:count]
out = {setting: {"ms": [], "cpu_ms": []} for setting in (1, 0)}
with Searcher.open(load_config(sys.argv[1])) as searcher:
    searcher.warm()
    parts = searcher.index._rescored_here
    for q in queries:  # the probed lists' pages into the page cache
        searcher.search(q, 10, mode="dense")
    tops = {}
    for _ in range(rounds):
        for setting in (1, 0):
            parts.passes.threads = setting
            cpu = time.process_time()
            for q in queries:
                start = time.perf_counter()
                hits = searcher.search(q, 10, mode="dense")
                out[setting]["ms"].append((time.perf_counter() - start) * 1000)
                tops.setdefault(setting, {})[q] = [h.id for h in hits]
                time.sleep(0.005)
            out[setting]["cpu_ms"].append((time.process_time() - cpu) * 1000 / len(queries))
same = sum(tops[0][q] == tops[1][q] for q in queries)
print(json.dumps({
    str(s): {"search_p50_ms": round(statistics.median(v["ms"]), 2),
             "search_p90_ms": round(float(np.percentile(v["ms"], 90)), 2),
             "cpu_ms_a_query": [round(c, 2) for c in v["cpu_ms"]]}
    for s, v in out.items()
} | {"top10_same_as_one_thread": same, "queries": len(queries)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="a scale store's config")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    here = str(Path(__file__).resolve().parent)
    result: dict = {"machine": machine(), "config": str(args.config), "policies": {}}
    for policy in ("unset", "PASSIVE"):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if policy != "unset":
            env["OMP_WAIT_POLICY"] = policy
        command = [sys.executable, "-c", CHILD, str(args.config), str(args.queries), here]
        done = subprocess.run(
            [*command, str(args.rounds)], env=env, capture_output=True, text=True, check=True
        )
        row = json.loads(done.stdout.strip().splitlines()[-1])
        result["policies"][policy] = {
            "scan_threads_1": row["1"],
            "scan_threads_0_idle": row["0"],
            "top10_same_as_one_thread": row["top10_same_as_one_thread"],
            "queries": row["queries"],
        }
        print(policy, result["policies"][policy], flush=True)
    write_json(args.out, result)


if __name__ == "__main__":
    main()
