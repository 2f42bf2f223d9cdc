"""Fetching a search's documents from a snapshot segment: lookup time by Parquet row-group size
and compression, on a real segment of a store (`index/segments/documents-*.parquet`).

A search fetches its k hits' documents by doc id from the version's Parquet segments. Two
readers: DuckDB over the snapshot's views (`views`: skips the row groups whose doc_id min/max
miss every id after walking all their statistics, decodes the rest whole) and the direct read
searches use (`direct`: `indexer.store.segment_fetch.RowLookup`, which decodes only the row
groups holding a wanted id). The segment is rewritten with each setting (sorted by doc_id, as a
publish writes it) and 10 random ids are fetched, as a search's page does.

    .venv/bin/python benchmarks/row_groups.py --segment STORE/index/segments/documents-1.parquet \\
        --out benchmarks/results/row_groups.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
from machine import machine, write_json

from indexer.store.segment_fetch import RowLookup

COLUMNS = "doc_id, collection, external_id, title, text, metadata"  # `reads.fetch_documents`


def lookups(con, path: Path, top: int, rounds: int, rng) -> list[float]:
    out = []
    for _ in range(rounds):
        ids = ",".join(str(i) for i in sorted(rng.integers(1, top + 1, 10).tolist()))
        start = time.perf_counter()
        con.execute(f"SELECT {COLUMNS} FROM read_parquet('{path}') WHERE doc_id IN ({ids})")
        con.fetchall()
        out.append((time.perf_counter() - start) * 1000)
    return out


def direct(path: Path, columns: list, top: int, rounds: int, rng) -> list[float]:
    table = {"columns": columns, "segments": [{"rows": path.name, "dead": None, "n_dead": 0}]}
    lookup = RowLookup(path.parent, table, "doc_id")
    wanted = COLUMNS.split(", ")
    out = []
    for _ in range(rounds):
        ids = rng.integers(1, top + 1, 10).tolist()
        start = time.perf_counter()
        lookup.fetch(ids, wanted)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segment", type=Path, required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8192, 2048])
    parser.add_argument("--compressions", nargs="+", default=["zstd", "lz4_raw"])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    con = duckdb.connect()
    con.execute("SET parquet_metadata_cache = true")  # as the snapshot views do
    top = con.execute(f"SELECT max(doc_id) FROM read_parquet('{args.segment}')").fetchone()[0]
    rows = con.execute(f"SELECT count(*) FROM read_parquet('{args.segment}')").fetchone()[0]
    results = []
    with tempfile.TemporaryDirectory(dir=args.segment.parent.parent) as tmp:
        for comp in args.compressions:
            for size in args.sizes:
                path = Path(tmp) / f"documents_{comp}_{size}.parquet"
                con.execute(
                    f"COPY (SELECT * FROM read_parquet('{args.segment}') ORDER BY doc_id) TO "
                    f"'{path}' (FORMAT parquet, COMPRESSION {comp}, ROW_GROUP_SIZE {size})"
                )
                rng = np.random.default_rng(0)
                lookups(con, path, top, 20, rng)  # metadata cached, pages warm
                times = lookups(con, path, top, args.rounds, rng)
                columns = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()
                direct(path, [c[:2] for c in columns], top, 20, rng)
                fast = direct(path, [c[:2] for c in columns], top, args.rounds, rng)
                results.append(
                    {
                        "compression": comp,
                        "row_group_size": size,
                        "bytes": os.path.getsize(path),
                        "p50_ms": round(statistics.median(times), 2),
                        "p90_ms": round(float(np.percentile(times, 90)), 2),
                        "direct_p50_ms": round(statistics.median(fast), 2),
                        "direct_p90_ms": round(float(np.percentile(fast, 90)), 2),
                    }
                )
                print(results[-1], flush=True)
    report = {"machine": machine(), "segment_rows": rows, "ids_per_fetch": 10, "results": results}
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    main()
