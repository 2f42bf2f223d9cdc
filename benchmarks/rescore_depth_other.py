"""Rescoring depth (k_factor 16 against 32) on data the default was not chosen on: the SciFact
and MS MARCO subset corpora of ../shared/data encoded with the packaged all-MiniLM-L6-v2, their
own queries, an `IVF{L},PQ{d/2}x4fs,RFlat` index (what `auto` builds above the flat limit),
recall@10 against exact search by nprobe, one thread.

    .venv/bin/python benchmarks/rescore_depth_other.py \\
        --out benchmarks/results/rescore_depth_other_intel.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import faiss
import numpy as np
from machine import machine, write_json

from indexer.config import ModelConfig
from indexer.encode.encoder import load_encoder

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
K = 10


def rows(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def text_of(row: dict) -> str:
    return " ".join(str(row.get(f) or "") for f in ("title", "text")).strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    encoder = load_encoder(ModelConfig())
    out = {"machine": machine(), "model": encoder.provenance.model_name, "sets": {}}
    for name, corpus in (("scifact", "corpus.jsonl.gz"), ("msmarco-subset", "corpus.jsonl")):
        docs = [text_of(r) for r in rows(DATA / name / corpus)]
        queries = [r["text"] for r in rows(DATA / name / "queries.jsonl")]
        started = time.perf_counter()
        base = np.ascontiguousarray(encoder.encode_texts(docs), np.float32)
        q = np.ascontiguousarray(encoder.encode_queries(queries), np.float32)
        encode_s = time.perf_counter() - started
        faiss.omp_set_num_threads(1)
        _, truth = faiss.knn(q, base, K, metric=faiss.METRIC_INNER_PRODUCT)
        lists = max(16, 1 << round(np.log2(4 * np.sqrt(len(base)))) // 4)
        spec = f"IVF{lists},PQ{base.shape[1] // 2}x4fs,RFlat"
        index = faiss.index_factory(base.shape[1], spec, faiss.METRIC_INNER_PRODUCT)
        index.train(base)
        index.add(base)
        result = {
            "documents": len(base),
            "queries": len(q),
            "spec": spec,
            "encode_s": round(encode_s, 1),
        }
        for nprobe in args.probes:
            for k_factor in (16, 32):
                ivf = faiss.SearchParametersIVF(nprobe=nprobe)  # type: ignore[call-arg]
                params = faiss.IndexRefineSearchParameters(k_factor=k_factor, base_index_params=ivf)  # type: ignore[call-arg]
                _, found = index.search(q, K, params=params)
                recall = np.mean([len(set(f) & set(t)) / K for f, t in zip(found, truth)])
                result[f"nprobe_{nprobe}_k{k_factor}"] = round(float(recall), 4)
        print(name, result, flush=True)
        out["sets"][name] = result
    if args.out:
        write_json(args.out, out)


if __name__ == "__main__":
    main()
