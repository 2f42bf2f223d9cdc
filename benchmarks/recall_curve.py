"""Recall@10 against exact search as nprobe grows, for the vectors of several stores: is the
curve the scale corpus's near-free (0-layer) encoder gives the curve a real encoder gives?

For each `--stores` path: every stored vector (`Store.vectors.iter_batches`, the live file),
the last `--queries` rows held out as queries (never added), the rest added to the spec `auto`
serves at this size scaled down (`IVF{--lists},PQ{d/2}x4fs,Refine(SQfp16)`, built by FAISS's
factory; k_factor `--k-factor`), and exact inner-product search over the same rows for the
truth. Reports recall@10 at each `--probes` and the smallest probed share of the lists that
reaches 0.90 and 0.95.

    .venv/bin/python benchmarks/recall_curve.py --stores A/store B/store --names 0-layer MiniLM \\
        --lists 128 --out benchmarks/results/recall_curve_100k.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import faiss
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import machine, write_json  # noqa: E402

K = 10


def stored_vectors(store_dir: Path) -> np.ndarray:
    """Every vector of the store's live file, in chunk id order, float32."""
    from indexer.store import Store

    with Store(store_dir, read_only=True, snapshot=False) as store:
        parts = [vectors for _, vectors in store.vectors.iter_batches()]
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.float32)


def curve(vectors: np.ndarray, args) -> dict:
    base, queries = vectors[: -args.queries], vectors[-args.queries :]
    exact = faiss.IndexFlatIP(base.shape[1])
    exact.add(base)
    _, truth = exact.search(queries, K)
    dim = base.shape[1]
    spec = f"IVF{args.lists},PQ{dim // 2}x4fs,Refine(SQfp16)"
    index = faiss.index_factory(dim, spec, faiss.METRIC_INNER_PRODUCT)
    index.train(base)
    index.add(base)
    ivf = faiss.extract_index_ivf(index)
    out: dict = {"vectors": int(base.shape[0]), "queries": int(len(queries)), "spec": spec}
    points = []
    for probe in args.probes:
        ivf.nprobe = probe
        params = faiss.IndexRefineSearchParameters(k_factor=args.k_factor)
        _, found = index.search(queries, K, params=params)
        hits = [len(set(f) & set(t)) / K for f, t in zip(found, truth)]
        points.append(
            {
                "nprobe": probe,
                "share": round(probe / args.lists, 4),
                "recall_at_10": round(float(np.mean(hits)), 4),
            }
        )
    out["curve"] = points
    for target in (0.90, 0.95):
        reached = [p["share"] for p in points if p["recall_at_10"] >= target]
        out[f"share_for_{target:.2f}"] = min(reached) if reached else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", type=Path, nargs="+", required=True)
    parser.add_argument("--names", nargs="+", help="a name for each store (default: its path)")
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--lists", type=int, default=128)
    parser.add_argument("--k-factor", type=int, default=32)
    parser.add_argument(
        "--probes", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16, 24, 32, 48, 64]
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    names = args.names or [str(s) for s in args.stores]
    result = {"command": " ".join(sys.argv), "machine": machine(), "stores": {}}
    for name, store in zip(names, args.stores):
        result["stores"][name] = curve(stored_vectors(store), args)
        print(name, result["stores"][name])
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
