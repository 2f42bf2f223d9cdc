"""Hybrid fusion across collections: every fusion candidate on every BEIR set given, tuned only
on SciFact's train queries (never on a test split, never on the collection being scored).

Indexes each folder once into a persistent store under `--store-root` (re-runs reuse it),
ranks each split's queries once per side (dense, keyword) to `--depth` documents, then fuses in
memory. Prints one JSON report: per set and split, nDCG@10 / recall@100 / MRR@10 of dense,
keyword, and each fusion; the weights chosen on the tuning split; and, per set, how far the
default lands from the better half (goal: >= max(dense, keyword) - 0.005).

    .venv/bin/python benchmarks/fusion_robust.py ../shared/data/scifact \
        ../shared/data/msmarco-subset --store-root /tmp/bertindex-fusion
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from machine import write_json

from indexer.config import Config, SearchConfig
from indexer.encode.encoder import load_encoder
from indexer.evaluation.beir import load_beir_queries
from indexer.evaluation.metrics import retrieval_scores
from indexer.index import fusion
from indexer.indexing.run import run_index
from indexer.query.searcher import Searcher
from indexer.store import Store


def rankings(folder: Path, store_root: Path, depth: int, cfg: Config | None = None) -> dict:
    """split -> (query ids, qrels, dense rankings, keyword rankings, doc id -> external id).

    `cfg`: the configuration to index and search with (default: the defaults, the store at
    `store_root/store-<folder name>`, `depth` candidates)."""
    cache = store_root / f"rankings-{folder.name}-{depth}.pkl"
    if cache.is_file():
        return pickle.loads(cache.read_bytes())
    cfg = cfg or Config().with_overrides(
        **{"store.path": str(store_root / f"store-{folder.name}"), "search.candidates": depth}
    )
    started = time.perf_counter()
    summary = run_index([str(folder)], cfg, collection=folder.name, fmt="beir")
    print(
        f"{folder.name}: encoded {summary['encoded']} (unchanged "
        f"{summary['skipped_unchanged']}) in {time.perf_counter() - started:.0f}s",
        file=sys.stderr,
    )
    encoder = load_encoder(cfg.model)
    out = {}
    with Store(cfg.store.path, read_only=True) as store:
        searcher = Searcher(cfg, store, encoder)
        external = {
            d.doc_id: d.external_id
            for d in store.reads.fetch_documents(list(store.reads.document_hashes())).values()
        }
        for split_file in sorted((folder / "qrels").glob("*.tsv")):
            queries, qrels = load_beir_queries(folder, split_file.stem)
            ids = list(queries)
            texts = [queries[q] for q in ids]
            vectors = encoder.encode_queries(texts)
            dense = [
                [(m.doc_id, m.score) for m in r] for r in searcher.dense_ranked(vectors, depth)
            ]
            keyword = searcher.keyword_ranked(texts, depth)
            out[split_file.stem] = (ids, {q: qrels[q] for q in ids}, dense, keyword, external)
    cache.write_bytes(pickle.dumps(out))
    return out


def score(side, fuse) -> dict:
    ids, qrels, dense, keyword, external = side
    run = {
        q: [external[d] for d, _ in fuse(dr, kr)[:100]] for q, dr, kr in zip(ids, dense, keyword)
    }
    return retrieval_scores(run, qrels)


def _top_z(ranked, depth: int = 100) -> float:
    scores = [x for _, x in ranked[:depth]]
    if len(scores) < 2:
        return 0.0
    mean = sum(scores) / len(scores)
    std = (sum((x - mean) ** 2 for x in scores) / len(scores)) ** 0.5
    return (scores[0] - mean) / std if std > 0 else 0.0


def adaptive(dr, kr, prior: float = 0.5, norm=fusion.weighted):
    """Per-query weights: each side's prior times how far its top score stands out (z)."""
    zd, zk = prior * _top_z(dr), (1 - prior) * _top_z(kr)
    w = zd / (zd + zk) if zd + zk > 0 else prior
    return norm([dr, kr], [w, 1 - w])


def per_query_ndcg(side, fuse) -> np.ndarray:
    ids, qrels, dense, keyword, external = side
    out = []
    for q, dr, kr in zip(ids, dense, keyword):
        judged = qrels[q]
        gains = [judged.get(external[d], 0) for d, _ in fuse(dr, kr)[:10]]
        ideal = sorted(judged.values(), reverse=True)[:10]
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
        out.append(sum(g / math.log2(i + 2) for i, g in enumerate(gains)) / idcg if idcg else 0.0)
    return np.asarray(out)


def dense_leaning_choice(side, fuses: dict, family: str, samples: int = 2000) -> dict:
    """The rule behind the default weight: among `family`'s weights, the most dense-leaning
    one whose paired-bootstrap 95 % interval of (its nDCG@10 - the best weight's) still
    reaches 0 on the tuning queries, i.e. not significantly worse than the optimum."""
    names = sorted(
        (n for n in fuses if n.startswith(family + "_w")), key=lambda n: float(n.rsplit("_w", 1)[1])
    )
    scores = {n: per_query_ndcg(side, fuses[n]) for n in names}
    best = max(names, key=lambda n: scores[n].mean())
    rng = np.random.default_rng(0)
    draws = rng.integers(0, len(scores[best]), (samples, len(scores[best])))
    intervals = {}
    for n in names:
        diff = scores[n] - scores[best]
        low, high = np.percentile(diff[draws].mean(axis=1), [2.5, 97.5])
        intervals[n] = [round(float(diff.mean()), 4), round(float(low), 4), round(float(high), 4)]
    chosen = max(
        (n for n in names if intervals[n][2] >= 0), key=lambda n: float(n.rsplit("_w", 1)[1])
    )
    return {"best": best, "chosen": chosen, "difference_to_best_and_95ci": intervals}


def candidates() -> dict:
    """name -> fuse(dense, keyword) for every candidate; the tuned families take a parameter."""
    out = {"dense": lambda dr, kr: dr, "keyword": lambda dr, kr: kr}
    for k in (10, 20, 60, 100):
        out[f"rrf_k{k}"] = lambda dr, kr, k=k: fusion.rrf([dr, kr], k=k)
    for w in (0.6, 0.7):
        out[f"rrf60dense_w{w}"] = lambda dr, kr, w=w: fusion.rrf([dr, kr], k=60, weights=[w, 1 - w])
    for w in (0.4, 0.5, 0.6, 0.7):
        out[f"adaptive_w{w}"] = lambda dr, kr, w=w: adaptive(dr, kr, w)
    for w in [round(0.05 * i, 2) for i in range(6, 17)]:
        out[f"minmax_w{w}"] = lambda dr, kr, w=w: fusion.weighted([dr, kr], [w, 1 - w])
        out[f"zscore_w{w}"] = lambda dr, kr, w=w: fusion.zscore([dr, kr], [w, 1 - w])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+")
    parser.add_argument("--store-root", type=Path, default=Path("/tmp/bertindex-fusion"))
    parser.add_argument(
        "--tune", default="scifact:train", help="SET:SPLIT the weights are chosen on"
    )
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/fusion_robust.json")
    args = parser.parse_args()
    args.store_root.mkdir(parents=True, exist_ok=True)

    sets = {folder.name: rankings(folder, args.store_root, args.depth) for folder in args.folders}
    tune_set, tune_split = args.tune.split(":")
    fuses = candidates()
    tuned = {
        name: score(sets[tune_set][tune_split], fuse)["ndcg@10"] for name, fuse in fuses.items()
    }
    families = {}
    for name, value in tuned.items():
        family = name.rsplit("_", 1)[0] if "_" in name else name
        if family not in families or value > tuned[families[family]]:
            families[family] = name
    rule = {
        family: dense_leaning_choice(sets[tune_set][tune_split], fuses, family)
        for family in ("minmax", "zscore")
    }
    default = SearchConfig()
    report: dict = {
        "tuned_on": args.tune,
        "tuning_ndcg@10": tuned,
        "chosen_per_family": families,
        "dense_leaning_rule": rule,
        "default": {
            "fusion": default.fusion,
            "dense_weight": default.dense_weight,
            "rrf_k": default.rrf_k,
        },
        "sets": {},
    }
    default_name = (
        f"rrf_k{default.rrf_k}"
        if default.fusion == "rrf"
        else f"{default.fusion.replace('weighted', 'minmax')}_w{default.dense_weight}"
    )
    for set_name, splits in sets.items():
        for split, side in splits.items():
            if (set_name, split) == (tune_set, tune_split):
                continue
            results = {name: score(side, fuse) for name, fuse in fuses.items()}
            best_half = max(results["dense"]["ndcg@10"], results["keyword"]["ndcg@10"])
            report["sets"][f"{set_name}:{split}"] = {
                "queries": len(side[0]),
                "results": results,
                "margin_vs_better_half": {
                    name: round(r["ndcg@10"] - best_half, 4) for name, r in results.items()
                },
            }
            line = {
                n: results[n]["ndcg@10"]
                for n in (
                    "dense",
                    "keyword",
                    *sorted(set(families.values()) - {"dense", "keyword"}),
                )
                if n in results
            }
            if default_name in results:
                line["default:" + default_name] = results[default_name]["ndcg@10"]
            print(set_name, split, json.dumps(line), file=sys.stderr)
    write_json(args.out, report)
    print(json.dumps({k: v for k, v in report.items() if k != "sets"}, indent=1))


if __name__ == "__main__":
    main()
