"""`bertindex serve --workers auto` with this tree's code against another tree's, alternated in
one run on the same store: one client's dense p50 and the 16-client dense rate, as
`benchmarks/scale.py` measures them (the same held-out tweets, the same helpers), and their
ratio, the issue's "16 clients at least 1.7x one client".

`benchmarks/scale.py` leaves a size's folder with `store/` and `config.yaml` (the near-free
encoder). Each round starts a server from each tree in turn (`index_ab.in_turn`: each code
first as often as second), measures it, stops it.

    .venv/bin/python benchmarks/serve_ab.py --folder DIR/n10000000 --other /work/old \\
        --rounds 4 --out benchmarks/results/serve_ab_lists_in_pass_10M_after_1pct_intel_s27.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import scale  # noqa: E402
from index_ab import alternate  # noqa: E402
from machine import machine, write_json  # noqa: E402
from serve_latency import HOST, load, sequential, wait_ready  # noqa: E402


def measure(tree: Path, folder: Path, queries: list[str], seconds: float) -> dict:
    """Start `serve --workers auto` from `tree` on the folder's store, measure, stop it."""
    port = scale.free_port()
    command = [sys.executable, "-m", "search.cli.main", "serve", "--store", str(folder / "store")]
    command += ["--config", str(folder / "config.yaml"), "--host", HOST, "--port", str(port)]
    command += ["--workers", "auto"]
    env = dict(os.environ, PYTHONPATH=str(tree))
    with open(folder / "serve_ab.log", "ab") as log:
        proc = subprocess.Popen(command, cwd=tree, env=env, stdout=log, stderr=log)
        try:
            wait_ready(port, proc, timeout=3600)
            one = sequential(port, queries[:200], 10, "dense", proc.pid)
            many = load(port, queries, 10, 16, 10**9, seconds, proc.pid, mode="dense")
        finally:
            scale.stop(proc)
    ratio = many["queries_per_s"] * one["p50_ms"] / 1000
    return {"single_client_dense": one, "clients_16_dense": many, "ratio_16_to_1": round(ratio, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, required=True, help="a size's folder of scale.py")
    parser.add_argument("--other", type=Path, required=True, help="a checkout of the other code")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--load-seconds", type=float, default=15.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    queries = scale.tweets()[1]
    report: dict = {"command": " ".join(sys.argv), "machine": machine(), "runs": []}

    def one(name: str, round_: int, tree: Path) -> dict:
        started = time.strftime("%H:%M:%S")
        return {"started": started, **measure(tree, args.folder, queries, args.load_seconds)}

    alternate(args, report, one)
    for name in ("this", "other"):
        runs = [r for r in report["runs"] if r["code"] == name]
        report[name] = {
            "p50_ms": [r["single_client_dense"]["p50_ms"] for r in runs],
            "queries_per_s_16": [r["clients_16_dense"]["queries_per_s"] for r in runs],
            "cpu_ms_per_query_16": [r["clients_16_dense"]["server_cpu_ms_per_query"] for r in runs],
            "ratio_16_to_1": [r["ratio_16_to_1"] for r in runs],
        }
        report[name]["median_queries_per_s_16"] = statistics.median(
            report[name]["queries_per_s_16"]
        )
    print(json.dumps({k: report[k] for k in ("this", "other")}))
    write_json(args.out, report)


if __name__ == "__main__":
    main()
