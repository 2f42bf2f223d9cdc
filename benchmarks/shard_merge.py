"""A sharded IVF build at scale (`indexer.index.shards`): N random unit vectors in S shards,
each shard added in its own process (P at a time, as cluster workers would), then merged in
this process; reports training, per-shard add, merge time and this process's peak memory
(training and merging happen here, the shards' vectors never do).

    python benchmarks/shard_merge.py --n 10000000 --shards 8 --dim 384 --spec IVF1024,PQ48np \
        --out benchmarks/results/shard_merge_10m.json

Random vectors stand in for embeddings: the add and merge costs depend on N, dim, nlist and
the code size, not on what the vectors mean.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.machine import cpu_name, machine, write_json  # noqa: E402


def _vectors(seed: int, n: int, dim: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def _shard(args) -> dict:
    """In a child process: build shard `i` (ids start .. start+n) and write it to `path`."""
    import faiss

    from indexer.index.shards import add_to_shard

    faiss.omp_set_num_threads(1)  # one core per shard process, as a --nthreads 1 worker
    i, start, n, dim, template_path, path = args
    t = time.perf_counter()
    vectors = _vectors(1000 + i, n, dim)
    made = time.perf_counter() - t
    template = np.fromfile(template_path, dtype=np.uint8)
    t = time.perf_counter()
    data = add_to_shard(template, np.arange(start, start + n, dtype=np.int64), vectors)
    added = time.perf_counter() - t
    data.tofile(path)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "shard": i,
        "vectors": n,
        "generate_s": round(made, 1),
        "add_s": round(added, 1),
        "bytes": int(data.nbytes),
        "peak_rss_mb": round(peak),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--spec", default="IVF1024,PQ48np")  # np: no polysemous training
    parser.add_argument("--train", type=int, default=65_536, help="training vectors")
    parser.add_argument("--tmp", type=Path, default=Path("/tmp/bertindex-shards"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import faiss

    from indexer.index.shards import merge_shards, train_shard_template, unmergeable

    faiss.omp_set_num_threads(1)  # measured on one core: on a shared 2-core machine OpenMP
    # spin-waits turn a minute of k-means into ten
    if unmergeable(args.spec):
        raise SystemExit(unmergeable(args.spec))
    args.tmp.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    template = train_shard_template(args.spec, args.dim, _vectors(0, args.train, args.dim))
    train_s = time.perf_counter() - t
    template_path = args.tmp / "template.bin"
    template.tofile(template_path)
    size = -(-args.n // args.shards)
    jobs = [
        (
            i,
            i * size,
            min(size, args.n - i * size),
            args.dim,
            str(template_path),
            str(args.tmp / f"shard{i}.bin"),
        )
        for i in range(args.shards)
    ]
    t = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        shards = pool.map(_shard, jobs, chunksize=1)
    build_s = time.perf_counter() - t
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t = time.perf_counter()
    index = merge_shards(template, (np.fromfile(j[5], dtype=np.uint8) for j in jobs))
    merge_s = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert index.ntotal == args.n, (index.ntotal, args.n)
    faiss.write_index(index, str(args.tmp / "merged.faiss"))
    out = {
        "what": f"{args.n:,} vectors, dim {args.dim}, {args.spec}, {args.shards} shards built "
        f"{args.processes} processes at a time (1 thread each), merged in one",
        "cpu": cpu_name(),
        "machine": machine(),
        "train_s": round(train_s, 1),
        "shards_wall_s": round(build_s, 1),
        "merge_s": round(merge_s, 1),
        "merge_peak_rss_mb": round(peak),
        "rss_before_merge_mb": round(rss_before),
        "index_bytes": (args.tmp / "merged.faiss").stat().st_size,
        "shards": shards,
    }
    for j in jobs:
        Path(j[5]).unlink()
    print(out)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
