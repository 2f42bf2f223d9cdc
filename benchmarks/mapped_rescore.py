"""New queries on a mapped `…,RFlat` base: FAISS's `IndexRefine` (each candidate's page read
in turn) against `indexer.index.rescore.search_mapped` (the candidates' pages requested
together, then rescored), each on its own fresh set of queries so that every query reads
pages no earlier query touched, with the page cache dropped before each set when the
process may (root: `/proc/sys/vm/drop_caches`); then the same queries again (warm).

    .venv/bin/python benchmarks/mapped_rescore.py --base STORE/index/bases/v1.faiss \\
        --out benchmarks/results/mapped_rescore_1m.json

Queries: stored vectors with noise (seeded), one at a time, the base's tuned nprobe
(`--nprobe`) and k_factor 16, k = 10.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import machine, write_json  # noqa: E402


def drop_caches() -> bool:
    try:
        Path("/proc/sys/vm/drop_caches").write_text("1")
        return True
    except OSError:
        return False


def timed(search, queries: np.ndarray) -> tuple[float, list]:
    walls, found = [], []
    for q in queries:
        started = time.perf_counter()
        found.append(search(q[None, :]))
        walls.append(time.perf_counter() - started)
    return round(statistics.median(walls) * 1000, 3), found


def main() -> None:
    import faiss

    from indexer.index.auto import search_params
    from indexer.index.rescore import mapped_refine, search_mapped

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="a mapped …,RFlat base file")
    parser.add_argument("--queries", type=int, default=100, help="a set; four sets are used")
    parser.add_argument("--nprobe", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    index = faiss.read_index(str(args.base), faiss.IO_FLAG_MMAP_IFC)
    held = getattr(index, "id_map", None)  # an IDMap's ids; none: not a refined base
    parts = None if held is None else mapped_refine(index, faiss.vector_to_array(held))
    if parts is None:
        sys.exit(f"{args.base}: not an IDMap over IndexRefine with float32 vectors")
    rng = np.random.default_rng(0)
    rows = rng.choice(len(parts.ids), 4 * args.queries, replace=False)
    queries = parts.vectors[rows] + rng.normal(0, 0.02, (len(rows), parts.vectors.shape[1]))
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    sets = np.split(queries, 4)
    refine = search_params("nprobe", args.nprobe, None, 16)
    first = search_params("nprobe", args.nprobe)

    def faiss_refine(q):
        return index.search(q, 10, params=refine)[1][0]

    def here(q):
        return search_mapped(parts, q, 10, 16, first)[1][0]

    dropped = drop_caches()
    cold = {}
    for name, search, part in (
        ("faiss_refine", faiss_refine, sets[0]),
        ("prefetched", here, sets[1]),
        ("faiss_refine_2", faiss_refine, sets[2]),
        ("prefetched_2", here, sets[3]),
    ):
        drop_caches()
        cold[name] = timed(search, part)[0]
    warm_faiss, a = timed(faiss_refine, sets[0])
    warm_here, b = timed(here, sets[0])
    same = float(np.mean([np.array_equal(x, y) for x, y in zip(a, b)]))
    report = {
        "machine": machine(),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "vectors": len(parts.ids),
        "page_cache_dropped": dropped,
        "new_queries_p50_ms": cold,
        "repeated_p50_ms": {"faiss_refine": warm_faiss, "prefetched": warm_here},
        "same_top10_share": same,
    }
    print(json.dumps(report["new_queries_p50_ms"]), json.dumps(report["repeated_p50_ms"]), same)
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    main()
