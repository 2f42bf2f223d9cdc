"""Shorter fast-scan codes for a served base's first pass: recall@10 and milliseconds a query
by nprobe and rescoring depth, for `IVF<nlist>,PQ<m>x4fs` first passes rescored exactly.

At 10M on the Intel Xeon a served dense query spends ~35 ms of CPU, most of it the first
pass: `auto`'s `PQ192x4fs` codes (96 bytes a vector) of 2,038 of 16,384 lists at recall 0.95
(docs/guides/scale.md, seventeenth session). Fewer sub-quantizers scan fewer bytes but rank
the candidates worse, which deeper rescoring (more rows read from the store's files) may make
up. Here, on a scale store's vectors (`benchmarks/scale.py`'s near-free encoder), each `--pq`
is built over the same trained lists (`IVF<nlist>,PQ<m>x4fs,RFlat`: the rescoring exact, as
a base over the files rescores from float32 rows), and 1,000 held-out tweets are searched one
at a time on one thread (as a serving process does) at each nprobe and k_factor; recall@10
against exact search over the same vectors.

    .venv/bin/python benchmarks/first_pass_codes.py --store DIR/n1000000/store \\
        --encoder DIR/encoder-0-layer --nlist 4096 \\
        --out benchmarks/results/first_pass_codes_1M_intel_s22.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import faiss
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import scale  # noqa: E402
from machine import machine, write_json  # noqa: E402
from recall_curve import stored_vectors  # noqa: E402

QUERIES = 1000
K = 10


def build(x: np.ndarray, nlist: int, m: int, centroids: np.ndarray | None) -> faiss.Index:
    """`IVF<nlist>,PQ<m>x4fs,RFlat` over `x`, its lists' `centroids` given or trained."""
    index = faiss.index_factory(
        x.shape[1], f"IVF{nlist},PQ{m}x4fs,RFlat", faiss.METRIC_INNER_PRODUCT
    )
    ivf = faiss.extract_index_ivf(index)
    sample = x[np.random.default_rng(0).choice(len(x), min(len(x), 64 * nlist), replace=False)]
    if centroids is not None:  # the same lists for every m: only the codes differ
        ivf.quantizer.add(centroids)
    index.train(sample)
    index.add(x)
    return index


def measure(index, queries, truth, probes, k_factors) -> list[dict]:
    ivf = faiss.extract_index_ivf(index)
    out = []
    for nprobe in probes:
        ivf.nprobe = nprobe
        for k_factor in k_factors:
            params = faiss.IndexRefineSearchParameters(k_factor=k_factor)
            found = np.empty((len(queries), K), np.int64)
            started = time.perf_counter()
            for i in range(len(queries)):
                found[i] = index.search(queries[i : i + 1], K, params=params)[1][0]
            ms = (time.perf_counter() - started) * 1000 / len(queries)
            hits = [len(set(f) & set(t)) / K for f, t in zip(found, truth)]
            out.append(
                {
                    "nprobe": nprobe,
                    "k_factor": k_factor,
                    "recall_at_10": round(float(np.mean(hits)), 4),
                    "ms_a_query": round(ms, 3),
                }
            )
            print(out[-1], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--encoder", type=Path, required=True)
    parser.add_argument("--nlist", type=int, default=4096)
    parser.add_argument("--pq", type=int, nargs="+", default=[192, 96, 64])
    parser.add_argument("--probes", type=int, nargs="+", default=[128, 253, 384, 512])
    parser.add_argument("--k-factors", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    faiss.omp_set_num_threads(1)  # one query at a time on one thread, as served
    x = stored_vectors(args.store)
    tokenizer, model = scale.load_encoder(str(args.encoder))
    queries = np.ascontiguousarray(scale.encode(tokenizer, model, scale.tweets()[1][:QUERIES]))
    exact = faiss.IndexFlatIP(x.shape[1])
    exact.add(x)
    faiss.omp_set_num_threads(2)
    truth = exact.search(queries, K)[1]
    del exact
    report: dict = {
        "command": " ".join(sys.argv),
        "machine": machine(),
        "vectors": len(x),
        "specs": {},
    }
    centroids = None
    for m in args.pq:
        faiss.omp_set_num_threads(2)  # building: both cores
        started = time.perf_counter()
        index = build(x, args.nlist, m, centroids)
        built = round(time.perf_counter() - started, 1)
        if centroids is None:
            centroids = faiss.extract_index_ivf(index).quantizer.reconstruct_n(0, args.nlist)
        faiss.omp_set_num_threads(1)
        spec = f"IVF{args.nlist},PQ{m}x4fs,RFlat"
        print(spec, "built in", built, "s", flush=True)
        report["specs"][spec] = {
            "build_s": built,
            "points": measure(index, queries, truth, args.probes, args.k_factors),
        }
        write_json(args.out, report)


if __name__ == "__main__":
    main()
