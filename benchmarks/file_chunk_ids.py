"""The chunk ids that have a vector in a recorded file (`Vectors.ids_sql`, which `status`,
`doctor` and dedup join on): the block equality join against the range join it replaced, in
one run, under the writer's 128 MB and 2 threads.

A DuckDB file with the tables those queries read is generated: `--n` documents of one chunk each
in three collections, random character spans, and one vector file record per 2,048 chunks (as
an index run commits them). Each query runs twice in its own connection: the count of the ids,
and `Counts.collections`' per-collection query; seconds, or the error.

    .venv/bin/python benchmarks/file_chunk_ids.py --n 10000000 --out FILE
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from machine import machine, write_json  # noqa: E402

from indexer.store.counts import COLLECTION_COUNTS, VECTORS_PER_COLLECTION  # noqa: E402
from indexer.store.vectors import FILE_CHUNK_IDS  # noqa: E402

RANGE_JOIN = (  # before: one range per file
    "SELECT c.chunk_id FROM chunks c JOIN vector_files f "
    "ON c.chunk_id >= f.first_chunk_id AND c.chunk_id < f.first_chunk_id + f.n_rows"
)


def generate(path: Path, n: int) -> None:
    con = duckdb.connect(str(path))
    con.execute(
        "CREATE TABLE documents AS SELECT range AS doc_id, 'c' || (hash(range) % 3)::VARCHAR "
        "AS collection, md5(range::VARCHAR) AS content_hash FROM range(?)",
        [n],
    )
    con.execute(
        "CREATE TABLE chunks AS SELECT range AS chunk_id, range AS doc_id, 0 AS ordinal, "
        "(hash(range) % 100)::INTEGER AS start_char, (hash(range) % 300)::INTEGER + 100 "
        "AS end_char FROM range(?)",
        [n],
    )
    con.execute("CREATE TABLE vectors (chunk_id BIGINT, embedding FLOAT[384])")
    con.execute(
        "CREATE TABLE vector_files AS SELECT 'c' || range::VARCHAR || '.npy' AS name, range AS "
        "first_chunk_id, least(2048, ? - range)::BIGINT AS n_rows, 0::BIGINT AS bytes, "
        "now()::TIMESTAMP AS created_at FROM range(0, ?, 2048)",
        [n, n],
    )
    con.close()


def timed(path: Path, query: str) -> dict:
    con = duckdb.connect(str(path), read_only=True, config={"memory_limit": "128MB", "threads": 2})
    started = time.perf_counter()
    try:
        rows = con.execute(query).fetchall()
        return {"seconds": round(time.perf_counter() - started, 2), "rows": len(rows)}
    except duckdb.Error as exc:
        return {"seconds": round(time.perf_counter() - started, 2), "error": str(exc)[:300]}
    finally:
        con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=Path("/tmp/bertindex-file-chunk-ids"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    path = args.work / f"chunks-{args.n}.duckdb"
    path.unlink(missing_ok=True)
    generate(path, args.n)
    report: dict = {"machine": machine(), "n": args.n, "memory_limit": "128MB", "queries": {}}
    for name, files in (("range_join", RANGE_JOIN), ("blocks", FILE_CHUNK_IDS)):
        ids = f"(SELECT chunk_id FROM vectors UNION ALL {files})"
        collections = COLLECTION_COUNTS.format(vectors=VECTORS_PER_COLLECTION.format(ids=ids))
        report["queries"][name] = {
            "count": [timed(path, f"SELECT count(*) FROM {ids}") for _ in range(2)],
            "collections": [timed(path, collections) for _ in range(2)],
        }
        print(name, report["queries"][name], flush=True)
    write_json(args.out, report)
    path.unlink()


if __name__ == "__main__":
    main()
