"""Query latency through `bertindex serve`: starts the server on a store, sends BEIR queries one
at a time over one keep-alive connection, reports p50/p99 round trip (encode + search + fetch
metadata + HTTP) per mode.

    .venv/bin/python benchmarks/serve_latency.py --store /tmp/bertindex-scifact \
        --queries ../shared/data/scifact/queries.jsonl -n 500
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def wait_ready(port: int, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit("server did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--queries", type=Path, default=ROOT.parent / "shared/data/scifact/queries.jsonl")
    parser.add_argument("-n", type=int, default=500)
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--port", type=int, default=8799)
    parser.add_argument("--modes", default="hybrid,dense,keyword")
    args = parser.parse_args()

    texts = [json.loads(line)["text"] for line in args.queries.open()]
    texts = (texts * (args.n // len(texts) + 1))[: args.n]
    proc = subprocess.Popen([str(ROOT / ".venv/bin/bertindex"), "serve", "--store", args.store,
                             "--port", str(args.port)])
    report = {"store": args.store, "queries": len(texts), "k": args.k}
    try:
        wait_ready(args.port, proc)
        conn = http.client.HTTPConnection("127.0.0.1", args.port, timeout=30)
        for mode in args.modes.split(","):
            rtt, server = [], []
            for i, text in enumerate([texts[0]] * 10 + texts):  # 10 warm-up queries
                body = json.dumps({"query": text, "k": args.k, "mode": mode})
                t = time.perf_counter()
                conn.request("POST", "/search", body, {"Content-Type": "application/json"})
                answer = json.loads(conn.getresponse().read())
                if i >= 10:
                    rtt.append(time.perf_counter() - t)
                    server.append(answer["took_ms"])
            report[mode] = {
                "p50_ms": round(float(np.percentile(rtt, 50)) * 1000, 2),
                "p99_ms": round(float(np.percentile(rtt, 99)) * 1000, 2),
                "server_p50_ms": round(float(np.percentile(server, 50)), 2),
            }
            print(mode, report[mode], file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(10)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
