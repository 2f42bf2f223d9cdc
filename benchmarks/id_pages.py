"""Looking up a query's candidates' ids in a mapped base whose ids stay in its file
(`version_files.read_shared_ids`), with those pages reclaimed first (`MADV_PAGEOUT`, as this
VM's DAMON does to idle pages): faulted in one after another, or asked for together first
(`rescore.prefetch`, what a search over a base with deleted ids does). Random candidate
positions, as many as a dense query rescores (`--candidates`), the two ways alternated.

    python benchmarks/id_pages.py --store DIR/store --config DIR/config.yaml --out FILE
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import summary, write_json

from indexer.index import rescore
from indexer.index.vector import VectorIndex
from search.cli.common import build_config

MADV_PAGEOUT = 21  # Linux 5.4


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--candidates", type=int, default=350)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config = build_config(str(args.config), str(args.store), None, None)
    index = VectorIndex.load(args.store, config.index)
    ids = rescore.ids_by_position(index.index)
    start = ids.ctypes.data - ids.ctypes.data % rescore.PAGE
    length = ids.ctypes.data + ids.nbytes - start
    rng = np.random.default_rng(0)
    walls: dict[str, list[float]] = {"faulted": [], "asked_together": []}
    for i in range(args.rounds):
        for name in ("faulted", "asked_together") if i % 2 == 0 else ("asked_together", "faulted"):
            rows = rng.integers(0, len(ids), args.candidates)
            assert rescore.MADVISE is not None
            rescore.MADVISE(start, length, MADV_PAGEOUT)
            began = time.perf_counter()
            if name == "asked_together":
                rescore.prefetch(ids[:, None], rows)
            int(ids[rows].sum())
            walls[name].append((time.perf_counter() - began) * 1e3)
    result = summary(
        ids=len(ids),
        candidates=args.candidates,
        rounds=args.rounds,
        p50_ms={name: round(statistics.median(w), 2) for name, w in walls.items()},
    )
    print(json.dumps({k: v for k, v in result.items() if k not in ("command", "machine")}))
    write_json(args.out, result)


if __name__ == "__main__":
    main()
