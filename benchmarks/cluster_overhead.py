"""What `runner: dask` costs on the same cores: index the first N SciFact abstracts with the
packaged model, once with the local runner (torch on every core) and once on a real cluster
on this machine (`dask scheduler` + W `dask worker --nthreads 1` processes on 127.0.0.1),
both warm (model loaded); reports wall times, their ratio, bytes per document sent and
received, and each worker's share of the work.

    python benchmarks/cluster_overhead.py --docs 600 --workers 2 \
        --out benchmarks/results/cluster_overhead.json
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.machine import cpu_name, machine, write_json  # noqa: E402

SCIFACT = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl.gz"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_cluster(workers: int, logs: Path) -> tuple[str, list[subprocess.Popen]]:
    """A scheduler and `workers` single-threaded workers (no nanny) on 127.0.0.1."""
    dask = str(Path(sys.executable).with_name("dask"))
    address = f"tcp://127.0.0.1:{_free_port()}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = []
    for name, args in [
        (
            "scheduler",
            [
                "scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                address.rsplit(":", 1)[1],
                "--no-dashboard",
            ],
        )
    ] + [
        (
            f"w{i}",
            [
                "worker",
                address,
                "--nthreads",
                "1",
                "--no-nanny",
                "--host",
                "127.0.0.1",
                "--no-dashboard",
                "--preload",
                "indexer.annotate.cluster",
            ],
        )
        for i in range(workers)
    ]:
        with open(logs / f"{name}.log", "w") as log:
            procs.append(
                subprocess.Popen(
                    [dask, *args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                )
            )
    return address, procs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=600)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from distributed import Client

    from flows.cluster import run_index_on_cluster
    from indexer.config import Config
    from indexer.encode.encoder import load_encoder
    from indexer.indexing.partitions import load_on_worker
    from indexer.indexing.run import run_index

    tmp = Path(tempfile.mkdtemp(prefix="bertindex-cluster-"))
    corpus = tmp / "scifact.jsonl"
    with gzip.open(SCIFACT, "rt", encoding="utf-8") as src, corpus.open("w") as dst:
        for i, line in enumerate(src):
            if i == args.docs:
                break
            dst.write(line)
    cfg = Config().with_overrides(
        **{"store.path": str(tmp / "local"), "search.query_encoder": "torch"}
    )
    address, procs = start_cluster(args.workers, tmp)
    try:
        load_encoder(cfg.model)  # warm: both runs are timed with the model loaded
        t = time.perf_counter()
        local = run_index([str(corpus)], cfg)
        local_s = time.perf_counter() - t
        dask_cfg = cfg.with_overrides(
            **{"store.path": str(tmp / "cluster"), "runner": "dask", "dask.address": address}
        )
        with Client(address, timeout=60) as client:
            client.wait_for_workers(args.workers, timeout=120)
            client.run(load_on_worker, dask_cfg)  # warm
            t = time.perf_counter()
            cluster = run_index_on_cluster(client, [str(corpus)], dask_cfg)
            cluster_s = time.perf_counter() - t
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    assert local["encoded"] == cluster["encoded"] == args.docs
    out = {
        "what": f"index {args.docs} SciFact abstracts, {cfg.model.name}, warm: local runner "
        f"(torch {os.cpu_count()} threads) vs {args.workers} `dask worker --nthreads 1` "
        "processes + scheduler on the same machine",
        "cpu": cpu_name(),
        "machine": machine(),
        "local_s": round(local_s, 2),
        "cluster_s": round(cluster_s, 2),
        "cluster_over_local": round(cluster_s / local_s, 3),
        "cluster": cluster["cluster"],
    }
    print(out)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
