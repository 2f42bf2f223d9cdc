"""`bertindex serve` under load and faults: a multi-process server (`--workers 2`, a real
process on a free loopback port) over a small store (the packaged model, a few hundred
generated documents), `--clients` threads sending `POST /search` for `--seconds`, while
`bertindex index` publishes two new index versions (new documents, and new texts for some old
ones) and one worker process is SIGKILLed partway, after the first publish, so that its
replacement opens the new version (a worker keeps the version it opened) while the second
run writes. The load goes on until both versions are
published, so on a busy machine the run can last longer than `--seconds`.

Reports requests, errors (split into those in flight when the worker was killed and any
other: the other count must be 0), p50/p99 latency of the answers, the worker pids before and
after the kill (uvicorn's supervisor must replace the killed one) and whether every answer
came from one complete published version: each answer's hits, by collection, id and text,
must all be documents of one version whose snapshot was read after its publish.

    python benchmarks/serve_under_faults.py [--clients 16] [--seconds 60] [--docs 300]

Writes benchmarks/results/serve_under_faults.json.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from machine import machine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BIN = Path(sys.executable).parent / "bertindex"
HOST = "127.0.0.1"
WORDS = (
    "river mountain city train harbour garden market bridge castle forest lake island "
    "winter summer music history science engine bread coffee letter window road "
    "storm valley library theatre painter farmer doctor"
).split()
KILL_SLACK_S = 0.5  # a request that ended this soon after the kill counts as in flight


def documents(ids: range, version: int, seed: int) -> list[dict]:
    """Generated documents: a few sentences of WORDS, a tag naming the version that wrote
    them (so a changed document's text differs between versions)."""
    rng = random.Random(seed)
    return [
        {
            "id": f"d{i}",
            "text": f"version {version}. "
            + " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 60))),
        }
        for i in ids
    ]


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_corpora(work: Path, n: int) -> list[Path]:
    """The first corpus (`n` documents) and the two the index runs add: each a third as many
    new documents, and new text for a different third of the first ones."""
    third = n // 3
    paths = [write_jsonl(work / "v0.jsonl", documents(range(n), 0, 0))]
    for v in (1, 2):
        rows = documents(range(third * (v - 1), third * v), v, v) + documents(
            range(n + third * (v - 1), n + third * v), v, 10 + v
        )
        paths.append(write_jsonl(work / f"v{v}.jsonl", rows))
    return paths


def index(corpus: Path, store: Path) -> float:
    """`bertindex index` in its own process; returns its wall time."""
    started = time.perf_counter()
    subprocess.run(
        [str(BIN), "index", str(corpus), "--store", str(store), "--collection", "docs"],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return time.perf_counter() - started


def published(store: Path) -> tuple[str, dict[tuple[str, str], str]]:
    """The current version and its snapshot's documents: (collection, id) -> text."""
    from indexer.store.snapshot import open_current_snapshot

    snapshot = open_current_snapshot(store)
    if snapshot is None:
        raise SystemExit(f"{store}: nothing published")
    try:
        rows = snapshot.con.execute(
            "SELECT collection, external_id, text FROM documents"
        ).fetchall()
    finally:
        snapshot.con.close()
        snapshot.release()
    return snapshot.version, {(c, i): t for c, i, t in rows}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def worker_pids(parent: int) -> list[int]:
    """The server's worker processes: children of `serve` running multiprocessing's spawn
    (not its resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = stat.read_text().rsplit(")", 1)[1].split()[1]
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if ppid == str(parent) and b"spawn_main" in cmdline:
            found.append(int(stat.parent.name))
    return sorted(found)


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


def client(port: int, stop: threading.Event, seed: int, log: list, per_connection: int) -> None:
    """Send searches over keep-alive connections until `stop`, a new one after each
    `per_connection` requests (so connections spread over the workers, a replaced one too)
    and after an error; append (start, end, status or error name, hits as (collection, id,
    text)) per request to `log`."""
    rng = random.Random(seed)
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    sent = 0
    while not stop.is_set():
        sent += 1
        if sent % per_connection == 0:
            conn.close()
            conn = http.client.HTTPConnection(HOST, port, timeout=30)
        body = json.dumps({"query": " ".join(rng.sample(WORDS, 3)), "k": 5})
        started = time.time()
        try:
            conn.request("POST", "/search", body, {"Content-Type": "application/json"})
            answer = conn.getresponse()
            data = answer.read()
            hits = (
                [(h["collection"], h["id"], h["text"]) for h in json.loads(data)["hits"]]
                if answer.status == 200
                else []
            )
            log.append((started, time.time(), answer.status, hits))
        except (OSError, http.client.HTTPException) as exc:
            log.append((started, time.time(), type(exc).__name__, []))
            conn.close()
            conn = http.client.HTTPConnection(HOST, port, timeout=30)
    conn.close()


def publish(
    args, store: Path, corpora: list[Path], t0: float, record: dict, first: threading.Event
) -> None:
    """The two index runs, one after the other, each no earlier than its moment of the run
    (fractions of --seconds); records each version published and its documents and sets
    `first` once the first is out."""
    for at, corpus in zip(args.publish_at, corpora):
        time.sleep(max(0.0, t0 + at * args.seconds - time.time()))
        seconds = index(corpus, store)
        version, docs = published(store)
        record["versions"][version] = docs
        record["index_runs"].append(
            {
                "version": version,
                "seconds": round(seconds, 2),
                "published_at_s": round(time.time() - t0, 2),
            }
        )
        first.set()


def kill_one(args, serve_pid: int, t0: float, record: dict, first: threading.Event) -> None:
    """SIGKILL one worker once the first new version is out, at --kill-at of the run at the
    earliest (so its replacement opens the new version while the second run writes), then
    wait (up to 60 s) until the supervisor has as many workers as before, the killed one not
    among them."""
    first.wait()
    time.sleep(max(0.0, t0 + args.kill_at * args.seconds - time.time()))
    before = worker_pids(serve_pid)
    victim = before[0]
    os.kill(victim, signal.SIGKILL)
    killed = time.time()
    record["kill"] = {
        "time": killed,
        "at_s": round(killed - t0, 2),
        "pid": victim,
        "workers_before": before,
    }
    while time.time() < killed + 60:
        after = worker_pids(serve_pid)
        if len(after) == len(before) and victim not in after:
            record["kill"].update(workers_after=after, replaced_in_s=round(time.time() - killed, 2))
            return
        time.sleep(0.1)


def from_versions(hits: list, versions: dict) -> list[str]:
    """The published versions holding every hit (collection, id, text) of one answer."""
    return [
        v for v, docs in versions.items() if all(docs.get((c, i)) == text for c, i, text in hits)
    ]


def summarise(log: list, record: dict, args, elapsed: float) -> dict:
    kill = record.get("kill", {})
    kill_time = kill.get("time", float("inf"))
    ok = [r for r in log if r[2] == 200]
    failed = [r for r in log if r[2] != 200]
    in_flight = [r for r in failed if r[0] <= kill_time <= r[1] + KILL_SLACK_S]
    other = [r for r in failed if r not in in_flight]
    latency = np.array([r[1] - r[0] for r in ok]) * 1000
    by_versions: dict[str, int] = {}  # "v1,v2": answers whose hits are in both as they are
    first_at: dict[str, float] = {}  # when each such set first answered (s into the run)
    for r in sorted(ok):
        holders = ",".join(sorted(from_versions(r[3], record["versions"]))) or "none"
        by_versions[holders] = by_versions.get(holders, 0) + 1
        first_at.setdefault(holders, round(r[1] - record["t0"], 2))
    return {
        "machine": machine(),
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "workers": args.workers,
        "documents": args.docs,
        "requests": len(log),
        "answers": len(ok),
        "errors": len(failed),
        "errors_in_flight_at_kill": len(in_flight),
        "errors_other": len(other),
        "error_kinds": sorted({str(r[2]) for r in failed}),
        "other_errors": [
            {"at_s": round(r[0] - record["t0"], 2), "error": str(r[2])} for r in other[:20]
        ],
        "throughput_rps": round(len(ok) / elapsed, 1),
        "p50_ms": round(float(np.percentile(latency, 50)), 1) if len(ok) else None,
        "p99_ms": round(float(np.percentile(latency, 99)), 1) if len(ok) else None,
        "index_runs": record["index_runs"],
        "kill": {k: v for k, v in kill.items() if k != "time"},
        "worker_replaced": bool(kill.get("workers_after")),
        "answers_by_matching_versions": by_versions,
        "first_answer_at_s": first_at,
        "answers_not_from_one_published_version": by_versions.get("none", 0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--docs", type=int, default=300, help="documents before the runs")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--requests-per-connection", type=int, default=50)
    parser.add_argument(
        "--publish-at",
        type=float,
        nargs=2,
        default=(0.1, 0.5),
        help="when the two index runs start, at the earliest (fractions of "
        "--seconds); the load goes on until both have published",
    )
    parser.add_argument(
        "--kill-at",
        type=float,
        default=0.4,
        help="when one worker is SIGKILLed, at the earliest (fraction of "
        "--seconds; never before the first new version is out)",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "serve_under_faults.json"
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bertindex-faults-"))
    store = work / "store"
    first, *corpora = write_corpora(work, args.docs)
    print(f"indexing {args.docs} documents into {store} ...", flush=True)
    index(first, store)
    version, docs = published(store)
    record: dict = {"versions": {version: docs}, "index_runs": []}

    port = free_port()
    serve_log = (work / "serve.log").open("w")
    server = subprocess.Popen(
        [
            str(BIN),
            "serve",
            "--store",
            str(store),
            "--port",
            str(port),
            "--workers",
            str(args.workers),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=serve_log,
    )
    try:
        wait_ready(port, server)
        while len(worker_pids(server.pid)) < args.workers:
            time.sleep(0.2)
        stop, log = threading.Event(), []
        threads = [
            threading.Thread(target=client, args=(port, stop, i, log, args.requests_per_connection))
            for i in range(args.clients)
        ]
        record["t0"] = t0 = time.time()
        for t in threads:
            t.start()
        first = threading.Event()
        publisher = threading.Thread(target=publish, args=(args, store, corpora, t0, record, first))
        killer = threading.Thread(target=kill_one, args=(args, server.pid, t0, record, first))
        publisher.start()
        killer.start()
        time.sleep(max(0.0, t0 + args.seconds - time.time()))
        publisher.join()  # the load lasts until both versions are out (longer if slow)
        killer.join()
        time.sleep(1.0)  # answers from the last version too
        stop.set()
        for t in threads:
            t.join()
        elapsed = time.time() - t0
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
        serve_log.close()
    result = summarise(log, record, args, elapsed)
    result["serve_log_tail"] = (work / "serve.log").read_text()[-2000:]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "serve_log_tail"}, indent=2))
    print(
        f"{result['requests']} requests, {result['errors']} errors "
        f"({result['errors_in_flight_at_kill']} in flight on the killed worker, "
        f"{result['errors_other']} other), p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, "
        f"worker {result['kill'].get('pid')} replaced: {result['worker_replaced']}, "
        f"answers not from one published version: "
        f"{result['answers_not_from_one_published_version']}"
    )
    return (
        0
        if result["errors_other"] == 0
        and result["worker_replaced"]
        and result["answers_not_from_one_published_version"] == 0
        else 1
    )


if __name__ == "__main__":
    sys.exit(main())
