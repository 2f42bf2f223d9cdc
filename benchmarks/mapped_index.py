"""Server processes sharing one mapped index: the private memory of each and the total Pss of
`--processes` processes that open the same published version the way `serve` workers do
(`VectorIndex.load`), a private copy (`mapped=False`, FAISS read_index as before) against the
mapped file; for the `auto` choice without a budget and under one that picks the mapped spec
(`--budget-mb`, default: 1.5x what a mapped load of it keeps private). Also single-query p50 on
one thread and recall@10 against exact search on held-out queries.

Vectors: unit vectors around 1,000 seeded Gaussian centres, each cluster spread (`--spread`)
along 32 random directions of its own; queries are held out from the same draw. Each process
searches every query once, then all are measured together (/proc/PID/smaps_rollup:
Private_Dirty is what the process copied for itself, Pss its share of everything it maps,
shared pages divided among the processes mapping them).

    .venv/bin/python benchmarks/mapped_index.py                  # 200k vectors, 384 dims
    .venv/bin/python benchmarks/mapped_index.py --n 1000000 \
        --out benchmarks/results/mapped_index_1m.json
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import cpu_name, machine, write_json  # noqa: E402

FIELDS = ("Rss", "Pss", "Shared_Clean", "Private_Clean", "Private_Dirty")


def smaps_rollup(pid: str = "self") -> dict[str, float]:
    """MB by field of /proc/PID/smaps_rollup (FIELDS)."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if parts and parts[0].rstrip(":") in FIELDS:
            out[parts[0].rstrip(":")] = round(int(parts[1]) / 1024, 1)
    return out


def unit_vectors(n: int, dim: int, spread: float, seed: int = 0, rank: int = 32) -> np.ndarray:
    """(n, dim) unit vectors around 1,000 seeded centres, each spread along its own `rank`
    random directions (embeddings vary along few directions; noise in all `dim` of them
    leaves every neighbour about as far as the next and no index finds them)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(1000, dim)).astype(np.float32)
    bases = rng.normal(size=(1000, rank, dim)).astype(np.float32) / np.sqrt(rank)
    out = np.empty((n, dim), np.float32)
    for start in range(0, n, 50_000):  # a block at a time: float64 noise would double memory
        stop = min(n, start + 50_000)
        which = rng.integers(0, 1000, stop - start)
        noise = rng.normal(size=(stop - start, rank)).astype(np.float32)
        block = centres[which] + spread * np.einsum("nr,nrd->nd", noise, bases[which])
        out[start:stop] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def build(folder: Path, vectors: np.ndarray, budget_mb: float | None) -> dict:
    """Choose (`auto`, tuned), build and publish an index of `vectors` into `folder`."""
    from indexer.config import IndexConfig
    from indexer.index.auto import choose_spec, estimate_bytes, resident_bytes
    from indexer.index.vector import VectorIndex
    from indexer.index.version_files import version_files
    from indexer.records.provenance import Provenance

    n, dim = vectors.shape
    config = IndexConfig(flat_limit=0, memory_budget_mb=budget_mb)
    spec = choose_spec(n, dim, config)
    provenance = Provenance("synthetic", "-", "mean", True, 16, dim, "fp32")
    started = time.perf_counter()
    index = VectorIndex.build(spec, provenance, config, vectors, np.arange(n, dtype=np.int64))
    seconds = time.perf_counter() - started
    version = index.save(folder)
    return {
        "spec": spec,
        "budget_mb": budget_mb,
        "build_s": round(seconds, 1),
        "tuning": {k: index.tuning[k] for k in ("param", "value", "recall@10", "k_factor")},
        "estimate_mb": round(estimate_bytes(spec, n, dim) / 2**20),
        "resident_estimate_mb": round(resident_bytes(spec, n, dim) / 2**20),
        "file_mb": round(version_files(folder, version)["base"].stat().st_size / 2**20),
    }


def serve_like(folder: str, mapped: bool, queries: np.ndarray, barrier, results) -> None:
    """One server process: load the version, answer every query once, then be measured while
    the others are alive too."""
    import faiss

    from indexer.config import IndexConfig
    from indexer.index.vector import VectorIndex

    faiss.omp_set_num_threads(1)  # `serve --threads 1`
    before = smaps_rollup()
    index = VectorIndex.load(Path(folder), IndexConfig(), mapped=mapped)
    for query in queries:
        index.search(query[None], 10)
    barrier.wait()
    results.put({"baseline": before, "loaded": smaps_rollup()})
    barrier.wait()


def processes(folder: Path, mapped: bool, queries: np.ndarray, count: int) -> dict:
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(count), ctx.Queue()
    procs = [
        ctx.Process(target=serve_like, args=(str(folder), mapped, queries, barrier, results))
        for _ in range(count)
    ]
    for p in procs:
        p.start()
    each = [results.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join()
    private = [r["loaded"]["Private_Dirty"] for r in each]
    return {
        "processes": each,
        "private_dirty_mb": private,
        "index_private_mb": [
            round(r["loaded"]["Private_Dirty"] - r["baseline"]["Private_Dirty"], 1) for r in each
        ],
        "total_pss_mb": round(sum(r["loaded"]["Pss"] for r in each), 1),
        "total_rss_mb": round(sum(r["loaded"]["Rss"] for r in each), 1),
    }


def latency_and_recall(folder: Path, mapped: bool, queries: np.ndarray, truth) -> dict:
    import faiss

    from indexer.config import IndexConfig
    from indexer.index.vector import VectorIndex

    faiss.omp_set_num_threads(1)
    started = time.perf_counter()
    index = VectorIndex.load(folder, IndexConfig(), mapped=mapped)
    load_s = time.perf_counter() - started
    times, found = [], []
    for _ in range(2):  # the second pass is timed: its pages are in memory, as a server's
        times, found = [], []
        for query in queries:
            t = time.perf_counter()
            found.append(index.search(query[None], 10)[1][0])
            times.append(time.perf_counter() - t)
    recall = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)])
    return {
        "load_s": round(load_s, 3),
        "p50_ms": round(float(np.median(times)) * 1000, 3),
        "p99_ms": round(float(np.percentile(times, 99)) * 1000, 3),
        "recall@10": round(float(recall), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--spread", type=float, default=2.0)
    parser.add_argument("--budget-mb", type=float, default=None)
    parser.add_argument("--dir", type=Path, default=None, help="where the indexes are built")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import faiss

    from indexer.index.auto import mapped_spec, resident_bytes

    data = unit_vectors(args.n + args.queries, args.dim, args.spread)
    vectors, queries = data[: args.n], data[args.n :]
    _, truth = faiss.knn(queries, vectors, 10, metric=faiss.METRIC_INNER_PRODUCT)
    mapped = mapped_spec(args.n, args.dim)
    budget = args.budget_mb or round(1.5 * resident_bytes(mapped, args.n, args.dim) / 2**20)
    root = args.dir or Path(tempfile.mkdtemp(prefix="mapped_index_"))
    report: dict = {"n": args.n, "dim": args.dim, "queries": args.queries, "runs": []}
    report |= {"cpu": cpu_name(), "machine": machine(), "processes": args.processes}
    for name, budget_mb in (("auto", None), ("auto under a budget", budget)):
        folder = root / name.replace(" ", "_")
        built = build(folder, vectors, budget_mb)
        print(f"{name}: {built}", file=sys.stderr)
        for mapped in (False, True):
            run = built | {"name": name, "mapped": mapped}
            run |= latency_and_recall(folder, mapped, queries, truth)
            run |= processes(folder, mapped, queries, args.processes)
            report["runs"].append(run)
            print(
                f"{built['spec']} mapped={mapped}: private MB {run['private_dirty_mb']}, "
                f"total Pss {run['total_pss_mb']} MB, p50 {run['p50_ms']} ms, "
                f"recall@10 {run['recall@10']}",
                file=sys.stderr,
            )
    write_json(args.out, report)
    print(report)


if __name__ == "__main__":
    main()
