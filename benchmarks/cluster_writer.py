"""What the one writer pays per document when a cluster encodes: N tweet-length documents
(`benchmarks/scale.py`'s corpus) indexed on a real cluster on this machine (`dask scheduler` +
W `dask worker --nthreads 1` processes on 127.0.0.1) with the near-free encoder (the packaged
tokenizer on a 0-layer, 384-wide BERT: what is measured is everything around the model), once
with the workers' vectors sent back to the writer (`dask.vectors: send`) and once written by
the workers into the store's folder, which the writer only records (`files`), alternated
`--repeat` times in one run.

Reported per mode (medians): wall time, the writer's seconds committing (`cluster.writer.
commit_s`: what caps how many workers one writer keeps up with) and its documents per
committing second, bytes per document back from the workers. On 2 cores the workers and the
writer share the CPU, so the wall times say little about a real cluster; the writer's
committing seconds are its own.

    python benchmarks/cluster_writer.py --n 200000 --workers 2 --batch-size 65536 --repeat 2 \
        --out benchmarks/results/cluster_writer.json
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from benchmarks.cluster_overhead import start_cluster  # noqa: E402
from benchmarks.machine import machine, write_json  # noqa: E402
from benchmarks.scale import build_encoder, tweets, write_corpus  # noqa: E402

MODES = ("send", "files")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=65536)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from distributed import Client

    from flows.cluster import run_index_on_cluster
    from indexer.config import Config
    from indexer.indexing.partitions import load_on_worker

    tmp = Path(tempfile.mkdtemp(prefix="bertindex-cluster-writer-"))
    corpus = tmp / "docs.jsonl"
    bases, _ = tweets()
    write_corpus(corpus, args.n, bases)
    model = build_encoder(tmp / "encoder")
    base = Config().with_overrides(
        **{
            "model.name": str(model),
            "model.dtype": "fp32",
            "search.query_encoder": "torch",
            "index.spec": "Flat",
            "runner": "dask",
        }
    )
    address, procs = start_cluster(args.workers, tmp)
    runs: dict[str, list[dict]] = {mode: [] for mode in MODES}
    try:
        with Client(address, timeout=60) as client:
            client.wait_for_workers(args.workers, timeout=120)
            client.run(load_on_worker, base)  # warm
            for rep in range(args.repeat):
                for mode in MODES:
                    store = tmp / f"{mode}-{rep}"
                    cfg = base.with_overrides(
                        **{"store.path": str(store), "dask.address": address, "dask.vectors": mode}
                    )
                    t = time.perf_counter()
                    summary = run_index_on_cluster(
                        client, [str(corpus)], cfg, batch_size=args.batch_size
                    )
                    wall = time.perf_counter() - t
                    assert summary["encoded"] == args.n, summary
                    cluster = summary["cluster"]
                    assert cluster["vectors"] == ("files" if mode == "files" else "sent")
                    row = {
                        "wall_s": round(wall, 2),
                        "commit_s": cluster["writer"]["commit_s"],
                        "wait_s": cluster["writer"]["wait_s"],
                        "received_bytes_per_doc": cluster["bytes_per_document"]["received"],
                        "stages": summary["stages"],
                    }
                    runs[mode].append(row)
                    print(mode, rep, row, flush=True)
                    shutil.rmtree(store, ignore_errors=True)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    def median(mode: str, key: str) -> float:
        return round(statistics.median(r[key] for r in runs[mode]), 2)

    out = {
        "what": f"index {args.n} tweet-length documents on {args.workers} `dask worker "
        "--nthreads 1` processes + scheduler on this machine, near-free encoder, vectors sent "
        "back to the writer vs written by the workers as files the writer records",
        "command": "python benchmarks/cluster_writer.py " + " ".join(sys.argv[1:]),
        "batch_size": args.batch_size,
        "modes": {
            mode: {
                "wall_s": median(mode, "wall_s"),
                "writer_commit_s": median(mode, "commit_s"),
                "writer_docs_per_commit_s": round(args.n / median(mode, "commit_s")),
                "received_bytes_per_doc": median(mode, "received_bytes_per_doc"),
                "runs": runs[mode],
            }
            for mode in MODES
        },
        "machine": machine(),
    }
    out["commit_ratio_send_to_files"] = round(
        out["modes"]["send"]["writer_commit_s"] / out["modes"]["files"]["writer_commit_s"], 2
    )
    print({m: {k: v for k, v in r.items() if k != "runs"} for m, r in out["modes"].items()})
    if args.out:
        write_json(args.out, out)


if __name__ == "__main__":
    main()
