"""Active learning on TweetEval: do `uncertain` / `margin` / `disagree` picks beat `random`?

Start from a head-only classifier trained on `--start` random train examples, then for
`--rounds` rounds take `--per-round` more from the rest of train by each strategy (the gold
label stands in for the person), retrain the head and score test macro-F1 after each round;
`--seeds` seeds. The tweets are encoded ONCE with the packaged encoder (the same feature pass
`train --head-only` runs; pooled vectors cached in an .npz), then every retraining is the
head-only recipe of `indexer.heads.train` (AdamW, warm-up + linear decay, clip 1.0, best
validation epoch) on the cached features. Selection scores come from
`indexer.review.strategies`, the code `bertindex review export` runs.

Usage: nice -n 5 python benchmarks/active_learning.py [--tasks offensive,hate]
       [--start 500 --rounds 4 --per-round 200 --seeds 0,1,2] [--plot docs/img/active_learning.png]
Writes benchmarks/results/active_learning.json and the plot.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from machine import machine, write_json

STRATEGIES = ("random", "uncertain", "margin", "disagree")
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "tweeteval"


def cached_features(task_dir: Path, settings, cache_dir: Path) -> dict:
    """{split: (features (n, hidden) float32, labels (n,) int64)} and label names, from the
    .npz cache or one pass of the head-only feature encoder."""
    from transformers import AutoTokenizer

    from indexer.heads.data import read_head_data
    from indexer.heads.registry import head_type
    from indexer.heads.train import encode_splits, feature_encoder

    key = hashlib.sha256(
        f"{task_dir.resolve()}|{settings.base}|{settings.dtype}|{settings.max_length}".encode()
    ).hexdigest()[:16]
    path = cache_dir / f"tweeteval-{task_dir.name}-{key}.npz"
    data = read_head_data("classifier", task_dir)
    if path.is_file():
        z = np.load(path)
        return {
            "label_names": data.label_names,
            "encode_seconds": float(z["encode_seconds"]),
            **{s: (z[f"{s}_x"], z[f"{s}_y"]) for s in data.splits},
        }
    tokenizer = AutoTokenizer.from_pretrained(settings.base)
    encoded = encode_splits(tokenizer, data, settings.max_length)
    encoder = feature_encoder(settings)
    kind = head_type("classifier")
    t0 = time.perf_counter()
    out = {}
    for split, enc in encoded.items():
        x = torch.stack(kind.backbone_features(encoder, enc)).numpy().astype(np.float32)
        out[split] = (x, np.asarray(enc.labels, dtype=np.int64))
    seconds = time.perf_counter() - t0
    np.savez(
        path,
        encode_seconds=seconds,
        **{f"{s}_x": v[0] for s, v in out.items()},
        **{f"{s}_y": v[1] for s, v in out.items()},
    )
    return {"label_names": data.label_names, "encode_seconds": seconds, **out}


class HeadLayers(torch.nn.Module):
    """The head's own layers of a loaded classifier, shaped like it for `feature_logits`
    (`base_model.pooler`, `dropout`, `classifier`), so that `train_epochs`' best-epoch copy
    holds the head only, not the frozen backbone."""

    def __init__(self, model):
        super().__init__()
        self.base_model = torch.nn.Module()
        self.base_model.pooler = model.base_model.pooler
        self.dropout, self.classifier = model.dropout, model.classifier


class FeatureHead:
    """A head-only classifier over cached features: `indexer.heads.train`'s model, head
    modules and `train_epochs` loop (AdamW, warm-up + decay, clip, best validation epoch)."""

    def __init__(self, feats: dict, settings, seed: int):
        from indexer.heads.classifier.head_type import SentenceExample
        from indexer.heads.data import HeadData
        from indexer.heads.features import Encoded
        from indexer.heads.train import load_base

        self.settings = settings
        self.names = feats["label_names"]
        full, _ = load_base(replace(settings, seed=seed), self.names)
        self.kind = settings.kind
        self.modules = self.kind.head_modules(full)  # pooler, dropout, classifier
        self.model = HeadLayers(full)  # the same layers without the backbone (small state)
        del full
        self.fresh = copy.deepcopy(self.model.state_dict())
        vx, vy = feats["validation"]
        self.val_x = torch.from_numpy(vx)
        self.val_data = HeadData(
            "classifier",
            self.names,
            {"validation": [SentenceExample(str(i), "", int(y)) for i, y in enumerate(vy)]},
        )
        self.val_enc = Encoded([str(i) for i in range(len(vy))], [[0]] * len(vy), vy.tolist())

    def fit(self, x: np.ndarray, y: np.ndarray, seed: int) -> None:
        """Train a fresh head on (x, y) with the head-only recipe."""
        from indexer.heads.train import FitResult, Stage, seed_everything, train_epochs

        self.model.load_state_dict(self.fresh)
        seed_everything(seed)
        xs, ys = torch.from_numpy(x), torch.from_numpy(y)
        model, kind = self.model, self.kind

        def step_loss(index) -> torch.Tensor:
            idx = torch.as_tensor(np.asarray(index))
            return torch.nn.functional.cross_entropy(kind.feature_logits(model, xs[idx]), ys[idx])

        def val_logits() -> list[torch.Tensor]:
            with torch.inference_mode():
                return list(kind.feature_logits(model, self.val_x).unbind(0))

        settings = replace(self.settings, seed=seed)
        stage = Stage(
            model,
            self.modules,
            step_loss,
            val_logits,
            np.ones(len(y), np.int64),
            rule=settings.epoch_rule,
            lr=settings.learning_rate,
        )
        train_epochs(
            stage,
            self.val_data,
            self.val_enc,
            settings,
            np.random.default_rng(seed),
            FitResult(),
            "off",
        )
        model.eval()

    def probs(self, x: np.ndarray) -> np.ndarray:
        from indexer.heads.base import softmax

        with torch.inference_mode():
            return softmax(self.kind.feature_logits(self.model, torch.from_numpy(x)).numpy())


def pick(
    strategy: str,
    head: FeatureHead,
    feats: dict,
    labelled: np.ndarray,
    pool: np.ndarray,
    n: int,
    seed: int,
) -> np.ndarray:
    """`n` pool positions (indexes into train) by `strategy`, the head trained on `labelled`."""
    from indexer.review import strategies as st

    x = feats["train"][0]
    if strategy == "random":
        return pool[st.random_order(len(pool), seed)[:n]]
    p = head.probs(x[pool])
    ordered = np.sort(p, axis=1)
    if strategy == "uncertain":
        order = st.uncertain_order(ordered[:, -1])
    elif strategy == "margin":
        order = st.margin_order(ordered[:, -1], ordered[:, -2])
    else:  # disagree: a second head on a bootstrap resample of the labelled set
        labels = p.argmax(1)
        boot = np.random.default_rng(seed + 7919).choice(labelled, len(labelled), replace=True)
        state = copy.deepcopy(head.model.state_dict())
        head.fit(x[boot], feats["train"][1][boot], seed + 7919)
        q = head.probs(x[pool])
        head.model.load_state_dict(state)
        order = st.disagree_order(labels, q.argmax(1), p.max(1), q.max(1))
        if len(order) < n:  # too few disagreements: fill with the least sure of the rest
            taken = set(order.tolist())
            rest = [i for i in st.uncertain_order(p.max(1)).tolist() if i not in taken]
            order = np.concatenate([order, np.asarray(rest, dtype=np.int64)])
    return pool[order[:n]]


def run_curve(
    feats: dict, settings, strategy: str, seed: int, start: int, rounds: int, per_round: int
) -> list[float]:
    """Test macro-F1 after the start set and after each round."""
    from indexer.heads.metrics import macro_f1

    x, y = feats["train"]
    tx, ty = feats["test"]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    labelled, pool = order[:start], order[start:]
    head = FeatureHead(feats, settings, seed)
    curve = []
    for r in range(rounds + 1):
        head.fit(x[labelled], y[labelled], seed * 1000 + r)
        pred = head.probs(tx).argmax(1)
        curve.append(round(float(macro_f1(ty.tolist(), pred.tolist(), head.names)["macro_f1"]), 4))
        if r == rounds:
            break
        chosen = pick(strategy, head, feats, labelled, pool, per_round, seed * 1000 + r)
        labelled = np.concatenate([labelled, chosen])
        pool = np.setdiff1d(pool, chosen, assume_unique=True)
        pool = rng.permutation(pool)  # no order left over from the last pick
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="offensive,hate")
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--start", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--per-round", type=int, default=200)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--epochs",
        type=int,
        default=8,
        help="head-only epochs per (re)training (best validation epoch kept)",
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "bertindex-al-cache"
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks/results/active_learning.json"
    )
    parser.add_argument("--plot", type=Path, default=ROOT / "docs/img/active_learning.png")
    parser.add_argument("--replot", action="store_true", help="only redraw the plot from --out")
    args = parser.parse_args()
    if args.replot:
        plot(json.loads(args.out.read_text())["tasks"], args.plot)
        return

    from indexer.config import DEFAULT_MODEL, resolve_model_path
    from indexer.core.machine import set_threads
    from indexer.encode.policy import resolve_dtype
    from indexer.heads.train import TrainSettings

    started = time.perf_counter()
    load_before = os.getloadavg()
    threads = set_threads(None)
    args.cache.mkdir(parents=True, exist_ok=True)
    settings = TrainSettings(
        task="classifier",
        base=resolve_model_path(DEFAULT_MODEL),
        out=Path(tempfile.gettempdir()) / "bertindex-al-unused",
        head_only=True,
        epochs=args.epochs,
        max_length=256,
        dtype=resolve_dtype("auto"),
    )
    seeds = [int(s) for s in args.seeds.split(",")]
    strategies = args.strategies.split(",")
    results: dict = {}
    for task in args.tasks.split(","):
        torch.set_num_threads(threads)  # the feature pass uses every thread
        feats = cached_features(args.data / task, settings, args.cache)
        print(f"{task}: features ready ({feats['encode_seconds']:.0f} s to encode)", flush=True)
        torch.set_num_threads(1)  # tiny head steps: more threads only spin on a shared CPU
        curves: dict[str, list[list[float]]] = {s: [] for s in strategies}
        for seed in seeds:
            for strategy in strategies:
                t0 = time.perf_counter()
                curve = run_curve(
                    feats, settings, strategy, seed, args.start, args.rounds, args.per_round
                )
                curves[strategy].append(curve)
                print(
                    f"{task} seed {seed} {strategy:>9}: "
                    + " ".join(f"{x:.4f}" for x in curve)
                    + f"  ({time.perf_counter() - t0:.0f} s)",
                    flush=True,
                )
        labels = [args.start + r * args.per_round for r in range(args.rounds + 1)]
        summary = {}
        for strategy, runs in curves.items():
            arr = np.asarray(runs)  # (seeds, rounds + 1)
            summary[strategy] = {
                "mean": np.round(arr.mean(0), 4).tolist(),
                "std": np.round(
                    arr.std(0, ddof=1) if len(arr) > 1 else np.zeros(arr.shape[1]), 4
                ).tolist(),
                "runs": np.round(arr, 4).tolist(),
            }
        rand_final = np.asarray(curves["random"])[:, -1] if "random" in curves else None
        verdict = {}
        for strategy in strategies:
            if strategy == "random" or rand_final is None:
                continue
            final = np.asarray(curves[strategy])[:, -1]
            diff = final - rand_final  # paired by seed (same start set)
            verdict[strategy] = {
                "final_minus_random_mean": round(float(diff.mean()), 4),
                "final_minus_random_per_seed": np.round(diff, 4).tolist(),
                "beats_random_every_seed": bool((diff > 0).all()),
            }
        results[task] = {
            "labels": labels,
            "test_macro_f1": summary,
            "vs_random": verdict,
            "encode_seconds": round(feats["encode_seconds"], 1),
            "train_size": len(feats["train"][1]),
            "test_size": len(feats["test"][1]),
        }

    total = time.perf_counter() - started
    out = {
        "benchmark": "active_learning",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "nice -n 5 python benchmarks/active_learning.py",
        "cpu": machine()["cpu"],
        "avx512": machine()["avx512"],
        "torch_threads": {"features": threads, "head_training": 1},
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "uptime": subprocess.run(
            ["uptime"], capture_output=True, text=True, check=False
        ).stdout.strip(),
        "model": DEFAULT_MODEL,
        "dtype": settings.dtype,
        "setup": {
            "start": args.start,
            "rounds": args.rounds,
            "per_round": args.per_round,
            "seeds": seeds,
            "epochs": args.epochs,
            "lr": settings.learning_rate,
            "retrain": "head-only, fresh head each round, best validation epoch",
            "disagree": "a second head trained on a bootstrap resample of the labelled set; "
            "documents where the two disagree, least sure first",
        },
        "tasks": results,
        "seconds": round(total, 1),
    }
    write_json(args.out, out, indent=2)
    plot(results, args.plot)
    print(json.dumps({t: r["vs_random"] for t, r in results.items()}, indent=2))
    print(f"total {total:.0f} s; wrote {args.out} and {args.plot}")


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 4), squeeze=False)
    for ax, (task, r) in zip(axes[0], results.items()):
        for strategy, s in r["test_macro_f1"].items():
            mean, std = np.asarray(s["mean"]), np.asarray(s["std"])
            # two labels: margin = 2 * top - 1 orders exactly as uncertain (the lines coincide)
            ax.plot(
                r["labels"],
                mean,
                marker="o",
                label=strategy,
                linestyle="--" if strategy == "margin" else "-",
            )
            ax.fill_between(r["labels"], mean - std, mean + std, alpha=0.15)
        ax.set_title(f"TweetEval {task}")
        ax.set_xlabel("labelled training examples")
        ax.set_ylabel("test macro-F1 (mean ± sd over seeds)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
