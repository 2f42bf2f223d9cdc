"""Id lists in DuckDB: bound as a `?::BIGINT[]` / `?::VARCHAR[]` parameter against a registered
Arrow view (`indexer.store.core.StoreCore.bound`), on one table of `--rows` documents.

Prints the seconds of each for `--ids` ids (best of `--repeats`) and their ratio.
Usage: python benchmarks/bound_ids.py [--rows 1000000] [--ids 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path


def best_of(repeats: int, run) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        run()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--ids", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    import pyarrow as pa

    from indexer.store import Store

    with tempfile.TemporaryDirectory(prefix="bertindex-bound-") as tmp, Store(Path(tmp)) as store:
        con = store.con
        con.execute(
            "CREATE TEMP TABLE t AS SELECT range AS doc_id, 'doc-' || range::VARCHAR AS "
            "external_id FROM range(?)",
            [args.rows],
        )
        step = max(1, args.rows // args.ids)
        ints = list(range(0, args.rows, step))[: args.ids]
        strs = [f"doc-{i}" for i in ints]
        for name, values, column, sql_type, kind in (
            ("BIGINT ids", ints, "doc_id", "BIGINT", pa.int64()),
            ("VARCHAR ids", strs, "external_id", "VARCHAR", pa.string()),
        ):

            def as_list(values=values, column=column, sql_type=sql_type):
                con.execute(
                    f"SELECT count(*) FROM t WHERE {column} IN (SELECT unnest(?::{sql_type}[]))",
                    [values],
                ).fetchall()

            def as_view(values=values, column=column, kind=kind):
                with store.bound(values, kind) as ref:
                    con.execute(f"SELECT count(*) FROM t WHERE {column} IN {ref}").fetchall()

            listed, viewed = best_of(args.repeats, as_list), best_of(args.repeats, as_view)
            print(
                f"{name}: {len(values)} of {args.rows} rows: list parameter {listed:.3f} s, "
                f"Arrow view {viewed:.3f} s, {listed / viewed:.1f}x"
            )


if __name__ == "__main__":
    main()
