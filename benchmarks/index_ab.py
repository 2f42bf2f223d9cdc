"""`bertindex index` from an empty store with this tree's code against another tree's,
alternated in one run: what a change to the index run costs or saves, in wall time and in CPU
seconds of every process the run starts (the command, the Prefect API server it launches).

`benchmarks/scale.py` leaves a size's folder with `corpus.jsonl` and `config.yaml` (the
near-free encoder). Each run indexes the corpus into a new store under `--work` (removed
after the run) with the code of one tree, as `bertindex index --json` in its own process.
CPU seconds are the run's and its children's (`RUSAGE_CHILDREN`: the Prefect server is
stopped and waited before `bertindex` exits, so its CPU is counted).

    .venv/bin/python benchmarks/index_ab.py --folder DIR/n1000000 --other /work/old \\
        --work /tmp/ab --rounds 2 --out benchmarks/results/index_ab_prefect_tasks_1M_intel_s25.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import machine, write_json  # noqa: E402


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def index(tree: Path, corpus: Path, store: Path, config: Path) -> dict:
    """`bertindex index CORPUS --json` into `store` with the code of `tree`: wall, CPU of the
    run and its children, and the summary's counts and stages (also `changed_rerun_ab.py`'s)."""
    command = [sys.executable, "-m", "search.cli.main", "index", str(corpus)]
    command += ["--store", str(store), "--config", str(config), "--json"]
    env = dict(os.environ, PYTHONPATH=str(tree), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    env.pop("PREFECT_API_URL", None)  # each run starts its own temporary API, as a user's does
    cpu, started = children_cpu(), time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    summary = json.loads(done.stdout)
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(children_cpu() - cpu, 1),
        "encoded": summary["encoded"],
        "docs_per_s": round(summary["encoded"] / wall, 1),
        "stages": summary["stages"],
    }


def in_turn(round_: int, other: Path) -> list[tuple[str, Path]]:
    """The two codes in the order they run in `round_`: this, other in even rounds, other,
    this in odd ones (also `changed_rerun_ab.py`'s and `serve_ab.py`'s)."""
    order = [("this", ROOT), ("other", other)]
    return order if round_ % 2 == 0 else order[::-1]


def alternate(args, report: dict, measure: Callable[[str, int, Path], dict]) -> None:
    """`args.rounds` rounds of `measure(code, round, tree)` for each code in turn (`in_turn`), each
    run's record appended to `report["runs"]`, printed, and `report` written to `args.out`."""
    for round_ in range(args.rounds):
        for name, tree in in_turn(round_, args.other):
            record = {"code": name, "round": round_, **measure(name, round_, tree)}
            report["runs"].append(record)
            print(json.dumps(record), flush=True)
            write_json(args.out, report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, required=True, help="a size's folder of scale.py")
    parser.add_argument("--other", type=Path, required=True, help="a checkout of the other code")
    parser.add_argument("--work", type=Path, required=True, help="the runs' stores go here")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report: dict = {"command": " ".join(sys.argv), "machine": machine(), "runs": []}
    corpus, config = args.folder / "corpus.jsonl", args.folder / "config.yaml"

    def measure(name: str, round_: int, tree: Path) -> dict:
        store = args.work / f"store-{name}-{round_}"
        shutil.rmtree(store, ignore_errors=True)
        try:
            return index(tree, corpus, store, config)
        finally:
            shutil.rmtree(store, ignore_errors=True)

    alternate(args, report, measure)
    for name in ("this", "other"):
        runs = [r for r in report["runs"] if r["code"] == name]
        report[name] = {
            key: round(sum(r[key] for r in runs) / len(runs), 1)
            for key in ("wall_s", "cpu_s", "docs_per_s")
        }
    report["docs_per_s_ratio"] = round(
        report["this"]["docs_per_s"] / report["other"]["docs_per_s"], 3
    )
    print(json.dumps({k: report[k] for k in ("this", "other", "docs_per_s_ratio")}))
    write_json(args.out, report)


if __name__ == "__main__":
    main()
