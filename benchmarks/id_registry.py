"""A run's id registry (`indexer.ingest.readers.IdRegistry`) claiming N distinct ids, the way
a 10M-row file is read: as now (a batch's 2,048 ids claimed at once, the arrays searched for
all of them in one call; every RECENT (65,536) claims inserted into the sorted arrays by
binary search) against the reference (one id at a time, each a binary search from Python,
and a lexsort of the whole arrays at every merge, as before), in one run.

    .venv/bin/python benchmarks/id_registry.py --sizes 1000000 3000000 \\
        --out benchmarks/results/id_registry.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine, write_json  # noqa: E402

from indexer.ingest.readers import IdRegistry  # noqa: E402


class LexsortRegistry(IdRegistry):
    """The reference: every merge sorts the whole arrays again."""

    def _insert(self, hi: np.ndarray, lo: np.ndarray, packed: np.ndarray) -> None:
        hi = np.concatenate([self._hi, hi])
        lo = np.concatenate([self._lo, lo])
        packed = np.concatenate([self._packed, packed])
        order = np.lexsort((lo, hi))
        self._hi, self._lo, self._packed = hi[order], lo[order], packed[order]


def claim_all(kind: type[IdRegistry], n: int, batched: bool) -> dict:
    registry = kind()
    started = time.perf_counter()
    if batched:
        for start in range(0, n, 2048):
            ids = [f"doc-{i}" for i in range(start, min(n, start + 2048))]
            rows = list(range(start + 1, start + 1 + len(ids)))
            registry.claim_many(ids, "corpus.jsonl", rows)
    else:
        for i in range(n):
            registry.claim(f"doc-{i}", "corpus.jsonl", i + 1)
    wall = time.perf_counter() - started
    # every id is taken once: a second claim finds the first
    probe = [f"doc-{i}" for i in range(0, n, max(1, n // 1000))]
    assert all(registry.claim(p, "again.jsonl", 1) is not None for p in probe)
    return {"wall_s": round(wall, 2), "us_per_id": round(wall / n * 1e6, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 3_000_000])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/id_registry.json"))
    args = parser.parse_args()
    rows = []
    for n in args.sizes:
        now = claim_all(IdRegistry, n, batched=True)
        reference = claim_all(LexsortRegistry, n, batched=False)
        row = {"n": n, "now": now, "reference": reference}
        row["speedup"] = round(reference["wall_s"] / now["wall_s"], 2)
        print(row, flush=True)
        rows.append(row)
    write_json(args.out, {"command": " ".join(sys.argv), "machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
