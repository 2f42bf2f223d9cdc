"""A publish's snapshot diff on a store with nothing changed since its last version: wall time
and the peak size of DuckDB's temporary files (sampled every 50 ms), the writer's connection
and memory limit. Writes a manifest and the runs/source_files segments of an unpublished
version into the store's segments folder, which the next publish collects
(`segments.collect_segments`); run it on a store no writer is using.

    .venv/bin/python benchmarks/snapshot_diff.py --store DIR/store \\
        --out benchmarks/results/snapshot_diff_10m_intel.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import threading
import time
from pathlib import Path

from machine import machine, write_json

from indexer.store import Store
from indexer.store.segments import collect_segments, publish_segments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    temp = Path(str(args.store / "store.duckdb") + ".tmp")
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            files = list(temp.glob("*")) if temp.is_dir() else []
            peak[0] = max(peak[0], sum(f.stat().st_size for f in files if f.is_file()))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    folder = args.store / "index" / ".vdiff.tmp"
    folder.mkdir(exist_ok=True)
    try:
        with Store(args.store) as store:
            started = time.perf_counter()
            publish_segments(store.con, folder)
            wall = time.perf_counter() - started
    finally:
        done.set()
        sampler.join()
        shutil.rmtree(folder, ignore_errors=True)
    collect_segments(args.store)
    result = {
        "machine": machine(),
        "store": str(args.store),
        "wall_s": round(wall, 1),
        "peak_temp_mb": round(peak[0] / 2**20, 1),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}))
    write_json(args.out, result)


if __name__ == "__main__":
    main()
