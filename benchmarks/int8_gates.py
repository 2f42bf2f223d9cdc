"""The int8 quality gates on the packaged encoder, fp32 against one int8 variant, in one run.

Gates (issue 17): embeddings min cosine >= 0.99 to fp32 on SciFact abstracts (title + text,
first 256 tokens); SciFact test nDCG@10 (exact inner-product search over those vectors) and
STS-B test Spearman within 0.005 of fp32; TweetEval offensive test macro-F1 of a head-only
mean-pooled classifier (`--head`, e.g. from `bertindex train classifier --head-only`) on the
encoder's vectors within 0.01. Speed: passages/s of fp32, int8 and (where native) bf16 on the
same `--speed-sample` abstracts, relative to fp32.

`--record`: store the outcome for this CPU's ISA class (`indexer.core.machine.isa_class`, emulated
or not) in indexer/encode/int8_checks.json, which `dtype: auto` reads.
Usage: python benchmarks/int8_gates.py --head DIR [--variant per-token] [--limit 0]
       [--speed-sample 500] [--record] [--emulate avx2] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from machine import write_json

from indexer.core.machine import add_emulate_option, reexec_emulated

DATA = ROOT.parent / "shared" / "data"
GATES = {
    "min_cosine": 0.99,
    "scifact_ndcg@10": 0.005,
    "sts_spearman": 0.005,
    "offensive_macro_f1": 0.01,
}


def load_scifact(limit: int | None) -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with gzip.open(DATA / "scifact" / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            ids.append(str(row["_id"]))
            texts.append(f"{row.get('title', '')} {row['text']}".strip())
            if limit and len(texts) >= limit:
                break
    return ids, texts


def macro_f1(gold: np.ndarray, pred: np.ndarray) -> float:
    scores = []
    for label in np.unique(gold):
        tp = int(((pred == label) & (gold == label)).sum())
        fp = int(((pred == label) & (gold != label)).sum())
        fn = int(((pred != label) & (gold == label)).sum())
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(scores))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head", type=Path, required=True)
    parser.add_argument("--variant", default="per-token")
    parser.add_argument("--limit", type=int, default=0, help="SciFact abstracts (0: all 5,183)")
    parser.add_argument("--speed-sample", type=int, default=500)
    parser.add_argument("--record", action="store_true")
    parser.add_argument(
        "--head-wait",
        type=int,
        default=0,
        help="seconds to wait for --head to appear (trained beside this run)",
    )
    parser.add_argument("--out", type=Path, default=None)
    add_emulate_option(parser)
    args = parser.parse_args()
    reexec_emulated(args.emulate)
    import torch
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    from indexer.config import ModelConfig
    from indexer.core import machine
    from indexer.encode import int8_check, limits
    from indexer.encode.encoder import Encoder, weights_hash
    from indexer.encode.quantize import quantize_int8
    from indexer.evaluation.beir import load_beir_queries
    from indexer.evaluation.metrics import retrieval_scores
    from indexer.evaluation.sts import load_sts, spearman
    from indexer.heads.sentence import head_logits

    hf_logging.set_verbosity_error()
    loads = [os.getloadavg()[0]]
    doc_ids, docs = load_scifact(args.limit or None)
    queries, qrels = load_beir_queries(DATA / "scifact")
    if args.limit:
        qrels = {q: {d: g for d, g in j.items() if d in set(doc_ids)} for q, j in qrels.items()}
        qrels = {q: j for q, j in qrels.items() if j}
    qids = [q for q in queries if q in qrels]
    left, right, gold_sts = load_sts(DATA / "stsbenchmark" / "sts-test.csv")
    tweets_dir = DATA / "tweeteval" / "offensive"
    tweets = (tweets_dir / "test_text.txt").read_text(encoding="utf-8").split("\n")
    labels = (tweets_dir / "test_labels.txt").read_text().split()
    tweets = tweets[: len(labels)]
    gold_off = np.asarray([int(x) for x in labels])

    encoder = Encoder(ModelConfig(dtype="fp32", device="cpu", max_length=256))
    fp32_model = encoder.model
    int8_model = quantize_int8(fp32_model, args.variant, calibration=encoder.calibrate)
    sample = docs[: args.speed_sample]
    speed: dict[str, float] = {}

    def timed_rate(name: str, model) -> None:
        encoder.model = model
        encoder.encode_texts(sample[:32])
        start = time.perf_counter()
        encoder.encode_texts(sample)
        speed[name] = len(sample) / (time.perf_counter() - start)

    timed_rate("fp32", fp32_model)
    timed_rate("int8", int8_model)
    if machine.has_bf16():
        bf16 = Encoder(ModelConfig(dtype="bf16", device="cpu", max_length=256))
        bf16.encode_texts(sample[:32])
        start = time.perf_counter()
        bf16.encode_texts(sample)
        speed["bf16"] = len(sample) / (time.perf_counter() - start)
        del bf16
    print("passages/s", {k: round(v, 1) for k, v in speed.items()}, flush=True)

    metrics: dict[str, dict] = {}
    vectors, tweet_vectors = {}, {}
    for name, model in (("fp32", fp32_model), ("int8", int8_model)):
        encoder.model = model
        d = encoder.encode_texts(docs)
        q = encoder.encode_texts([queries[i] for i in qids])
        top = np.argsort(-(q @ d.T), axis=1)[:, :100]
        run = {qid: [doc_ids[j] for j in row] for qid, row in zip(qids, top)}
        a, b = encoder.encode_texts(left), encoder.encode_texts(right)
        vectors[name] = d
        tweet_vectors[name] = encoder.encode_texts(tweets)
        metrics[name] = {
            "scifact_ndcg@10": retrieval_scores(run, qrels)["ndcg@10"],
            "sts_spearman": round(spearman((a * b).sum(axis=1), gold_sts), 5),
        }
        print(name, metrics[name], flush=True)
    cos = (vectors["fp32"] * vectors["int8"]).sum(axis=1)
    print(f"min cosine {cos.min():.5f}, mean {cos.mean():.5f}", flush=True)
    deadline = time.time() + args.head_wait
    while not (args.head / "config.json").is_file() and time.time() < deadline:
        time.sleep(10)  # a head still being trained beside this run
    if not (args.head / "config.json").is_file():
        print(
            f"{args.head}: no head (config.json) found; train one with `bertindex train "
            "classifier --data .../tweeteval/offensive --head-only --out DIR`",
            file=sys.stderr,
        )
        return 1
    head = AutoModelForSequenceClassification.from_pretrained(args.head).eval()
    for name, t in tweet_vectors.items():
        with torch.inference_mode():
            pred = head_logits(head, torch.from_numpy(t)).argmax(dim=1).numpy()
        metrics[name]["offensive_macro_f1"] = round(macro_f1(gold_off, pred), 5)
    gates = {
        "min_cosine": {
            "value": round(float(cos.min()), 5),
            "mean": round(float(cos.mean()), 5),
            "limit": GATES["min_cosine"],
            "passed": bool(cos.min() >= GATES["min_cosine"]),
        }
    }
    for key in ("scifact_ndcg@10", "sts_spearman", "offensive_macro_f1"):
        diff = metrics["int8"][key] - metrics["fp32"][key]
        gates[key] = {
            "fp32": metrics["fp32"][key],
            "int8": metrics["int8"][key],
            "diff": round(diff, 5),
            "limit": GATES[key],
            "passed": bool(abs(diff) <= GATES[key]),
        }
    loads.append(os.getloadavg()[0])
    passed = all(g["passed"] for g in gates.values())
    isa = machine.isa_class()
    entry = {
        "passed": passed,
        "gates": gates,
        "emulated": bool(machine.emulated()),
        "speed": {k: round(v / speed["fp32"], 2) for k, v in speed.items()},
        "passages_per_s": {k: round(v, 1) for k, v in speed.items()},
        "abstracts": len(docs),
        "recorded": datetime.date.today().isoformat(),
        "cpu_model": machine.cpu_model(),
        "load_average": [round(x, 2) for x in loads],
    }
    result = {
        "variant": args.variant,
        "isa_class": isa,
        **entry,
        "machine": limits.machine_info(["fp32", "int8", *(["bf16"] if "bf16" in speed else [])]),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
    if args.record:
        int8_check.write(
            int8_check.PACKAGED,
            {
                "weights_hash": weights_hash(encoder.model_dir),
                "model_name": encoder.provenance.model_name,
                "variant": args.variant,
                "classes": {isa: entry},
            },
        )
        print(f"recorded for {isa} in {int8_check.PACKAGED}")
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
