"""A mapped base's rescoring stage: float32 vectors (`RFlat`) against 8-bit (`Refine(SQ8)`) and
half-precision (`Refine(SQfp16)`) codes, on the served path.

Builds `IVF{L},PQ{d/2}x4fs,<refine>` over the same `--vectors` embeddings of a store (every
10th chunk of its live DuckDB, as `mapped_codes.py` reads them; the last `--queries` rows are
held out, never added) with `VectorIndex.build`, saves each as a published base and opens it
as `serve` does (`VectorIndex.load`: mapped, rescored by `indexer.index.rescore`). Reports the
base's bytes on disk, recall@10 against exact search at each `--probes` (k_factor
`--k-factor`), and the single-thread p50 of a query:

* **cold**: the base's files dropped from the page cache first (`posix_fadvise(DONTNEED)` on
  every file of the folder: no root needed), then each held-out query once, in order: the
  lists and rescoring pages a query touches are read from disk unless an earlier query read
  them;
* **warm**: the same queries again;

and the process's Pss (`/proc/self/smaps_rollup`) before the base is opened and after both
passes. `--reads file mapped` measures each base twice: its rescoring rows read from the file
with `pread` (`rescore.FileRows`, what searches do) and through the mapping (before).

    .venv/bin/python benchmarks/refine_codes.py --store DIR/store --vectors 1000000 \\
        --out benchmarks/results/refine_codes_1m.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import machine, write_json  # noqa: E402
from benchmarks.mapped_codes import read_vectors  # noqa: E402

K = 10


def evict(folder: Path) -> None:
    """Drop `folder`'s files from the page cache (clean pages no process maps)."""
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def timed(index, queries: np.ndarray) -> tuple[float, np.ndarray]:
    """p50 ms of one query at a time, and the found ids."""
    walls, found = [], []
    for q in queries:
        start = time.perf_counter()
        _, ids = index.search(q[None, :], K)
        walls.append((time.perf_counter() - start) * 1000)
        found.append(ids[0])
    return float(np.median(walls)), np.array(found)


def pss_mb() -> float:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def measure(refine: str, folder: Path, base, queries, truth, args) -> dict:
    from indexer.config import IndexConfig
    from indexer.index import rescore
    from indexer.index.vector import VectorIndex
    from indexer.records.provenance import Provenance

    dim = base.shape[1]
    spec = f"IVF{args.lists},PQ{dim // 2}x4fs,{refine}"
    provenance = Provenance("scale", "-", "mean", True, 16, dim, "fp32")
    started = time.perf_counter()
    config = IndexConfig(spec=spec, refine_factor=args.k_factor)
    built = VectorIndex.build(spec, provenance, config, base, np.arange(len(base)))
    built.save(folder)
    del built
    row: dict = {"spec": spec, "build_s": round(time.perf_counter() - started, 1)}
    row["disk_bytes"] = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    for nprobe in args.probes:
        for reads in args.reads:
            rescore.READ_FILES = reads == "file"
            config = IndexConfig(spec=spec, nprobe=nprobe, refine_factor=args.k_factor)
            evict(folder)
            before = pss_mb()
            index = VectorIndex.load(folder, config)
            parts = index._rescored_here
            assert parts is not None, spec  # the served path, not FAISS's refine
            assert (parts.file is not None) == (reads == "file")
            cold, found = timed(index, queries)
            warm, _ = timed(index, queries)
            recall = np.mean([len(set(f) & set(t)) / K for f, t in zip(found, truth)])
            name = f"nprobe_{nprobe}" + ("" if reads == "file" else "_mapped_reads")
            row[name] = {
                "recall@10": round(float(recall), 4),
                "cold_ms_p50": round(cold, 3),
                "warm_ms_p50": round(warm, 3),
                "pss_added_mb": round(pss_mb() - before, 1),
            }
            print(spec, name, row[name], flush=True)
            del index, parts
    rescore.READ_FILES = True
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True, help="a store holding vectors")
    parser.add_argument("--vectors", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--lists", type=int, default=4096)
    parser.add_argument("--k-factor", type=int, default=32)
    parser.add_argument("--probes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--refines", nargs="+", default=["RFlat", "Refine(SQ8)", "Refine(SQfp16)"])
    parser.add_argument("--reads", nargs="+", default=["file"], choices=["file", "mapped"])
    parser.add_argument("--work", type=Path, help="where the bases are written (default: /tmp)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    faiss.omp_set_num_threads(1)
    vectors = read_vectors(args.store, args.vectors + args.queries, 0)
    base, queries = vectors[: -args.queries], vectors[-args.queries :]
    del vectors
    _, truth = faiss.knn(queries, base, K, metric=faiss.METRIC_INNER_PRODUCT)
    rows = []
    for refine in args.refines:
        with tempfile.TemporaryDirectory(dir=args.work) as tmp:
            rows.append(measure(refine, Path(tmp), base, queries, truth, args))
    result = {
        "machine": machine(),
        "command": " ".join(["python", "benchmarks/refine_codes.py", *sys.argv[1:]]),
        "store": str(args.store),
        "vectors": len(base),
        "queries": len(queries),
        "k_factor": args.k_factor,
        "rows": rows,
    }
    if args.out:  # each row was printed as it was measured
        write_json(args.out, result)


if __name__ == "__main__":
    main()
