"""A search's hit documents fetched from a snapshot's row packs against decoding the same row
groups of its Parquet (`indexer.store.segment_fetch`), on a store's current version: random
sets of `--hits` doc ids, alternating rounds, one thread; the rows must be equal. Writes the
packs the store lacks first (what its next publish would do), and reports their size beside
the Parquet's. A third contender reads the packs through a mapping (as before they were read
with `pread`): its time, and how much of the packs the process holds mapped after its rounds
(`/proc/self/smaps` Rss of the pack files; the `pread` reader maps none).

    .venv/bin/python benchmarks/row_pack.py --store DIR/store \\
        --out benchmarks/results/row_pack_10m_intel.json
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
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
    opener = segment_fetch.open_pack
    segment_fetch.open_pack = lambda *a: None  # the Parquet path: its groups' own ranges
    plain = segment_fetch.RowLookup(where, table, "doc_id")
    segment_fetch.open_pack = opener
    mapped = segment_fetch.RowLookup(where, table, "doc_id")
    for part in mapped._parts:
        if part.pack is not None:
            part.pack.reader = ipc.open_file(
                pa.memory_map(str(part.path.with_name(row_pack.pack_name(part.path.name))))
            )
    top = int(max(p.highs.max() for p in packed._parts))
    rng = np.random.default_rng(0)
    sets = [rng.integers(1, top + 1, args.hits).tolist() for _ in range(args.fetches + 50)]
    for ids in sets[:50]:  # warm both (the page cache, pyarrow's readers)
        assert sorted(packed.fetch(ids, DOCUMENT_HIT_COLUMNS)) == sorted(
            plain.fetch(ids, DOCUMENT_HIT_COLUMNS)
        )
    ms: dict[str, list[float]] = {"pack": [], "parquet": [], "pack_mapped": []}
    pairs = [("pack", packed), ("parquet", plain), ("pack_mapped", mapped)]
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
        "ratio_mapped_over_pack": round(min(ms["pack_mapped"]) / min(ms["pack"]), 2),
        "pack_mb_mapped_after": mapped_mb(row_pack.SUFFIX),
    }
    print(json.dumps(result["ms_per_fetch"]), result["ratio_parquet_over_pack"])
    write_json(args.out, result)


def mapped_mb(suffix: str) -> float:
    """MB of files ending in `suffix` that this process holds mapped (smaps Rss)."""
    kb, current = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", head[0]):
            current = head[-1].endswith(suffix)
        elif current and line.startswith("Rss:"):
            kb += int(head[1])
    return round(kb / 1024, 1)


if __name__ == "__main__":
    main()
