"""The int8 query encoder (`search.query_encoder: onnx-int8`) against the fp32 ONNX export
(`onnx`, equal to torch fp32) on the same stores: retrieval quality (nDCG@10, recall@100 per
mode on each BEIR set's test queries, the documents' vectors being the same), how far the
query vectors and rankings move (cosine, identical and overlapping top 10s), and the time one
query's encoding takes (p50, alternating the two encoders query by query in this one run).

    bertindex index ../shared/data/scifact --store /tmp/scifact-serve
    bertindex index ../shared/data/msmarco-subset --store /tmp/msm
    python benchmarks/int8_queries.py --set /tmp/scifact-serve=../shared/data/scifact \
        --set /tmp/msm=../shared/data/msmarco-subset --out benchmarks/results/int8_queries.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
from machine import ROOT, machine, missing, write_json

sys.path.insert(0, str(ROOT))

from indexer.config import load_config
from indexer.evaluation.beir import load_beir_queries
from indexer.evaluation.metrics import retrieval_scores
from indexer.query.searcher import Searcher
from indexer.store import Store

ENCODERS = ("onnx", "onnx-int8")
MODES = ("dense", "hybrid")


def encode_p50(searchers: dict[str, Searcher], texts: list[str]) -> dict[str, float]:
    """Per-query encoding time, p50 in ms, the encoders alternating query by query."""
    times: dict[str, list[float]] = {name: [] for name in searchers}
    for text in texts:
        for name, searcher in searchers.items():
            started = time.perf_counter()
            searcher.encode_queries([text])
            times[name].append(time.perf_counter() - started)
    return {name: round(1000 * float(np.median(t)), 2) for name, t in times.items()}


def measure(store_dir: str, folder: Path, config_path: Path | None) -> dict:
    config = load_config(config_path).with_overrides(**{"store.path": store_dir})
    queries, qrels = load_beir_queries(folder, "test")
    ids = list(queries)
    texts = [queries[q] for q in ids]
    out: dict = {"store": store_dir, "data": str(folder), "queries": len(ids)}
    with Store(store_dir, read_only=True) as store:
        searchers = {
            e: Searcher(config.with_overrides(**{"search.query_encoder": e}), store)
            for e in ENCODERS
        }
        vectors = {e: s.encode_queries(texts) for e, s in searchers.items()}
        cosine = (vectors["onnx"] * vectors["onnx-int8"]).sum(axis=1)
        out["cosine"] = {
            "min": round(float(cosine.min()), 4),
            "mean": round(float(cosine.mean()), 5),
        }
        top: dict = {}
        for encoder, searcher in searchers.items():
            for mode in MODES:
                hits = searcher.search_many(texts, 100, mode=mode, vectors=vectors[encoder])
                run = {q: [h.id for h in h_] for q, h_ in zip(ids, hits)}
                scores = retrieval_scores(run, {q: qrels[q] for q in ids})
                out.setdefault(encoder, {})[mode] = {
                    k: scores[k] for k in ("ndcg@10", "recall@100")
                }
                top[encoder, mode] = [run[q][:10] for q in ids]
        for mode in MODES:
            a, b = top["onnx", mode], top["onnx-int8", mode]
            out.setdefault("top10", {})[mode] = {
                "identical": round(float(np.mean([x == y for x, y in zip(a, b)])), 3),
                "overlap": round(
                    float(np.mean([len(set(x) & set(y)) / max(1, len(x)) for x, y in zip(a, b)])), 3
                ),
            }
            out.setdefault("ndcg@10_change", {})[mode] = round(
                out["onnx-int8"][mode]["ndcg@10"] - out["onnx"][mode]["ndcg@10"], 5
            )
        out["encode_p50_ms"] = encode_p50(searchers, texts[:300])
        out["encode_speedup"] = round(
            out["encode_p50_ms"]["onnx"] / out["encode_p50_ms"]["onnx-int8"], 2
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        required=True,
        help="STORE=BEIR_FOLDER: a store indexed from that folder",
    )
    parser.add_argument("--config", type=Path, default=ROOT / "config.yaml")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = {"machine": machine(), "sets": {}}
    for pair in args.sets:
        store_dir, _, folder = pair.partition("=")
        if missing(Path(folder), Path(folder).name):
            raise SystemExit(2)
        if not (Path(store_dir) / "store.duckdb").exists():
            raise SystemExit(
                f"{store_dir}: no store; index {folder} into it first "
                f"(bertindex index {folder} --store {store_dir})"
            )
        report["sets"][Path(folder).name] = measure(store_dir, Path(folder), args.config)
        print(Path(folder).name, report["sets"][Path(folder).name], file=sys.stderr)
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.out, report)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
