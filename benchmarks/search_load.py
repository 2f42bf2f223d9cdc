"""The served dense search path under load, without HTTP: processes of searching threads,
each thread calling `VectorIndex.search` as `serve` does (40 chunks, 10 ranked, one OpenMP
thread a request thread, passive waiting), this tree's code against another checkout's,
alternated on one store; and one thread alone (its p50). It isolates the index's cost a query
from the server's (encoding, documents, HTTP), which `benchmarks/serve_ab.py` measures whole.

`benchmarks/scale.py` leaves a size's folder with `store/` and `config.yaml` (the near-free
encoder); the queries are scale.py's held-out tweets.

    .venv/bin/python benchmarks/search_load.py --folder DIR/n10000000 --other /work/old \\
        --rounds 3 --out benchmarks/results/search_load_held_pass_10M_after_1pct_intel_s28.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
K, RANKED = 40, 10  # as `Searcher._best_chunks` asks for 10 documents


def child(folder: Path, threads: int, seconds: float, texts: list[str]) -> dict:
    """One process: open the store as a server worker does, search from `threads` threads
    for `seconds` (threads 0: one thread, sequentially, each query timed)."""
    import faiss
    import numpy as np

    from indexer.config import load_config
    from indexer.query.searcher import Searcher

    searcher = Searcher.open(load_config(folder / "config.yaml"))
    vectors = np.ascontiguousarray(searcher.encoder.encode_queries(texts), np.float32)
    index = searcher.index
    faiss.omp_set_num_threads(1)  # as `serve` pins its request threads
    for row in vectors[:20]:
        index.search(row[None], K, None, ranked=RANKED)
    if threads == 0:
        took = []
        for row in vectors:
            started = time.perf_counter()
            index.search(row[None], K, None, ranked=RANKED)
            took.append(time.perf_counter() - started)
        return {"p50_ms": round(statistics.median(took) * 1000, 2), "queries": len(took)}
    done = [0] * threads
    stop = time.monotonic() + seconds

    def run(t: int) -> None:
        faiss.omp_set_num_threads(1)
        i = t
        while time.monotonic() < stop:
            index.search(vectors[i % len(vectors)][None], K, None, ranked=RANKED)
            done[t] += 1
            i += threads

    cpu, wall = time.process_time(), time.monotonic()
    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return {
        "queries": sum(done),
        "seconds": time.monotonic() - wall,
        "cpu_s": time.process_time() - cpu,
    }


def spawn(tree: Path, folder: Path, threads: int, seconds: float, count: int) -> list[dict]:
    """`count` child processes running `tree`'s code side by side; their reports."""
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_WAIT_POLICY="PASSIVE")
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--folder", str(folder)]
    command += ["--threads", str(threads), "--seconds", str(seconds)]
    procs = [
        subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    out = []
    for proc in procs:
        stdout, _ = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"a searching process of {tree} exited with {proc.returncode}")
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def measure(tree: Path, folder: Path, args) -> dict:
    """One thread alone, then `args.processes` processes of `args.threads` threads."""
    alone = spawn(tree, folder, 0, 0, 1)[0]
    loaded = spawn(tree, folder, args.threads, args.seconds, args.processes)
    queries = sum(r["queries"] for r in loaded)
    rate = sum(r["queries"] / r["seconds"] for r in loaded)
    return {
        "alone_p50_ms": alone["p50_ms"],
        "loaded_queries_per_s": round(rate, 2),
        "loaded_cpu_ms_per_query": round(sum(r["cpu_s"] for r in loaded) / queries * 1000, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, required=True, help="a size's folder of scale.py")
    parser.add_argument("--other", type=Path, help="a checkout of the other code")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2, help="as `serve --workers auto`")
    parser.add_argument("--threads", type=int, default=8, help="searching threads a process")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import scale

    texts = scale.tweets()[1][:400]
    if args.child:
        print(json.dumps(child(args.folder, args.threads, args.seconds, texts)))
        return
    if args.other is None:
        parser.error("--other is required")
    from index_ab import alternate
    from machine import machine, write_json

    report: dict = {"command": " ".join(sys.argv), "machine": machine(), "runs": []}
    alternate(args, report, lambda name, round_, tree: measure(tree, args.folder, args))
    for name in ("this", "other"):
        runs = [r for r in report["runs"] if r["code"] == name]
        report[name] = {
            key: [r[key] for r in runs]
            for key in ("alone_p50_ms", "loaded_queries_per_s", "loaded_cpu_ms_per_query")
        }
    print(json.dumps({k: report[k] for k in ("this", "other")}))
    write_json(args.out, report)


if __name__ == "__main__":
    main()
