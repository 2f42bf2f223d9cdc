"""What publishing an index version costs after a small change: the base + delta publish
(`VectorIndex.load` mapped, remove + add into the delta, `save`: the version folder's delta and
deleted ids, the base file shared) against the full rewrite it replaces (read a private copy
of the whole index, remove + add in it, write all of it again), both from the same published
base in the same run; then single-query p50 (one thread) and recall@10 against exact search
over the same live vectors with a delta of 0 %, 1 % and 5 % of the base (`fits_delta`: whether
`bertindex index` would publish that delta, or rebuild: `VectorIndex.takes`).

Vectors: `benchmarks/mapped_index.py`'s (unit vectors around 1,000 seeded centres, 384 dims);
a change of c % removes c % of the base's ids (seeded) and adds as many new vectors from the
same draw under new ids, as changed documents do. The index is `auto`'s choice for N vectors
(`index.flat_limit: 0`, no budget: `IVF{L},PQ{d/2}x4fs,RFlat`, tuned), or `--spec`.

    .venv/bin/python benchmarks/index_delta.py --n 200000 \
        --out benchmarks/results/index_delta_200k.json
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import cpu_name, machine, write_json  # noqa: E402
from benchmarks.mapped_index import unit_vectors  # noqa: E402


def written_bytes(folder: Path) -> int:
    """Bytes of the files a publish wrote into a version folder (the store snapshot aside)."""
    return sum(
        f.stat().st_size for f in folder.iterdir() if f.suffix in (".faiss", ".npy", ".json")
    )


def delta_publish(store: Path, gone: np.ndarray, vectors: np.ndarray, ids: np.ndarray) -> dict:
    """The new way: map the base, change the delta and the deleted ids, write only those."""
    from indexer.config import IndexConfig
    from indexer.index.vector import VectorIndex
    from indexer.records.versions import version_dir

    started = time.perf_counter()
    index = VectorIndex.load(store, IndexConfig(), version="v1")
    fits = index.takes(len(ids))  # False: `bertindex index` would rebuild instead
    assert index.remove(gone), "the deleted ids must stay under DELETED_REBUILD"
    index.add(vectors, ids)
    version = index.save(store)
    seconds = time.perf_counter() - started
    return {"version": version, "seconds": round(seconds, 3), "fits_delta": fits} | {
        "bytes_written": written_bytes(version_dir(store, version))
    }


def full_rewrite(base: Path, gone: np.ndarray, vectors: np.ndarray, ids: np.ndarray) -> dict:
    """The old way (`sync_vector_index` before bases): a private copy of the whole index,
    remove + add in it (a rescoring stage records deletions instead), the whole file written
    (temporary name, fsync, as `save` did)."""
    import faiss

    from indexer.core.fsio import fsync_file
    from indexer.index.vector import _tombstoned

    started = time.perf_counter()
    index = faiss.read_index(str(base))
    out = base.with_name("rewritten.faiss.tmp")
    if _tombstoned(index):
        np.save(out.with_suffix(".npy"), gone)  # the deleted ids, saved beside it
    else:
        index.remove_ids(faiss.IDSelectorBatch(gone))
    index.add_with_ids(vectors, ids)
    faiss.write_index(index, str(out))
    fsync_file(out)
    seconds = time.perf_counter() - started
    size = out.stat().st_size
    out.unlink()
    return {"seconds": round(seconds, 3), "bytes_written": size}


def search_figures(store: Path, version: str, queries: np.ndarray, live, live_ids) -> dict:
    """Single-query p50 (one thread) and recall@10 against exact search over `live`."""
    import faiss

    from indexer.config import IndexConfig
    from indexer.index.vector import VectorIndex

    index = VectorIndex.load(store, IndexConfig(), version=version)
    _, truth = faiss.knn(queries, live, 10, metric=faiss.METRIC_INNER_PRODUCT)
    truth = live_ids[truth]
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        for q in queries[:20]:  # warm the pages a search reads
            index.search(q[None, :], 10)
        times, found = [], []
        for q in queries:
            started = time.perf_counter()
            found.append(index.search(q[None, :], 10)[1][0])
            times.append(time.perf_counter() - started)
    finally:
        faiss.omp_set_num_threads(threads)
    recall = np.mean([len(set(t) & set(f)) / 10 for t, f in zip(truth, found)])
    private, shared = index.footprint()
    return {
        "delta_vectors": int(index.delta.ntotal),
        "deleted": len(index.deleted),
        "p50_ms": round(1000 * float(np.median(times)), 3),
        "p90_ms": round(1000 * float(np.percentile(times, 90)), 3),
        "recall@10": round(float(recall), 4),
        "private_mb": round(private / 2**20, 1),
        "shared_mb": round(shared / 2**20, 1),
    }


def change(n: int, share: float, pool: np.ndarray, seed: int):
    """(ids removed from the base, vectors added, their new ids) for a change of `share`."""
    count = int(share * n)
    gone = np.sort(np.random.default_rng(seed).choice(n, count, replace=False)).astype(np.int64)
    return gone, pool[:count], np.arange(n, n + count, dtype=np.int64)


def build_base(store: Path, vectors: np.ndarray, spec: str | None) -> dict:
    from indexer.config import IndexConfig
    from indexer.index.auto import choose_spec
    from indexer.index.vector import VectorIndex
    from indexer.records.provenance import Provenance

    n, dim = vectors.shape
    config = IndexConfig(flat_limit=0, spec=spec or "auto")
    spec = spec or choose_spec(n, dim, config)
    provenance = Provenance("synthetic", "-", "mean", True, 16, dim, "fp32")
    started = time.perf_counter()
    index = VectorIndex.build(spec, provenance, config, vectors, np.arange(n, dtype=np.int64))
    index.save(store)
    return {
        "spec": spec,
        "build_seconds": round(time.perf_counter() - started, 1),
        "base_bytes": index.file_bytes[0],
        "tuning": index.tuning,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--spread", type=float, default=2.0)
    parser.add_argument("--spec", default=None, help="a FAISS factory string (default: auto)")
    parser.add_argument("--dir", type=Path, default=None, help="where the store folder goes")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    from indexer.index.version_files import version_files

    n = args.n
    data = unit_vectors(n + n // 20 + args.queries, args.dim, args.spread)
    base_vectors, pool, queries = data[:n], data[n : n + n // 20], data[n + n // 20 :]
    store = Path(tempfile.mkdtemp(prefix="index_delta_", dir=args.dir))
    report = {"n": n, "dim": args.dim, "queries": args.queries, "cpu": cpu_name()}
    report |= {"machine": machine(), "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])}
    report |= build_base(store, base_vectors, args.spec)
    print(f"base: {report}", file=sys.stderr)
    base_file = version_files(store, "v1")["base"]
    inode = os.stat(base_file).st_ino
    ids = np.arange(n, dtype=np.int64)
    report["search"] = [search_figures(store, "v1", queries, base_vectors, ids) | {"share": 0.0}]
    report["publish"] = []
    for share, seed in ((0.01, 1), (0.05, 2)):
        gone, added, new_ids = change(n, share, pool, seed)
        old = full_rewrite(base_file, gone, added, new_ids)
        new = delta_publish(store, gone, added, new_ids)
        assert os.stat(base_file).st_ino == inode, "the base must not be rewritten"
        report["publish"].append({"share": share, "delta": new, "full_rewrite": old})
        keep = np.setdiff1d(ids, gone)
        live = np.concatenate([base_vectors[keep], added])
        live_ids = np.concatenate([keep, new_ids])
        figures = search_figures(store, new["version"], queries, live, live_ids)
        report["search"].append(figures | {"share": share})
        print(f"{share:.0%}: delta {new}, full rewrite {old}; {figures}", file=sys.stderr)
    write_json(args.out, report)
    print(report)


if __name__ == "__main__":
    main()
