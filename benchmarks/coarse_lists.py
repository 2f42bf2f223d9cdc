"""Cheaper IVF lists for a large base, measured: what two shortcuts to FAISS's coarse k-means
and exact list assignment cost in recall, on the near-free encoder's vectors of
`benchmarks/scale.py` (tweet-length documents, the packaged tokenizer, a 0-layer BERT).

At 10M the base's coarse stage is most of its build: k-means of 16,384 lists on ~640,000
training points (~5 min on two cores) and the assignment of every vector to its nearest list
(a 16,384-wide product a vector, ~9 min at 10M). Tried here, for `IVF<nlist>` over N vectors:

* **exact**: FAISS's k-means (as `auto` trains: `auto.training_rows`), exact assignment;
* **ivf-assign**: the same lists, each vector assigned through an IVF over the lists'
  centroids (√nlist or 2√nlist coarse cells, 4 probed) instead of all of them;
* **two-level**: k-means of √nlist cells, then of each cell's share of the lists
  (`faiss.contrib.clustering.two_level_clustering`, 10 iterations), exact and ivf-assigned.

For each: training and assignment seconds, the share of vectors assigned as exactly, and
recall@10 of an `IVF<nlist>,Flat` over the lists (exact inside the probed lists, so only the
lists count) against exact search, for 1,000 held-out tweets, at nprobe 8 to 2,048.

    .venv/bin/python benchmarks/coarse_lists.py --n 1000000 --nlist 4096 --work /tmp/coarse \\
        --out benchmarks/results/coarse_lists_1M_intel_s21.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
import scale  # noqa: E402
from machine import machine, write_json  # noqa: E402

QUERIES = 1000
NPROBES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)


def vectors(work: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(N corpus vectors, held-out query vectors) from scale.py's corpus and encoder, cached."""
    cached, queries_file = work / f"vectors{n}.npy", work / "queries.npy"
    if cached.is_file() and queries_file.is_file():
        return np.load(cached), np.load(queries_file)
    model_dir = work / "encoder-0-layer"
    if not (model_dir / "config.json").is_file():
        scale.build_encoder(model_dir)
    bases, held = scale.tweets()
    corpus = work / f"corpus{n}.jsonl"
    if not corpus.is_file():
        scale.write_corpus(corpus, n, bases)
    tokenizer, model = scale.load_encoder(str(model_dir))
    out = np.empty((n, scale.DIM), np.float32)
    at = 0
    with open(corpus, "rb") as fh:
        while lines := list(itertools.islice(fh, 8192)):
            texts = [json.loads(line)["text"] for line in lines]
            out[at : at + len(texts)] = scale.encode(tokenizer, model, texts)
            at += len(texts)
    queries = scale.encode(tokenizer, model, held[:QUERIES])
    np.save(cached, out)
    np.save(queries_file, queries)
    return out, queries


def lists_recall(x, queries, truth, centroids, assign) -> list[tuple[int, float]]:
    """recall@10 of an IVF,Flat over `centroids` holding each vector in list `assign`."""
    import faiss

    nlist, dim = centroids.shape
    quantizer = faiss.IndexFlatIP(dim)
    quantizer.add(centroids)
    ivf = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
    ivf.is_trained = True
    ivf.add_core(len(x), faiss.swig_ptr(x), None, faiss.swig_ptr(np.ascontiguousarray(assign)))
    out = []
    for nprobe in (p for p in NPROBES if p <= nlist):
        ivf.nprobe = nprobe
        found = ivf.search(queries, 10)[1]
        hits = [len(set(found[i]) & set(truth[i])) / 10 for i in range(len(queries))]
        out.append((nprobe, round(float(np.mean(hits)), 4)))
    return out


def assign(x, centroids, cells: int | None) -> tuple[np.ndarray, float]:
    """Each vector's list: exact (`cells` None) or through an IVF of `cells` over the
    centroids, 4 probed; with the seconds it took."""
    import faiss

    dim = centroids.shape[1]
    started = time.perf_counter()
    if cells is None:
        index = faiss.IndexFlatIP(dim)
    else:
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, cells, faiss.METRIC_INNER_PRODUCT)
        index.train(centroids)
        index.nprobe = 4
    index.add(centroids)
    found = index.search(x, 1)[1].ravel()
    return found, round(time.perf_counter() - started, 1)


def main() -> None:
    import faiss
    from faiss.contrib.clustering import two_level_clustering

    from indexer.index import auto

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--nlist", type=int, default=4096)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    x, queries = vectors(args.work, args.n)
    exact = faiss.IndexFlatIP(x.shape[1])
    exact.add(x)
    truth = exact.search(queries, 10)[1]
    del exact
    rows = auto.training_rows(args.n, f"IVF{args.nlist},Flat")
    sample = x if rows is None else x[rows]
    cells = int(np.sqrt(args.nlist))
    report: dict = {"command": " ".join(sys.argv), "machine": machine(), "n": args.n}
    report |= {"nlist": args.nlist, "training_points": len(sample), "runs": {}}

    started = time.perf_counter()
    trained = faiss.index_factory(x.shape[1], f"IVF{args.nlist},Flat", faiss.METRIC_INNER_PRODUCT)
    trained.train(sample)
    kmeans = faiss.extract_index_ivf(trained).quantizer.reconstruct_n(0, args.nlist)
    train_s = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    two = two_level_clustering(sample, cells, args.nlist, clustering_niter=10)[0]
    two_s = round(time.perf_counter() - started, 1)
    exact_lists = None
    for name, centroids, trained_s in (("exact", kmeans, train_s), ("two-level", two, two_s)):
        for how in (None, cells, 2 * cells):
            label = name if how is None else f"{name}, ivf{how}-assign"
            lists, assign_s = assign(x, centroids, how)
            if exact_lists is None:
                exact_lists = lists
            run = {"train_s": trained_s, "assign_s": assign_s}
            if name == "exact":
                run["as_exact"] = round(float((lists == exact_lists).mean()), 4)
            run["recall_at_10"] = lists_recall(x, queries, truth, centroids, lists)
            report["runs"][label] = run
            print(label, json.dumps(run), flush=True)
            write_json(args.out, report)


if __name__ == "__main__":
    main()
