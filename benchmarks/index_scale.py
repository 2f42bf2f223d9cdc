"""Vector index at scale: the `auto` choice against exact FAISS search, hnswlib and any other
FAISS spec (`--also`), on `--n` vectors that behave like real embeddings.

Real embeddings: the packaged model encodes sentences of ../shared/data (STS-B, TweetEval,
SciFact titles); cached in --cache. A Gaussian mixture (full covariances) fitted to them
draws the database (L2-normalised, as the model's output); held-out real embeddings are
the queries. For each method: build time, index memory, recall@10 against exact search,
p50/p99 latency of single queries on one thread, with the search parameter raised until
recall@10 ≥ --target on the queries.

    .venv/bin/python benchmarks/index_scale.py --n 200000 --flat-limit 0
    nohup .venv/bin/python benchmarks/index_scale.py --n 1000000 --also HNSW32,Flat \
        --out /tmp/index_scale.json > /tmp/index_scale.log 2>&1 &
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def real_sentences(limit: int) -> list[str]:
    texts: list[str] = []
    for split in ("train", "dev", "test"):
        path = DATA / "stsbenchmark" / f"sts-{split}.csv"
        if path.is_file():
            with path.open(encoding="utf-8") as fh:
                for row in csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE):
                    texts.extend(row[5:7])
    for task in ("sentiment", "hate", "offensive"):
        path = DATA / "tweeteval" / task / "train_text.txt"
        if path.is_file():
            texts.extend(path.read_text(encoding="utf-8").splitlines())
    corpus = DATA / "scifact" / "corpus.jsonl.gz"
    if corpus.is_file():
        with gzip.open(corpus, "rt", encoding="utf-8") as fh:
            texts.extend(json.loads(line).get("title") or "" for line in fh)
    unique = sorted({t.strip() for t in texts if len(t.strip()) > 10})
    rng = np.random.default_rng(0)
    return [unique[i] for i in rng.permutation(len(unique))[:limit]]


def real_embeddings(limit: int, cache: Path) -> np.ndarray:
    if cache.is_file():
        emb = np.load(cache)
        if len(emb) >= limit:
            return emb[:limit]
    from indexer.config import Config
    from indexer.encode.encoder import load_encoder

    cfg = Config().with_overrides(**{"model.max_length": 64, "long_documents.stride": 16})
    texts = real_sentences(limit)
    print(f"encoding {len(texts)} real sentences ...", file=sys.stderr)
    emb = load_encoder(cfg.model).encode_texts(texts).astype(np.float32)
    np.save(cache, emb)
    return emb


def fit_mixture(fit: np.ndarray, components: int, cache: Path, seed: int = 0):
    """(weights, means, covariances) of a full-covariance Gaussian mixture; cached on disk."""
    path = cache.with_name(f"{cache.stem}-gmm{components}-{len(fit)}.npz")
    if path.is_file():
        z = np.load(path)
        return z["weights"], z["means"], z["covariances"]
    from sklearn.mixture import GaussianMixture

    gmm = GaussianMixture(
        components, covariance_type="full", reg_covar=1e-4, max_iter=30, random_state=seed
    ).fit(fit)
    np.savez(path, weights=gmm.weights_, means=gmm.means_, covariances=gmm.covariances_)
    return gmm.weights_, gmm.means_, gmm.covariances_


def synthetic(mixture, n: int, seed: int = 0) -> np.ndarray:
    weights, means, covariances = mixture
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, weights / weights.sum())
    parts = []
    for mean, cov, count in zip(means, covariances, counts):
        chol = np.linalg.cholesky(cov)
        parts.append((mean + rng.standard_normal((count, len(mean))) @ chol.T).astype(np.float32))
    x = np.concatenate(parts)
    x = x[rng.permutation(len(x))]
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def latency(search_one, queries: np.ndarray) -> tuple[float, float]:
    for q in queries[:20]:  # warm caches
        search_one(q[None, :])
    times = []
    for q in queries:
        t = time.perf_counter()
        search_one(q[None, :])
        times.append(time.perf_counter() - t)
    return float(np.percentile(times, 50) * 1000), float(np.percentile(times, 99) * 1000)


def recall_at_10(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)]))


def markdown(report: dict) -> str:
    """The README table rows of a report."""
    rows = [
        "| method | parameter | recall@10 | p50 ms | p99 ms | build s | memory MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, m in report["methods"].items():
        param = next((f"{p}={m[p]}" for p in ("efSearch", "nprobe", "ef") if p in m), "-")
        rows.append(
            f"| {name} | {param} | {m['recall@10']:.3f} | {m['p50_ms']:.2f} | "
            f"{m['p99_ms']:.2f} | {m['build_s']} | {m['memory_mb']} |"
        )
        if "at_tuned" in m:
            t = m["at_tuned"]
            ((p, v),) = [(k, t[k]) for k in t if k in ("efSearch", "nprobe")]
            rows.append(
                f"| {name}, as tuned on held vectors | {p}={v} | {t['recall@10']:.3f} | "
                f"{t['p50_ms']:.2f} | {t['p99_ms']:.2f} | (same index) | |"
            )
    return "\n".join(rows)


def measure_faiss(
    spec: str,
    config,
    data: np.ndarray,
    ids: np.ndarray,
    queries: np.ndarray,
    truth: np.ndarray,
    target: float,
    threads: int,
) -> dict:
    """Build `spec` through `VectorIndex.build` (as `bertindex index` does: `auto` tunes on
    held database vectors), then find the smallest search parameter at which the real
    queries reach `target` and time single queries there (one thread)."""
    import faiss

    from indexer.encode.encoder import Provenance
    from indexer.index.auto import estimate_bytes, smallest_reaching, tunable
    from indexer.index.vector import VectorIndex

    prov = Provenance(
        model_name="synthetic",
        weights_hash="-",
        pooling="mean",
        normalize=True,
        max_length=256,
        dim=data.shape[1],
        dtype="fp32",
    )
    faiss.omp_set_num_threads(threads)
    before = rss_mb()
    t = time.perf_counter()
    index = VectorIndex.build(spec, prov, config, data, ids)
    build = time.perf_counter() - t
    out = {
        "spec": spec,
        "build_s": round(build, 1),
        "memory_mb": round(rss_mb() - before),
        "memory_estimate_mb": round(estimate_bytes(spec, len(ids), data.shape[1]) / 2**20),
    }
    faiss.omp_set_num_threads(1)
    if tunable(spec) is not None:
        param, values = tunable(spec)
        base = index.tuning or {"param": param, "value": values[0]}
        if index.tuning:
            out["tuning"] = index.tuning
            out["tune_s"] = index.tuning["seconds"]
        curve: dict[int, float] = {}

        def on_queries(value: int) -> float:  # recall@10 of the real queries at `value`
            if value not in curve:
                index.tuning = dict(base, value=value)
                curve[value] = recall_at_10(index.search(queries, 10)[1], truth)
            return curve[value]

        if index.tuning:  # what `bertindex search` would use
            tuned = base["value"]
            at_tuned = on_queries(tuned)
            index.tuning = dict(base, value=tuned)
            p50, p99 = latency(lambda q: index.search(q, 10), queries)
            out["at_tuned"] = {
                param: tuned,
                "recall@10": round(at_tuned, 4),
                "p50_ms": round(p50, 3),
                "p99_ms": round(p99, 3),
            }
        # the smallest value (doubling, then bisecting) at which the real queries reach the
        # target, as for hnswlib: the figure comparable with the other methods
        value, _ = smallest_reaching(on_queries, values, target)
        index.tuning = dict(base, value=value)
        out[param] = value
        out["queries_curve"] = {str(v): round(r, 4) for v, r in sorted(curve.items())}
    found = index.search(queries, 10)[1]
    p50, p99 = latency(lambda q: index.search(q, 10), queries)
    faiss.omp_set_num_threads(threads)
    out |= {
        "recall@10": round(recall_at_10(found, truth), 4),
        "p50_ms": round(p50, 3),
        "p99_ms": round(p99, 3),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--real", type=int, default=20_000, help="real sentences to encode")
    parser.add_argument("--components", type=int, default=16)
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--memory-budget-mb", type=float, default=None)
    parser.add_argument(
        "--flat-limit",
        type=int,
        default=100_000,
        help="index.flat_limit (0: see the approximate choice at any --n)",
    )
    parser.add_argument(
        "--flat-queries",
        type=int,
        default=200,
        help="queries timed for exact search (each scans all --n vectors)",
    )
    parser.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="SPEC",
        help="also measure this FAISS factory string (e.g. HNSW32,Flat), "
        "its parameter raised on the queries like the others",
    )
    parser.add_argument("--hnsw-m", type=int, default=32, help="hnswlib M")
    parser.add_argument(
        "--hnsw-ef-construction", type=int, default=100, help="hnswlib ef_construction"
    )
    parser.add_argument("--skip-hnswlib", action="store_true")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/bertindex-real-embeddings.npy"))
    parser.add_argument("--out", type=Path, help="write the JSON report here too")
    args = parser.parse_args()

    import faiss

    from indexer.config import IndexConfig
    from indexer.index.auto import smallest_reaching
    from indexer.index.vector import resolve_spec

    threads = faiss.omp_get_max_threads()
    report: dict = {
        "n": args.n,
        "target_recall@10": args.target,
        "build_threads": threads,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }
    real = real_embeddings(args.real, args.cache)
    queries, fit = real[: args.queries], real[args.queries :]
    dim = real.shape[1]
    t = time.perf_counter()
    data = synthetic(fit_mixture(fit, args.components, args.cache), args.n)
    report |= {
        "dim": dim,
        "real_fit": len(fit),
        "queries": len(queries),
        "components": args.components,
        "gmm_seconds": round(time.perf_counter() - t, 1),
    }
    ids = np.arange(1, args.n + 1, dtype=np.int64)
    print(f"data {data.shape} drawn in {report['gmm_seconds']}s", file=sys.stderr)

    # exact ground truth for the queries (all threads)
    _, truth_pos = faiss.knn(queries, data, 10, metric=faiss.METRIC_INNER_PRODUCT)
    truth = ids[truth_pos]
    methods = {}

    # 1. exact: FAISS Flat
    before = rss_mb()
    t = time.perf_counter()
    flat = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
    flat.add_with_ids(data, ids)
    build = time.perf_counter() - t
    mem = rss_mb() - before
    faiss.omp_set_num_threads(1)
    p50, p99 = latency(lambda q: flat.search(q, 10), queries[: args.flat_queries])
    faiss.omp_set_num_threads(threads)
    methods["faiss Flat (exact)"] = {
        "build_s": round(build, 1),
        "memory_mb": round(mem),
        "recall@10": 1.0,
        "p50_ms": round(p50, 3),
        "p99_ms": round(p99, 3),
    }
    flat.reset()
    flat = None
    print(json.dumps(methods), file=sys.stderr)

    # 2. auto: resolve + build + tune on held database vectors, as `bertindex index` does
    cfg = IndexConfig(
        memory_budget_mb=args.memory_budget_mb,
        target_recall=args.target,
        flat_limit=args.flat_limit,
    )
    spec = resolve_spec("auto", args.n, cfg, dim)
    methods[f"auto ({spec})"] = measure_faiss(
        spec, cfg, data, ids, queries, truth, args.target, threads
    )
    print(json.dumps(methods), file=sys.stderr)
    for other in args.also:  # 3. other FAISS specs, as `index.spec: SPEC`
        methods[f"faiss {other}"] = measure_faiss(
            other,
            cfg.model_copy(update={"spec": other}),
            data,
            ids,
            queries,
            truth,
            args.target,
            threads,
        )
        print(json.dumps(methods), file=sys.stderr)

    # 4. hnswlib, same vectors; ef raised until the same recall
    if not args.skip_hnswlib:
        import hnswlib

        m, ef_construction = args.hnsw_m, args.hnsw_ef_construction
        before = rss_mb()
        t = time.perf_counter()
        h = hnswlib.Index(space="ip", dim=dim)
        h.init_index(max_elements=args.n, M=m, ef_construction=ef_construction, random_seed=0)
        h.add_items(data, ids, num_threads=threads)
        build = time.perf_counter() - t
        mem = rss_mb() - before
        h.set_num_threads(1)
        curve = {}

        def hnswlib_recall(ef: int) -> float:
            if ef not in curve:
                h.set_ef(ef)
                curve[ef] = recall_at_10(h.knn_query(queries, k=10)[0], truth)
            return curve[ef]

        ef, _ = smallest_reaching(hnswlib_recall, [16 << i for i in range(9)], args.target)
        h.set_ef(ef)
        p50, p99 = latency(lambda q: h.knn_query(q, k=10), queries)
        methods[f"hnswlib M={m} efC={ef_construction}"] = {
            "build_s": round(build, 1),
            "memory_mb": round(mem),
            "ef": ef,
            "recall@10": round(curve[ef], 4),
            "p50_ms": round(p50, 3),
            "p99_ms": round(p99, 3),
            "queries_curve": {str(v): round(r, 4) for v, r in sorted(curve.items())},
        }
    report["methods"] = methods
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(report, indent=1)
    print(text)
    print(markdown(report), file=sys.stderr)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
