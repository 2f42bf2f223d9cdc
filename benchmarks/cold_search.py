"""Cold one-off searches of two checkouts, alternated: `bertindex search QUERY --json` in a
fresh process per query and checkout, on one store, in ABBA order (the first process to run a
query may read from disk the index lists it probes, the second finds them cached, so neither
checkout always runs first). Prints, for each checkout, the p50 wall over every query and over
the queries it ran second (lists cached).

    python benchmarks/cold_search.py --store DIR/store --config DIR/config.yaml \
        --queries DIR/tune_queries.txt --trees /path/to/old-checkout . --out FILE

A checkout is run with itself first on `PYTHONPATH` (same venv, same libraries).
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import held_out, machine, store_options, write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    store_options(parser, skip=500, count=20)
    parser.add_argument("--trees", type=Path, nargs=2, required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    queries = held_out(args)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    trees = [str(t.resolve()) for t in args.trees]
    walls: dict[str, list[float]] = {t: [] for t in trees}
    second: dict[str, list[float]] = {t: [] for t in trees}
    for i, query in enumerate(queries):
        for position, tree in enumerate(trees if i % 2 == 0 else trees[::-1]):
            command = [sys.executable, "-c", "from search.cli.main import run; run()", "search"]
            command += [query, "--store", str(args.store), "--config", str(args.config), "--json"]
            start = time.perf_counter()
            subprocess.run(
                command,
                cwd=tree,
                env=dict(env, PYTHONPATH=tree),
                check=True,
                stdout=subprocess.DEVNULL,
            )
            wall = round(time.perf_counter() - start, 3)
            walls[tree].append(wall)
            if position == 1:
                second[tree].append(wall)
    result = {
        "command": " ".join(sys.argv),
        "machine": machine(),
        "queries": len(queries),
        "trees": {
            t: {
                "p50_s": statistics.median(walls[t]),
                "p50_run_second_s": statistics.median(second[t]),
                "walls_s": walls[t],
            }
            for t in trees
        },
    }
    print(
        json.dumps(
            {t: {k: v for k, v in r.items() if k != "walls_s"} for t, r in result["trees"].items()}
        )
    )
    write_json(args.out, result)


if __name__ == "__main__":
    main()
