"""Query latency and throughput through `bertindex serve`: starts the server on a store (on
127.0.0.1 only), then (1) sends BEIR queries one at a time over one keep-alive connection and
reports p50/p99 round trip (encode + search + fetch + HTTP) per mode, and (2) runs a bounded
load test per client count: each client thread sends hybrid queries over its own keep-alive
connection until `--load-requests` answers are in or `--load-seconds` have passed, whichever
comes first; reports throughput, p50/p99 latency, errors, and the throughput ratio of the
most clients to one client, all measured in this one run. With `--query-encoders onnx,onnx-int8`
it does all of that once per `search.query_encoder` (a server each, one after the other; the
repository's config.yaml with that one key changed) and reports each under its name.

    python benchmarks/serve_latency.py --store /tmp/bertindex-scifact \
        --queries ../shared/data/scifact/queries.jsonl -n 500 --clients 1,16
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import yaml
from machine import cpu_name

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"  # the load test talks to this machine only


def wait_ready(port: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection(HOST, port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit("server did not become ready")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its child processes (a multi-process
    server's workers), all their threads (Linux /proc)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):  # fields[1]: parent pid
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def ask(conn: http.client.HTTPConnection, text: str, k: int, mode: str) -> dict:
    body = json.dumps({"query": text, "k": k, "mode": mode})
    conn.request("POST", "/search", body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    payload = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {payload[:200]!r}")
    return json.loads(payload)


def sequential(port: int, texts: list[str], k: int, mode: str, pid: int) -> dict:
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    rtt, server = [], []
    for i, text in enumerate([texts[0]] * 10 + texts):  # 10 warm-up queries
        if i == 10:
            cpu = cpu_seconds(pid)
        t = time.perf_counter()
        answer = ask(conn, text, k, mode)
        if i >= 10:
            rtt.append(time.perf_counter() - t)
            server.append(answer["took_ms"])
    conn.close()
    return {
        "p50_ms": round(float(np.percentile(rtt, 50)) * 1000, 2),
        "p99_ms": round(float(np.percentile(rtt, 99)) * 1000, 2),
        "server_p50_ms": round(float(np.percentile(server, 50)), 2),
        # CPU the server spent per query: what a quiet core would take, whatever the load
        "server_cpu_ms_per_query": round(1000 * (cpu_seconds(pid) - cpu) / len(texts), 2),
    }


def load(
    port: int,
    texts: list[str],
    k: int,
    clients: int,
    requests: int,
    seconds: float,
    pid: int,
    mode: str = "hybrid",
) -> dict:
    """`clients` threads, each on its own connection, until `requests` answers or `seconds`."""
    lock = threading.Lock()
    state = {"next": 0, "done": 0}
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.perf_counter() + seconds

    def client() -> None:
        conn = http.client.HTTPConnection(HOST, port, timeout=60)
        while time.perf_counter() < deadline:
            with lock:
                if state["next"] >= requests:
                    break
                i = state["next"]
                state["next"] += 1
            t = time.perf_counter()
            try:
                ask(conn, texts[i % len(texts)], k, mode)
            except (OSError, RuntimeError, http.client.HTTPException) as exc:
                with lock:
                    errors.append(str(exc))
                conn.close()
                conn = http.client.HTTPConnection(HOST, port, timeout=60)
                continue
            elapsed = time.perf_counter() - t
            with lock:
                latencies.append(elapsed)
                state["done"] += 1
        conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    cpu = cpu_seconds(pid)
    own = time.process_time()
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 120)
    wall = time.perf_counter() - started
    cpu = cpu_seconds(pid) - cpu
    own = time.process_time() - own
    return {
        "clients": clients,
        "server_cpu_ms_per_query": round(1000 * cpu / max(1, state["done"]), 2),
        "server_cores_busy": round(cpu / wall, 2),
        # the load generator runs on the same cores: what it took from the server
        "client_cores_busy": round(own / wall, 2),
        "answered": state["done"],
        "errors": len(errors),
        "first_errors": errors[:3],
        "seconds": round(wall, 2),
        "queries_per_s": round(state["done"] / wall, 2),
        "p50_ms": round(float(np.percentile(latencies, 50)) * 1000, 2) if latencies else None,
        "p99_ms": round(float(np.percentile(latencies, 99)) * 1000, 2) if latencies else None,
    }


def serve_and_measure(args, texts: list[str], encoder: str | None) -> dict:
    """Start a server with `search.query_encoder` = `encoder` (None: as the config says),
    measure sequential latency per mode and the load levels, stop it."""
    env = dict(
        os.environ, PYTHONPATH=str(args.code) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    command = [
        sys.executable,
        "-m",
        "search.cli.main",
        "serve",
        "--store",
        args.store,
        "--host",
        HOST,
        "--port",
        str(args.port),
    ]
    if args.workers:  # empty: a checkout from before --workers
        command += ["--workers", args.workers]
    config = None
    if encoder is not None:
        data = yaml.safe_load((args.code / "config.yaml").read_text()) or {}
        data.setdefault("search", {})["query_encoder"] = encoder
        config = Path(tempfile.mkstemp(prefix="serve-latency-", suffix=".yaml")[1])
        config.write_text(yaml.safe_dump(data))
        command += ["--config", str(config)]
    proc = subprocess.Popen(command, env=env)
    out: dict = {}
    try:
        wait_ready(args.port, proc)
        for mode in filter(None, args.modes.split(",")):
            out[mode] = sequential(args.port, texts[: args.n], args.k, mode, proc.pid)
            print(encoder or "", mode, out[mode], file=sys.stderr)
        levels = []
        for clients in (int(c) for c in args.clients.split(",") if c):
            levels.append(
                load(
                    args.port,
                    texts,
                    args.k,
                    clients,
                    args.load_requests,
                    args.load_seconds,
                    proc.pid,
                )
            )
            print(encoder or "", "load", levels[-1], file=sys.stderr)
        if levels:
            out["load"] = levels
            out["throughput_ratio"] = round(
                levels[-1]["queries_per_s"] / levels[0]["queries_per_s"], 2
            )
    finally:
        proc.terminate()
        proc.wait(10)
        if config is not None:
            config.unlink()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument(
        "--queries", type=Path, default=ROOT.parent / "shared/data/scifact/queries.jsonl"
    )
    parser.add_argument("-n", type=int, default=500, help="sequential queries per mode")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--port", type=int, default=8799)
    parser.add_argument("--modes", default="hybrid,dense,keyword")
    parser.add_argument("--clients", default="1,16", help="client counts of the load test")
    parser.add_argument("--load-requests", type=int, default=600)
    parser.add_argument("--load-seconds", type=float, default=60)
    parser.add_argument(
        "--code",
        type=Path,
        default=ROOT,
        help="checkout whose server to start (e.g. an older one, for a before/after)",
    )
    parser.add_argument(
        "--query-encoders",
        default="",
        help="comma-separated `search.query_encoder` values to measure in turn "
        "(default: whatever the config says)",
    )
    parser.add_argument(
        "--workers",
        default="auto",
        help="`bertindex serve --workers`; empty for a checkout without it",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    texts = [json.loads(line)["text"] for line in args.queries.open()]
    texts = (texts * (args.n // len(texts) + 1))[: max(args.n, args.load_requests)]
    report: dict = {
        "code": str(args.code),
        "store": args.store,
        "queries": args.n,
        "k": args.k,
        "cpu": cpu_name(),
        "workers": args.workers,
        "load_before": os.getloadavg(),
    }
    encoders = [e for e in args.query_encoders.split(",") if e]
    if not encoders:
        report.update(serve_and_measure(args, texts, None))
    for encoder in encoders:
        report[encoder] = serve_and_measure(args, texts, encoder)
    report["load_after"] = os.getloadavg()
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
