"""int8 variants of the packaged encoder against fp32 (and bf16) on SciFact abstracts, one run.

For every variant of `indexer.encode.quantize.VARIANTS` (or `--variants`): the minimum and mean
cosine of its embeddings to the fp32 ones (same texts, same batches) and its passages/s,
beside fp32's and bf16's measured in the same process. Prints a table and, with `--out`, writes
it as JSON with the machine's description (`indexer.core.machine`).

Usage: python benchmarks/int8_quality.py [--limit 500] [--variants all keep-ffn-out]
       [--max-length 256] [--out benchmarks/results/int8_quality.json] [--emulate avx2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from encode_throughput import CORPUS, load_passages  # benchmarks/: the same SciFact abstracts
from machine import missing, write_json

from indexer.core.machine import add_emulate_option, reexec_emulated


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=500, help="abstracts (0: all 5,183)")
    parser.add_argument("--variants", nargs="+", default=None)
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--skip-bf16", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    add_emulate_option(parser)
    args = parser.parse_args()
    reexec_emulated(args.emulate)
    if missing(CORPUS, "scifact"):
        return 1
    from transformers.utils import logging as hf_logging

    from indexer.config import ModelConfig
    from indexer.encode.encoder import Encoder
    from indexer.encode.limits import encode_flops, limit_share, machine_info
    from indexer.encode.quantize import VARIANTS, quantizable, quantize_int8

    hf_logging.set_verbosity_error()
    texts = load_passages(args.limit or None)
    encoder = Encoder(ModelConfig(dtype="fp32", device="cpu", max_length=args.max_length))
    room = args.max_length - 2
    seqs = [encoder.wrap(ids[:room]) for ids in encoder.tokenize(texts)]
    flops = encode_flops(encoder.model.config, [len(s) for s in seqs])
    fp32_model = encoder.model
    encoder.encode_ids(seqs[:32])

    def timed() -> tuple[np.ndarray, float]:
        start = time.perf_counter()
        out = encoder.encode_ids(seqs)
        return out, time.perf_counter() - start

    reference, t_fp32 = timed()
    rows = [
        {
            "path": "fp32",
            "per_s": round(len(seqs) / t_fp32, 1),
            "speed_vs_fp32": 1.0,
            "min_cosine": 1.0,
            "mean_cosine": 1.0,
        }
    ]
    info = machine_info(["fp32", "int8"] + ([] if args.skip_bf16 else ["bf16"]))
    rows[0]["limit_share"] = limit_share(flops, t_fp32, info["matmul_peak_gflops"]["fp32"])
    print(
        f"passages {len(seqs)}, max_length {args.max_length}; fp32 {rows[0]['per_s']}/s "
        f"({rows[0]['limit_share']:.0%} of the fp32 matmul peak)",
        flush=True,
    )
    if not args.skip_bf16:
        bf16 = Encoder(ModelConfig(dtype="bf16", device="cpu", max_length=args.max_length))
        bf16.encode_ids(seqs[:32])
        start = time.perf_counter()
        vecs = bf16.encode_ids(seqs)
        t = time.perf_counter() - start
        cos = (vecs * reference).sum(axis=1)
        rows.append(
            {
                "path": "bf16",
                "per_s": round(len(seqs) / t, 1),
                "speed_vs_fp32": round(t_fp32 / t, 2),
                "min_cosine": round(float(cos.min()), 5),
                "mean_cosine": round(float(cos.mean()), 5),
            }
        )
        print(rows[-1], flush=True)
        del bf16
    for name in args.variants or list(VARIANTS):
        variant = VARIANTS[name]
        encoder.model = fp32_model
        encoder.model = quantize_int8(fp32_model, variant, calibration=encoder.calibrate)
        encoder.encode_ids(seqs[:32])
        vecs, t = timed()
        cos = (vecs * reference).sum(axis=1)
        rows.append(
            {
                "path": f"int8 {name}",
                "int8_layers": len(quantizable(fp32_model, variant)),
                "per_s": round(len(seqs) / t, 1),
                "speed_vs_fp32": round(t_fp32 / t, 2),
                "min_cosine": round(float(cos.min()), 5),
                "mean_cosine": round(float(cos.mean()), 5),
            }
        )
        print(rows[-1], flush=True)
    result = {"passages": len(seqs), "max_length": args.max_length, "rows": rows, "machine": info}
    print(json.dumps(result))
    write_json(args.out, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
