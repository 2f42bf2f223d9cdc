"""The seconds Python's cycle collector takes in one `bertindex index` run, by generation:
the command runs in this process with a `gc.callbacks` timer around every collection.

`--without-policy` runs it with `indexer.core.gc_policy.fewer_collections` replaced by a
block that changes nothing (the collector as CPython sets it), to see what the policy saves;
run both, alternated, on the same store (a 1 % re-run flips between `corpus.jsonl` and
`changed/corpus.jsonl` of a `benchmarks/scale.py` folder, each re-encoding the same 1 %).

    .venv/bin/python benchmarks/gc_share.py --out /tmp/gc.json -- index DIR/n1000000/corpus.jsonl \\
        --store DIR/n1000000/store --config DIR/n1000000/config.yaml --json
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from machine import machine, write_json  # noqa: E402


class Timer:
    """Collections and their seconds, by generation."""

    def __init__(self) -> None:
        self.counts, self.seconds, self.started = [0, 0, 0], [0.0, 0.0, 0.0], 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.counts[info["generation"]] += 1
            self.seconds[info["generation"]] += time.perf_counter() - self.started


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--without-policy", action="store_true")
    parser.add_argument("--out", type=Path)
    parser.add_argument("command", nargs="+", help="bertindex's arguments, after --")
    args = parser.parse_args()
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if args.without_policy:
        from indexer.core import gc_policy

        gc_policy.THRESHOLDS = gc.get_threshold()
        gc_policy.gc = _NoFreeze()  # type: ignore[assignment]
    from search.cli.main import main as cli

    timer = Timer()
    gc.callbacks.append(timer)
    out, started = io.StringIO(), time.perf_counter()
    with contextlib.redirect_stdout(out):
        cli.main(args.command, prog_name="bertindex", standalone_mode=False)
    wall = time.perf_counter() - started
    gc.callbacks.remove(timer)
    summary = json.loads(out.getvalue())
    report = {
        "command": " ".join(sys.argv),
        "machine": machine(),
        "policy": not args.without_policy,
        "wall_s": round(wall, 2),
        "collections": timer.counts,
        "collection_s": [round(s, 2) for s in timer.seconds],
        "stages": summary.get("stages"),
        "encoded": summary.get("encoded"),
    }
    print(json.dumps(report))
    if args.out:
        write_json(args.out, report)


class _NoFreeze:
    """`gc` for the policy, with freezing left out (the thresholds are the defaults)."""

    def __getattr__(self, name: str):
        if name in ("freeze", "unfreeze"):
            return lambda: None
        return getattr(gc, name)


if __name__ == "__main__":
    run()
