"""Vector index at scale: the `auto` choice against exact FAISS search and hnswlib, on `--n`
vectors that behave like real embeddings.

Real embeddings: the packaged model encodes sentences of ../shared/data (STS-B, TweetEval,
SciFact titles); cached in --cache. A Gaussian mixture (full covariances) fitted to them
draws the database (L2-normalised, as the model's output); held-out real embeddings are
the queries. For each method: build time, index memory, recall@10 against exact search,
p50/p99 latency of single queries on one thread, with the search parameter raised until
recall@10 ≥ --target on the queries.

    .venv/bin/python benchmarks/index_scale.py --n 100000
    nohup .venv/bin/python benchmarks/index_scale.py --n 1000000 > /tmp/index_scale.log 2>&1 &
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
    from indexer.encoder import load_encoder

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

    gmm = GaussianMixture(components, covariance_type="full", reg_covar=1e-4, max_iter=30,
                          random_state=seed).fit(fit)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--real", type=int, default=20_000, help="real sentences to encode")
    parser.add_argument("--components", type=int, default=16)
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--memory-budget-mb", type=float, default=None)
    parser.add_argument("--flat-limit", type=int, default=100_000,
                        help="index.flat_limit (0: see the IVF choice at any --n)")
    parser.add_argument("--hnsw-m", type=int, default=16)
    parser.add_argument("--hnsw-ef-construction", type=int, default=100)
    parser.add_argument("--skip-hnswlib", action="store_true")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/bertindex-real-embeddings.npy"))
    parser.add_argument("--out", type=Path, help="write the JSON report here too")
    args = parser.parse_args()

    import faiss

    from indexer.config import IndexConfig
    from indexer.encoder import Provenance
    from indexer.vector_index import VectorIndex, resolve_spec

    threads = faiss.omp_get_max_threads()
    report: dict = {"n": args.n, "target_recall@10": args.target, "build_threads": threads}
    real = real_embeddings(args.real, args.cache)
    queries, fit = real[: args.queries], real[args.queries:]
    dim = real.shape[1]
    t = time.perf_counter()
    data = synthetic(fit_mixture(fit, args.components, args.cache), args.n)
    report |= {"dim": dim, "real_fit": len(fit), "queries": len(queries),
               "components": args.components, "gmm_seconds": round(time.perf_counter() - t, 1)}
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
    p50, p99 = latency(lambda q: flat.search(q, 10), queries)
    faiss.omp_set_num_threads(threads)
    methods["faiss Flat (exact)"] = {"build_s": round(build, 1), "memory_mb": round(mem),
                                     "recall@10": 1.0, "p50_ms": round(p50, 3),
                                     "p99_ms": round(p99, 3)}
    flat.reset()
    print(json.dumps(methods), file=sys.stderr)

    # 2. auto: resolve + build + tune on held database vectors, as `bertindex index` does
    cfg = IndexConfig(memory_budget_mb=args.memory_budget_mb, target_recall=args.target,
                      flat_limit=args.flat_limit)
    spec = resolve_spec("auto", args.n, cfg, dim)
    prov = Provenance(model_name="synthetic", weights_hash="-", pooling="mean", normalize=True,
                      max_length=256, dim=dim, dtype="fp32")
    before = rss_mb()
    t = time.perf_counter()
    index = VectorIndex.build(spec, prov, cfg, data, ids)
    build = time.perf_counter() - t
    mem = rss_mb() - before
    auto = {"spec": spec, "build_s": round(build, 1), "memory_mb": round(mem),
            "tuning": index.tuning}
    if index.tuning:
        auto["tune_s"] = index.tuning["seconds"]
        param = index.tuning["param"]
        value = index.tuning["value"]
        found = index.search(queries, 10)[1]
        auto["recall@10_at_tuned"] = round(recall_at_10(found, truth), 4)
        # the same parameter raised until the real queries also reach the target
        while recall_at_10(index.search(queries, 10)[1], truth) < args.target:
            value *= 2 if param == "efSearch" else 1.5
            value = int(value)
            index.tuning = dict(index.tuning, value=value)
        auto["value_for_queries"] = value
    faiss.omp_set_num_threads(1)
    found = index.search(queries, 10)[1]
    p50, p99 = latency(lambda q: index.search(q, 10), queries)
    faiss.omp_set_num_threads(threads)
    auto |= {"recall@10": round(recall_at_10(found, truth), 4), "p50_ms": round(p50, 3),
             "p99_ms": round(p99, 3)}
    methods[f"auto ({spec})"] = auto
    index = None
    print(json.dumps(methods), file=sys.stderr)

    # 3. hnswlib, same vectors, ef raised until the same recall
    if not args.skip_hnswlib:
        import hnswlib

        before = rss_mb()
        t = time.perf_counter()
        h = hnswlib.Index(space="ip", dim=dim)
        h.init_index(max_elements=args.n, M=args.hnsw_m,
                     ef_construction=args.hnsw_ef_construction, random_seed=0)
        h.add_items(data, ids, num_threads=threads)
        build = time.perf_counter() - t
        mem = rss_mb() - before
        h.set_num_threads(1)
        ef = 16
        while True:
            h.set_ef(ef)
            labels, _ = h.knn_query(queries, k=10)
            rec = recall_at_10(labels, truth)
            if rec >= args.target or ef >= 4096:
                break
            ef *= 2
        p50, p99 = latency(lambda q: h.knn_query(q, k=10), queries)
        methods[f"hnswlib M={args.hnsw_m} efC={args.hnsw_ef_construction}"] = {
            "build_s": round(build, 1), "memory_mb": round(mem), "ef": ef,
            "recall@10": round(rec, 4), "p50_ms": round(p50, 3), "p99_ms": round(p99, 3)}
    report["methods"] = methods
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
