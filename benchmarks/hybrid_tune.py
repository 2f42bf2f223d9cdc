"""Choose the hybrid fusion on a BEIR set's train queries, report every mode on its test queries.

Indexes the corpus once into a persistent store (re-runs reuse it: unchanged documents are
skipped), ranks each split's queries once per side (dense, keyword) to `--depth` documents, then
fuses in memory for every RRF constant and weight in the grids. Nothing tuned sees test qrels.

    .venv/bin/python benchmarks/hybrid_tune.py ../shared/data/scifact --store /tmp/bertindex-scifact
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from indexer.config import Config
from indexer.encode.encoder import load_encoder
from indexer.evaluation.beir import load_beir_queries
from indexer.evaluation.metrics import retrieval_scores
from indexer.index import fusion
from indexer.indexing.run import run_index
from indexer.query.searcher import Searcher
from indexer.store import Store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--store", default="/tmp/bertindex-beir-tune")
    parser.add_argument("--tune-split", default="train")
    parser.add_argument("--report-split", default="test")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--long-documents", default="chunk", choices=["chunk", "truncate"])
    args = parser.parse_args()

    cfg = Config().with_overrides(
        **{
            "store.path": args.store,
            "model.max_length": args.max_length,
            "long_documents.mode": args.long_documents,
            "search.candidates": args.depth,
        }
    )
    t0 = time.perf_counter()
    summary = run_index([str(args.folder)], cfg, collection=args.folder.name, fmt="beir")
    print(
        f"indexed: encoded {summary['encoded']} (unchanged {summary['skipped_unchanged']}) "
        f"in {time.perf_counter() - t0:.0f}s",
        file=sys.stderr,
    )
    encoder = load_encoder(cfg.model)
    report: dict = {"max_length": args.max_length, "long_documents": args.long_documents}
    with Store(cfg.store.path, read_only=True) as store:
        searcher = Searcher(cfg, store, encoder)
        external = {
            d.doc_id: d.external_id
            for d in store.reads.fetch_documents(store.reads.document_hashes()).values()
        }
        sides = {}
        for split in (args.tune_split, args.report_split):
            queries, qrels = load_beir_queries(args.folder, split)
            ids = list(queries)
            texts = [queries[q] for q in ids]
            vectors = encoder.encode_texts(texts)
            dense = [
                [(m.doc_id, m.score) for m in r] for r in searcher.dense_ranked(vectors, args.depth)
            ]
            keyword = searcher.keyword_ranked(texts, args.depth)
            sides[split] = (ids, {q: qrels[q] for q in ids}, dense, keyword)

    def score(split: str, fuse) -> float:
        ids, qrels, dense, keyword = sides[split]
        run = {
            q: [external[d] for d, _ in fuse(dr, kr)[:100]]
            for q, dr, kr in zip(ids, dense, keyword)
        }
        return retrieval_scores(run, qrels)

    modes = {"dense": lambda dr, kr: dr, "keyword": lambda dr, kr: kr}
    grid_k = [10, 20, 40, 60, 100]
    grid_w = [round(0.05 * i, 2) for i in range(4, 17)]
    rrf_train = {
        k: score(args.tune_split, lambda dr, kr, k=k: fusion.rrf([dr, kr], k=k))["ndcg@10"]
        for k in grid_k
    }
    w_train = {
        w: score(args.tune_split, lambda dr, kr, w=w: fusion.weighted([dr, kr], [w, 1 - w]))[
            "ndcg@10"
        ]
        for w in grid_w
    }
    best_k = max(rrf_train, key=rrf_train.get)
    best_w = max(w_train, key=w_train.get)
    modes["hybrid_rrf_k60"] = lambda dr, kr: fusion.rrf([dr, kr], k=60)
    modes[f"hybrid_rrf_k{best_k}"] = lambda dr, kr: fusion.rrf([dr, kr], k=best_k)
    modes[f"hybrid_weighted_w{best_w}"] = lambda dr, kr: fusion.weighted(
        [dr, kr], [best_w, 1 - best_w]
    )
    report["train_ndcg@10"] = {"rrf_k": rrf_train, "dense_weight": w_train}
    report["chosen_on_train"] = {"rrf_k": best_k, "dense_weight": best_w}
    for split in (args.tune_split, args.report_split):
        report[split] = {name: score(split, fuse) for name, fuse in modes.items()}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
