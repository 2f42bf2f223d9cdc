"""A search's hit documents fetched from a snapshot's row packs against decoding the same row
groups of its Parquet (`indexer.store.segment_fetch`), on a store's current version: random
sets of `--hits` doc ids, alternating rounds, one thread; the rows must be equal. Writes the
packs the store lacks first (what its next publish would do), and reports their size beside
the Parquet's.

    .venv/bin/python benchmarks/row_pack.py --store DIR/store \\
        --out benchmarks/results/row_pack_10m_intel.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from machine import machine, write_json

from indexer.store import Store, row_pack, segment_fetch
from indexer.store.reads import DOCUMENT_HIT_COLUMNS
from indexer.store.snapshot import read_manifest, segments_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--hits", type=int, default=10)
    parser.add_argument("--fetches", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with Store(args.store, read_only=True) as store:
        manifest = store.reads.core._snapshot.manifest
        doc_count = store.counts.documents()
    where = segments_dir(args.store)
    started = time.perf_counter()
    written = row_pack.write_missing(where, manifest)
    write_s = time.perf_counter() - started
    table = read_manifest(where / f"{manifest['id']}.json")["tables"]["documents"]
    rows = [s["rows"] for s in table["segments"] if s["rows"]]
    sizes = {
        "parquet_bytes": sum((where / r).stat().st_size for r in rows),
        "pack_bytes": sum((where / row_pack.pack_name(r)).stat().st_size for r in rows),
    }
    packed = segment_fetch.RowLookup(where, table, "doc_id")
    plain = segment_fetch.RowLookup(where, table, "doc_id")
    for part in plain._parts:
        part.pack = None  # the Parquet path
    top = int(max(p.highs.max() for p in packed._parts))
    rng = np.random.default_rng(0)
    sets = [rng.integers(1, top + 1, args.hits).tolist() for _ in range(args.fetches + 50)]
    for ids in sets[:50]:  # warm both (the page cache, pyarrow's readers)
        assert sorted(packed.fetch(ids, DOCUMENT_HIT_COLUMNS)) == sorted(
            plain.fetch(ids, DOCUMENT_HIT_COLUMNS)
        )
    ms: dict[str, list[float]] = {"pack": [], "parquet": []}
    pairs = [("pack", packed), ("parquet", plain)]
    for round_ in range(args.rounds):
        for name, lookup in pairs if round_ % 2 == 0 else pairs[::-1]:
            started = time.perf_counter()
            for ids in sets[50:]:
                lookup.fetch(ids, DOCUMENT_HIT_COLUMNS)
            ms[name].append(round((time.perf_counter() - started) * 1000 / args.fetches, 3))
    result = {
        "machine": machine(),
        "store": str(args.store),
        "documents": doc_count,
        "hits_per_fetch": args.hits,
        "packs_written": written,
        "pack_write_s": round(write_s, 1),
        **sizes,
        "ms_per_fetch": ms,
        "ratio_parquet_over_pack": round(min(ms["parquet"]) / min(ms["pack"]), 1),
    }
    print(json.dumps(result["ms_per_fetch"]), result["ratio_parquet_over_pack"])
    write_json(args.out, result)


if __name__ == "__main__":
    main()
